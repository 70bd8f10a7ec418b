"""Bit packing: the canonical LSB-first stream, checked against a big-integer reference."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from humming.core.quant.packing import AWQ_ORDER, pack_bits, packed_length, unpack_bits
from humming.errors import ShapeError


def reference_stream(codes: list[int], bits: int, word_bits: int) -> list[int]:
    """Concatenate codes into one integer, LSB first, and cut it into words."""
    acc = 0
    for i, c in enumerate(codes):
        acc |= c << (i * bits)
    n_words = packed_length(len(codes), bits, word_bits)
    words = [(acc >> (word_bits * j)) & ((1 << word_bits) - 1) for j in range(n_words)]
    if word_bits == 32:
        words = [w - (1 << 32) if w >= 1 << 31 else w for w in words]
    return words


@settings(max_examples=150, deadline=None)
@given(bits=st.integers(1, 8), data=st.data(), word_bits=st.sampled_from([8, 32]))
def test_pack_matches_reference_stream_and_roundtrips(bits, data, word_bits):
    codes = data.draw(st.lists(st.integers(0, 2**bits - 1), min_size=1, max_size=70))
    t = torch.tensor([codes, codes[::-1]], dtype=torch.uint8)
    packed = pack_bits(t, bits, word_bits=word_bits)
    assert packed.dtype == (torch.int32 if word_bits == 32 else torch.uint8)
    assert packed[0].tolist() == reference_stream(codes, bits, word_bits)
    assert torch.equal(unpack_bits(packed, bits, len(codes)), t)
    # along dim 0 as well
    assert torch.equal(unpack_bits(pack_bits(t.t(), bits, dim=0, word_bits=word_bits), bits, len(codes), dim=0), t.t())


def test_three_bit_codes_cross_words():
    codes = list(range(8)) * 4  # 32 codes of 3 bits = 3 words
    w = pack_bits(torch.tensor([codes], dtype=torch.uint8), 3)[0].tolist()
    assert len(w) == 3
    # code 10 (value 2) straddles word 0 bits 30-31 and word 1 bit 0
    assert ((w[0] >> 30) & 3) | ((w[1] & 1) << 2) == codes[10]
    assert ((w[1] >> 1) & 7) == codes[11]


def test_int32_stream_is_the_byte_stream():
    c = torch.randint(0, 64, (3, 64), dtype=torch.uint8)
    assert torch.equal(pack_bits(c, 6).view(torch.uint8), pack_bits(c, 6, word_bits=8))


def test_awq_order():
    w = pack_bits(torch.arange(8, dtype=torch.uint8)[None], 4, order=AWQ_ORDER)
    assert w.item() == 0x75316420
    c = torch.randint(0, 16, (5, 32), dtype=torch.uint8)
    assert torch.equal(unpack_bits(pack_bits(c, 4, order=AWQ_ORDER), 4, 32, order=AWQ_ORDER), c)


def test_errors():
    with pytest.raises(ShapeError, match="take 2 32-bit words"):
        unpack_bits(torch.zeros(1, 3, dtype=torch.int32), 4, 16)
    with pytest.raises(ShapeError, match="integer"):
        pack_bits(torch.zeros(4), 4)
    with pytest.raises(ShapeError, match="divide"):
        pack_bits(torch.zeros(1, 8, dtype=torch.uint8), 3, order=(0, 1))
