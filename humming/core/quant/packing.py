"""Bit packing: codes of ``bits`` bits <-> a little-endian bitstream in 32-bit (or 8-bit) words.

The canonical stream (``pack_bits``): code ``i`` along the packed dimension occupies bits
``[i*bits, (i+1)*bits)`` of the stream, least significant bit first; stream bit ``j`` is bit ``j % W`` of
word ``j // W`` (W = 32 for int32 words, 8 for bytes). Codes of 3, 5, 6 or 7 bits therefore cross word
boundaries (as GPTQ's 3-bit format does). The int32 words of a stream and its bytes are the same memory on a
little-endian machine: ``pack_bits(c, b).view(torch.uint8)`` equals ``pack_bits(c, b, word_bits=8)``.

For widths that divide the word, ``order`` permutes the codes inside each word: slot ``s`` of a word holds
code ``order[s]`` of that word's run (AWQ packs 8 nibbles with ``order=(0, 2, 4, 6, 1, 3, 5, 7)``).

Vectorised over every other dimension; the only Python loop runs over the (at most 32) code slots of one
period of the stream. Works on any device.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from humming.errors import ShapeError

__all__ = ["pack_bits", "unpack_bits", "packed_length", "AWQ_ORDER"]

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def packed_length(count: int, bits: int, word_bits: int = 32) -> int:
    """Number of words holding ``count`` codes of ``bits`` bits."""
    return -(-count * bits // word_bits)


def _period(bits: int, word_bits: int) -> tuple[int, int]:
    """(codes, words) of the smallest run after which the stream is word-aligned again."""
    g = math.gcd(bits, word_bits)
    return word_bits // g, bits // g


def _check(bits: int, word_bits: int, order: Sequence[int] | None) -> None:
    if word_bits not in (8, 32):
        raise ShapeError(f"word_bits must be 8 or 32, got {word_bits}")
    if not 1 <= bits <= 16 or bits > word_bits:
        raise ShapeError(f"cannot pack {bits}-bit codes into {word_bits}-bit words")
    if order is not None:
        if word_bits % bits:
            raise ShapeError(f"an in-word order needs codes that divide the word ({bits} bits do not divide {word_bits})")
        if sorted(order) != list(range(word_bits // bits)):
            raise ShapeError(f"order must be a permutation of 0..{word_bits // bits - 1}, got {tuple(order)}")


def pack_bits(codes: torch.Tensor, bits: int, dim: int = -1, *, word_bits: int = 32,
              order: Sequence[int] | None = None) -> torch.Tensor:
    """Pack unsigned ``codes`` (any integer dtype, values < 2**bits) along ``dim`` into an LSB-first bitstream.

    Returns int32 words (``word_bits=32``) or uint8 bytes (``word_bits=8``); the packed dimension has
    ``packed_length(n, bits, word_bits)`` entries (the tail of the last word is zero).
    """
    _check(bits, word_bits, order)
    if codes.is_floating_point() or codes.is_complex():
        raise ShapeError(f"codes must be an integer tensor, got {codes.dtype}")
    x = codes.movedim(dim, -1)
    n = x.shape[-1]
    lead = x.shape[:-1]
    p_codes, p_words = _period(bits, word_bits)
    runs = -(-n // p_codes)
    c = x.to(torch.int32) & ((1 << bits) - 1)
    if runs * p_codes != n:
        c = torch.nn.functional.pad(c, (0, runs * p_codes - n))
    c = c.reshape(*lead, runs, p_codes)
    if order is not None:
        c = c[..., list(order)]
    words = torch.zeros(*lead, runs, p_words, dtype=torch.int32, device=c.device)
    for i in range(p_codes):
        off = i * bits
        w, sh = divmod(off, word_bits)
        words[..., w] |= c[..., i] << sh
        if sh + bits > word_bits:
            words[..., w + 1] |= c[..., i] >> (word_bits - sh)
    words = words.reshape(*lead, runs * p_words)[..., : packed_length(n, bits, word_bits)]
    if word_bits == 8:
        words = (words & 0xFF).to(torch.uint8)
    return words.movedim(-1, dim).contiguous()


def unpack_bits(packed: torch.Tensor, bits: int, count: int, dim: int = -1, *, word_bits: int | None = None,
                order: Sequence[int] | None = None) -> torch.Tensor:
    """Inverse of :func:`pack_bits`: ``count`` codes (uint8 for bits <= 8, else int32) along ``dim``.

    ``word_bits`` defaults to the element width of ``packed`` (32 for int32, 8 for uint8/int8).
    """
    if word_bits is None:
        word_bits = packed.element_size() * 8
    _check(bits, word_bits, order)
    if packed.is_floating_point():
        raise ShapeError(f"packed words must be an integer tensor, got {packed.dtype}")
    if packed.element_size() * 8 != word_bits:
        raise ShapeError(f"packed words are {packed.element_size() * 8}-bit ({packed.dtype}), expected {word_bits}-bit")
    x = packed.movedim(dim, -1)
    need = packed_length(count, bits, word_bits)
    if x.shape[-1] != need:
        raise ShapeError(
            f"{count} codes of {bits} bits take {need} {word_bits}-bit words along dim {dim}, got {x.shape[-1]}"
        )
    lead = x.shape[:-1]
    p_codes, p_words = _period(bits, word_bits)
    runs = -(-count // p_codes)
    w = x.to(torch.int32)
    if word_bits == 8:
        w = w & 0xFF
    if runs * p_words != need:
        w = torch.nn.functional.pad(w, (0, runs * p_words - need))
    w = w.reshape(*lead, runs, p_words)
    out = torch.empty(*lead, runs, p_codes, dtype=torch.int32, device=w.device)
    mask = (1 << bits) - 1
    for i in range(p_codes):
        off = i * bits
        k, sh = divmod(off, word_bits)
        if sh + bits <= word_bits:
            out[..., i] = (w[..., k] >> sh) & mask
        else:
            lo = word_bits - sh
            out[..., i] = ((w[..., k] >> sh) & ((1 << lo) - 1)) | ((w[..., k + 1] & ((1 << (bits - lo)) - 1)) << lo)
    if order is not None:
        inv = [0] * len(order)
        for slot, src in enumerate(order):
            inv[src] = slot
        out = out[..., inv]
    out = out.reshape(*lead, runs * p_codes)[..., :count]
    if bits <= 8:
        out = out.to(torch.uint8)
    return out.movedim(-1, dim).contiguous()
