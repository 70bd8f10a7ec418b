"""The split-K / stream-K workspace of humming.api: growing it must not free the old one (a CUDA graph captured
before holds its address)."""
from __future__ import annotations

import torch

from humming import api


def test_grown_workspace_keeps_the_old_one_alive(monkeypatch):
    monkeypatch.setattr(api, "_workspaces", {})
    monkeypatch.setattr(api, "_retired_workspaces", [])
    dev = torch.device("cpu", 0)  # the bookkeeping is the same on any device
    ws, cnt = api._workspace(dev, 1 << 20, 1 << 14)
    assert api._workspace(dev, 1000, 10)[0] is ws  # big enough: reused
    grown, grown_cnt = api._workspace(dev, (1 << 20) + 1, 1 << 14)
    assert grown.numel() > ws.numel() and grown_cnt.numel() >= cnt.numel()
    assert any(old is ws and old_cnt is cnt for old, old_cnt in api._retired_workspaces)
    assert api._workspace(dev, 5, 5)[0] is grown
