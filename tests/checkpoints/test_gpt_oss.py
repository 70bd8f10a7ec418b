"""gpt-oss MXFP4 blocks/scales import (stacked experts)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from humming.checkpoints import from_gpt_oss, import_tensors
from humming.errors import SchemeError, ShapeError

from ._writers import FP4_VALUES, pack_nibbles


def build(e=3, n=16, g=4, seed=0):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 16, size=(e, n, g * 32))
    scales = rng.integers(110, 135, size=(e, n, g)).astype(np.uint8)
    blocks = pack_nibbles(codes).reshape(e, n, g, 16)
    # the gpt-oss reference: lut[nibble] * 2**(scale - 127)
    w = np.ldexp(np.array(FP4_VALUES)[codes], np.repeat(scales.astype(np.int64) - 127, 32, axis=2))
    return torch.from_numpy(blocks), torch.from_numpy(scales), torch.from_numpy(w.astype(np.float32))


def test_gpt_oss_experts():
    blocks, scales, w = build()
    qws = from_gpt_oss(blocks, scales)
    assert isinstance(qws, list) and len(qws) == 3
    for i, qw in enumerate(qws):
        assert qw.scheme.name == "w4a16-mxfp4" and qw.shape == (16, 128)
        assert torch.equal(qw.dequantize(), w[i])
    one = from_gpt_oss(blocks, scales, expert=1)
    assert torch.equal(one.dequantize(), w[1])


def test_gpt_oss_names_and_bias():
    blocks, scales, w = build(seed=1)
    bias = torch.randn(3, 16, dtype=torch.bfloat16)
    hf = {"m.experts.gate_up_proj_blocks": blocks, "m.experts.gate_up_proj_scales": scales,
          "m.experts.gate_up_proj_bias": bias}
    qw = import_tensors(hf, "m.experts.gate_up_proj", "gpt-oss", expert=2)
    assert torch.equal(qw.dequantize(), w[2]) and torch.equal(qw.bias, bias[2])
    orig = {"block.0.mlp.mlp1_weight.blocks": blocks[0], "block.0.mlp.mlp1_weight.scales": scales[0]}
    assert torch.equal(import_tensors(orig, "block.0.mlp.mlp1_weight", "gpt_oss").dequantize(), w[0])


def test_malformed_gpt_oss():
    blocks, scales, _ = build()
    with pytest.raises(ShapeError, match=r"blocks must be \[\.\.\., N, G, 16\]"):
        from_gpt_oss(blocks[..., :8], scales)
    with pytest.raises(ShapeError, match="scales must have shape"):
        from_gpt_oss(blocks, scales[:, :, :2])
    with pytest.raises(ShapeError, match="blocks must be uint8"):
        from_gpt_oss(blocks.to(torch.int16), scales)
    with pytest.raises(ShapeError, match="expert 5 out of range"):
        from_gpt_oss(blocks, scales, expert=5)
    with pytest.raises(SchemeError, match="blocks' is missing"):
        import_tensors({"x.scales": scales}, "x", "gpt-oss")
