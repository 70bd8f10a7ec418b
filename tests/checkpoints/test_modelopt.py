"""ModelOpt NVFP4 and FP8 import."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from humming.checkpoints import import_tensors, modelopt
from humming.errors import SchemeError, ShapeError

from ._writers import FP4_VALUES, pack_nibbles, random_e4m3_scales


def nvfp4(n=64, k=128, seed=0):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 16, size=(n, k))
    st, sv = random_e4m3_scales(rng, (n, k // 16))
    ws2 = np.float32(rng.uniform(1e-4, 1e-2))
    t = {"weight": torch.from_numpy(pack_nibbles(codes)), "weight_scale": st,
         "weight_scale_2": torch.tensor(ws2), "input_scale": torch.tensor(np.float32(0.002))}
    # W = e2m1 * weight_scale * weight_scale_2, evaluated left to right in float32
    w = (np.array(FP4_VALUES, dtype=np.float32)[codes] * np.repeat(sv, 16, axis=1).astype(np.float32)) * ws2
    return t, torch.from_numpy(w.astype(np.float32))


def test_modelopt_nvfp4_formula_exact():
    t, w = nvfp4()
    qw = modelopt.load(t)
    assert qw.scheme.name == "w4a16-nvfp4" and qw.scheme.act == "e2m1" and qw.scheme.act_scale.global_scale
    assert qw.scales.dtype == torch.float8_e4m3fn and qw.global_scale.item() == t["weight_scale_2"].item()
    assert qw.input_scale.item() == pytest.approx(0.002)
    assert torch.equal(qw.dequantize(), w)
    no_in = modelopt.load({k: v for k, v in t.items() if k != "input_scale"})
    assert no_in.scheme.act is None and torch.equal(no_in.dequantize(), w)


def test_modelopt_fp8():
    wt = torch.randn(32, 64).to(torch.float8_e4m3fn)
    qw = import_tensors({"p.weight": wt, "p.weight_scale": torch.tensor(0.125), "p.input_scale": torch.tensor(0.5)},
                        "p", "modelopt")
    assert qw.scheme.weight == "e4m3" and qw.scheme.act_scale.mode == "static_tensor"
    assert torch.equal(qw.dequantize(), wt.float() * 0.125) and qw.input_scale.item() == 0.5


def test_malformed_modelopt():
    t, _ = nvfp4()
    with pytest.raises(ShapeError, match=r"weight_scale must have shape \[64, 8\]"):
        modelopt.load(dict(t, weight_scale=t["weight_scale"][:, :4]))
    with pytest.raises(ShapeError, match="weight_scale must be float8_e4m3fn"):
        modelopt.load(dict(t, weight_scale=t["weight_scale"].float()))
    with pytest.raises(ShapeError, match="weight_scale_2 must be one float32 value"):
        modelopt.load(dict(t, weight_scale_2=torch.ones(2)))
    with pytest.raises(SchemeError, match="weight_scale_2' is missing"):
        modelopt.load({k: v for k, v in t.items() if k != "weight_scale_2"})
    with pytest.raises(SchemeError, match="quant_algo"):
        modelopt.load(t, quant_algo="INT4_AWQ")
