"""The split-K / stream-K workspace of humming.api: growing it must not free the old one (a CUDA graph captured
before holds its address); each stream has its own (GEMMs running at the same time on two streams must not share
partials and counters)."""
from __future__ import annotations

import torch

from humming import api


def test_grown_workspace_keeps_the_old_one_alive(monkeypatch):
    monkeypatch.setattr(api, "_workspaces", {})
    monkeypatch.setattr(api, "_retired_workspaces", [])
    dev = torch.device("cpu", 0)  # the bookkeeping is the same on any device
    ws, cnt = api._workspace(dev, 1 << 20, 1 << 14, stream=7)
    assert api._workspace(dev, 1000, 10, stream=7)[0] is ws  # big enough: reused
    grown, grown_cnt = api._workspace(dev, (1 << 20) + 1, 1 << 14, stream=7)
    assert grown.numel() > ws.numel() and grown_cnt.numel() >= cnt.numel()
    assert any(old is ws and old_cnt is cnt for old, old_cnt in api._retired_workspaces)
    assert api._workspace(dev, 5, 5, stream=7)[0] is grown


def test_each_stream_has_its_own_workspace(monkeypatch):
    monkeypatch.setattr(api, "_workspaces", {})
    monkeypatch.setattr(api, "_retired_workspaces", [])
    dev = torch.device("cpu", 0)
    a, a_cnt = api._workspace(dev, 1000, 10, stream=1)
    b, b_cnt = api._workspace(dev, 1000, 10, stream=2)
    assert a is not b and a_cnt is not b_cnt and int(b_cnt.abs().sum()) == 0  # counters start at zero
    assert api._workspace(dev, 1000, 10, stream=1)[0] is a and api._workspace(dev, 1000, 10, stream=2)[0] is b
    assert not api._retired_workspaces  # a second stream replaces nothing
