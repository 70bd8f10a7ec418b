"""CPU: parts of quantized weights without requantizing (humming.core.quant.slicing): each part dequantizes to exactly
the matching part of the whole, for every scale layout; named errors where a part would split a scale group."""
from __future__ import annotations

import pytest
import torch

import humming
from humming.core.quant.slicing import permute_columns, permute_rows, slice_columns, slice_experts, take_rows
from humming.errors import SchemeError, ShapeError

# scheme, keywords, (N, K), row ranges, column range
CASES = [
    ("w4a16", {"group_size": 32}, (64, 256), [(0, 16), (48, 64)], (32, 96)),
    ("w3a16", {"group_size": 32}, (64, 256), [(8, 24)], (160, 256)),
    ("w4a16-zp", {"group_size": 32}, (64, 256), [(40, 64), (0, 8)], (0, 64)),
    ("w8a16", {}, (64, 256), [(3, 17)], (2, 251)),  # channel scales: columns off word boundaries are repacked
    ("w8a8-fp8-tensor", {}, (64, 256), [(0, 1)], (5, 6)),
    ("w4a16-nvfp4", {}, (64, 256), [(16, 32), (48, 64)], (16, 64)),
    ("w8a8-fp8-block", {}, (320, 300), [(128, 256), (256, 320)], (128, 300)),  # partial last blocks
]


@pytest.mark.parametrize("scheme,kw,shape,rows,cols", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("experts", [None, 3])
def test_parts_dequantize_to_the_parts(scheme, kw, shape, rows, cols, experts):
    torch.manual_seed(0)
    lead = () if experts is None else (experts,)
    qw = humming.quantize(torch.randn(*lead, *shape), scheme, **kw)
    whole = qw.dequantize()
    want_rows = torch.cat([whole[..., s:e, :] for s, e in rows], dim=-2)
    assert torch.equal(take_rows(qw, rows).dequantize(), want_rows)
    assert torch.equal(slice_columns(qw, *cols).dequantize(), whole[..., cols[0]:cols[1]])
    if experts:
        assert torch.equal(slice_experts(qw, 1, 3).dequantize(), whole[1:3])


def test_bias_follows_rows_and_experts():
    torch.manual_seed(1)
    qw = humming.quantize(torch.randn(4, 32, 64), "w4a16", group_size=32, bias=torch.randn(4, 32))
    assert torch.equal(take_rows(qw, [(8, 16), (0, 4)]).bias, torch.cat([qw.bias[:, 8:16], qw.bias[:, :4]], 1))
    assert torch.equal(slice_experts(qw, 2, 4).bias, qw.bias[2:4])
    assert torch.equal(slice_columns(qw, 0, 32).bias, qw.bias)


def test_permutations_per_expert():
    torch.manual_seed(2)
    qw = humming.quantize(torch.randn(2, 16, 64), "w4a16", group_size=32, act_order=True)
    rows = torch.stack([torch.randperm(16) for _ in range(2)])
    cols = torch.stack([torch.randperm(64) for _ in range(2)])
    whole = qw.dequantize()
    assert torch.equal(permute_rows(qw, rows).dequantize(), torch.take_along_dim(whole, rows[..., None], 1))
    assert torch.equal(permute_columns(qw, cols).dequantize(), torch.take_along_dim(whole, cols[:, None, :], 2))


def test_act_order_columns():
    """An act-order weight's column range must hold whole groups; ordered by group first, any aligned range does,
    and its g_idx indexes its own scales."""
    torch.manual_seed(3)
    qw = humming.quantize(torch.randn(2, 16, 128), "w4a16", group_size=32, act_order=True)
    with pytest.raises(ShapeError, match="act-order"):
        slice_columns(qw, 0, 64)
    ordered = permute_columns(qw, torch.argsort(qw.g_idx.long(), dim=-1, stable=True))
    part = slice_columns(ordered, 64, 128)
    assert part.scales.shape == (2, 16, 2) and int(part.g_idx.max()) == 1
    assert torch.equal(part.dequantize(), ordered.dequantize()[..., 64:128])


def test_errors():
    qw = humming.quantize(torch.randn(2, 256, 256), "w4a16", group_size=32)
    with pytest.raises(ShapeError, match="group_size 32"):
        slice_columns(qw, 16, 64)
    with pytest.raises(ShapeError, match="range"):
        take_rows(qw, [(0, 300)])
    with pytest.raises(ShapeError, match="expert"):
        slice_experts(qw, 1, 1)
    with pytest.raises(ShapeError, match="permutation"):
        permute_rows(qw, torch.zeros(256, dtype=torch.long))
    with pytest.raises(SchemeError, match="position"):
        permute_columns(qw, torch.arange(256))
    block = humming.quantize(torch.randn(256, 256), "w8a8-fp8-block")
    with pytest.raises(ShapeError, match="multiples of 128"):
        take_rows(block, [(64, 192)])
    with pytest.raises(ShapeError, match="multiples of 128"):
        slice_columns(block, 0, 64)
    with pytest.raises(SchemeError, match="reordered"):
        permute_rows(block, torch.arange(256))
