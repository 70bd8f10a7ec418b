"""The int4 -> e4m3 widening helpers of the register-A W4A8 kernel, emulated bit for bit on the CPU: the byte
permutes (prmt) and masks of the CUDA text, evaluated on every code in every nibble position, give the e4m3 byte of
the code's integer value (torch's float8_e4m3fn as the oracle). The constants are read from the helpers' source, so
a change there is what is tested."""
import inspect
import re

import torch

from humming.core import generator_wgmma_rs8
from humming.devices.nvidia.backend import RS8_WIDEN_T

M32 = 0xFFFFFFFF


def prmt(a: int, b: int, sel: int) -> int:
    """PTX prmt.b32, default mode: byte i of the result is byte (sel nibble i & 7) of {b, a}, or that byte's sign
    replicated when the nibble's bit 3 is set."""
    pool = (b << 32) | a
    out = 0
    for i in range(4):
        nib = (sel >> (4 * i)) & 0xF
        byte = (pool >> (8 * (nib & 7))) & 0xFF
        if nib & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * i)
    return out


def _helper(name: str) -> str:
    m = re.search(rf"{name}\([^)]*\)\s*\{{(.*?)\n\}}", RS8_WIDEN_T, re.S)
    assert m, name
    return m.group(1)


def _hex(text: str) -> list[int]:
    return [int(h, 16) for h in re.findall(r"0x([0-9A-Fa-f]+)u", text)]


def _tables() -> tuple[int, int, int, int]:
    """The four lookup words the wide kernel keeps in registers (lp0 lp1 | ln0 ln1)."""
    text = inspect.getsource(generator_wgmma_rs8)
    lp = re.search(r"lp0 = 0x([0-9A-F]+)u \+ keep, lp1 = 0x([0-9A-F]+)u", text)
    ln = re.search(r"ln0 = 0x([0-9A-F]+)u \+ keep, ln1 = 0x([0-9A-F]+)u", text)
    return tuple(int(h, 16) for h in (*lp.groups(), *ln.groups()))


def e4m3_bytes(values: list[int]) -> int:
    codes = torch.tensor(values, dtype=torch.float32).to(torch.float8_e4m3fn).view(torch.uint8).tolist()
    return sum(c << (8 * i) for i, c in enumerate(codes))


def signed(code: int) -> int:
    return code - 16 if code & 8 else code


def per_half(w: int, p0: int, p1: int, n0: int, n1: int) -> int:
    body = _helper("int4n4_to_e4m3x4_t")
    sel_mask, pick_mask, pick_base = _hex(body)
    sel = w & sel_mask
    return prmt(prmt(p0, p1, sel), prmt(n0, n1, sel), ((w >> 1) & pick_mask) | pick_base)


def per_word(w: int, p0: int, p1: int, n0: int, n1: int) -> tuple[int, int]:
    body = _helper("int4n8_to_e4m3x8_t")
    sel_mask, pick_mask, pick_base = _hex(body)
    assert "sel >> 16" in body and "pick >> 16" in body
    sel = w & sel_mask
    pick = ((w >> 1) & pick_mask) | pick_base
    return (prmt(prmt(p0, p1, sel), prmt(n0, n1, sel), pick),
            prmt(prmt(p0, p1, sel >> 16), prmt(n0, n1, sel >> 16), pick >> 16))


def test_word_level_widening_is_exact_for_every_code_and_position():
    p0, p1, n0, n1 = _tables()
    g = torch.Generator().manual_seed(0)
    words = [sum(((c + i) % 16) << (4 * i) for i in range(8)) for c in range(16)]  # every code in every nibble
    words += torch.randint(0, 2**32, (512,), generator=g, dtype=torch.int64).tolist()
    for w in words:
        codes = [(w >> (4 * i)) & 0xF for i in range(8)]
        want_lo = e4m3_bytes([signed(c) for c in codes[:4]])
        want_hi = e4m3_bytes([signed(c) for c in codes[4:]])
        assert per_word(w, p0, p1, n0, n1) == (want_lo, want_hi), hex(w)
        assert (per_half(w, p0, p1, n0, n1), per_half(w >> 16, p0, p1, n0, n1)) == (want_lo, want_hi), hex(w)


def test_prmt_emulation_replicates_signs():
    assert prmt(0x80402010, 0, 0x3210) == 0x80402010
    assert prmt(0x80402010, 0, 0x8BA9) == 0x00FF0000  # signs of bytes 1, 2, 3, 0 replicated
    assert prmt(0x80402010, 0, 0x000B) == 0x101010FF  # nibble 0 = 0xB: byte 3 (0x80) replicated
