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
    stacked = from_gpt_oss(blocks, scales)
    assert stacked.num_experts == 3 and stacked.shape == (16, 128) and stacked.scheme.name == "w4a16-mxfp4"
    assert torch.equal(stacked.dequantize(), w)
    for i in range(3):
        qw = from_gpt_oss(blocks[i], scales[i])
        assert qw.num_experts is None and qw.scheme.name == "w4a16-mxfp4" and qw.shape == (16, 128)
        assert torch.equal(qw.dequantize(), w[i])
        assert torch.equal(stacked.expert(i).packed, qw.packed) and torch.equal(stacked.expert(i).scales, qw.scales)
    one = from_gpt_oss(blocks, scales, expert=1)
    assert one.num_experts is None and torch.equal(one.dequantize(), w[1])


def test_gpt_oss_names_and_bias():
    blocks, scales, w = build(seed=1)
    bias = torch.randn(3, 16, dtype=torch.bfloat16)
    hf = {"m.experts.gate_up_proj_blocks": blocks, "m.experts.gate_up_proj_scales": scales,
          "m.experts.gate_up_proj_bias": bias}
    qw = import_tensors(hf, "m.experts.gate_up_proj", "gpt-oss", expert=2)
    assert torch.equal(qw.dequantize(), w[2]) and torch.equal(qw.bias, bias[2])
    stacked = import_tensors(hf, "m.experts.gate_up_proj", "gpt-oss")
    assert stacked.num_experts == 3 and torch.equal(stacked.bias, bias) and torch.equal(stacked.dequantize(), w)
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
    with pytest.raises(ShapeError, match="expert=1 needs stacked blocks"):
        from_gpt_oss(blocks[0], scales[0], expert=1)
    with pytest.raises(ShapeError, match=r"stacked bias must be \[E=3, N\]"):
        from_gpt_oss(blocks, scales, bias=torch.zeros(16))
    with pytest.raises(SchemeError, match="blocks' is missing"):
        import_tensors({"x.scales": scales}, "x", "gpt-oss")
