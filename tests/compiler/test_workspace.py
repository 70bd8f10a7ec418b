"""The split-K / stream-K workspace of the runtime (humming.core.runtime.launch): growing it must not free the old one
(a CUDA graph captured before holds its address); each stream has its own (GEMMs running at the same time on two
streams must not share partials and counters)."""
from __future__ import annotations

import torch

from humming.core.runtime import launch


def test_grown_workspace_keeps_the_old_one_alive(monkeypatch):
    monkeypatch.setattr(launch, "workspaces", {})
    monkeypatch.setattr(launch, "retired_workspaces", [])
    dev = torch.device("cpu", 0)  # the bookkeeping is the same on any device
    ws, cnt = launch.workspace(dev, 1 << 20, 1 << 14, stream=7)
    assert launch.workspace(dev, 1000, 10, stream=7)[0] is ws  # big enough: reused
    grown, grown_cnt = launch.workspace(dev, (1 << 20) + 1, 1 << 14, stream=7)
    assert grown.numel() > ws.numel() and grown_cnt.numel() >= cnt.numel()
    assert any(old is ws and old_cnt is cnt for old, old_cnt in launch.retired_workspaces)
    assert launch.workspace(dev, 5, 5, stream=7)[0] is grown


def test_each_stream_has_its_own_workspace(monkeypatch):
    monkeypatch.setattr(launch, "workspaces", {})
    monkeypatch.setattr(launch, "retired_workspaces", [])
    dev = torch.device("cpu", 0)
    a, a_cnt = launch.workspace(dev, 1000, 10, stream=1)
    b, b_cnt = launch.workspace(dev, 1000, 10, stream=2)
    assert a is not b and a_cnt is not b_cnt and int(b_cnt.abs().sum()) == 0  # counters start at zero
    assert launch.workspace(dev, 1000, 10, stream=1)[0] is a and launch.workspace(dev, 1000, 10, stream=2)[0] is b
    assert not launch.retired_workspaces  # a second stream replaces nothing
