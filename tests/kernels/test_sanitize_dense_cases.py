"""Every case of scripts/sanitize_dense.py (the program compute-sanitizer runs on the GPU) quantizes and plans on the
H100 profile to the kernel form its name promises, so a device run never stops at a case of its own."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

import humming
from humming.core.tuning import knobs

_SPEC = importlib.util.spec_from_file_location(
    "sanitize_dense", Path(__file__).resolve().parents[2] / "scripts" / "sanitize_dense.py")
sanitize_dense = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(sanitize_dense)

# the kernel-name part each case is for
EXPECTED = {"stream": "_stream_", "register-a": "_wgmmars_", "tile": "_tile_", "w8a8-mma": "hm_w8a8_s8",
            "w8a8-wgmma": "hm_w8a8_wgmma", "w8a8-block-mma": "hm_w8a8blk_e4m3", "w8a8-block-wgmma": "hm_w8a8blk_wgmma",
            "w4a8": "hm_w4a8_wgmma", "widened": "_ts", "upconvert": "_tile_float4_bf16"}


def test_every_case_quantizes_and_plans_its_form():
    names = [c[0] for c in sanitize_dense.CASES]
    assert len(names) == len(set(names))
    for name, scheme, m, n, k in sanitize_dense.CASES:
        humming.quantize(torch.randn(n, k) * 0.05, scheme)
        with knobs.override(sanitize_dense.CASE_KNOBS.get(name, {})):
            p = humming.plan(scheme, m, n, k, profile="nvidia-h100")
        want = next(v for key, v in EXPECTED.items() if name.startswith(key))
        assert want in p.kernel_name, (name, p.kernel_name)
        assert p.padded == ("padded" in name), (name, p.summary())
        if name.endswith("cluster"):
            assert p.cluster_splits, p.explain()
        if name.startswith("register-a-streamk"):  # persistent blocks; the first in clusters of two
            assert p.tiles.streamk and bool(p.tiles.cluster) == (name == "register-a-streamk"), p.kernel_name
