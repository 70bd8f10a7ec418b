"""The int4 -> e4m3 widening helpers of the register-A W4A8 kernel, emulated bit for bit on the CPU: the byte
permutes (prmt), adds, lop3s and masks of the CUDA text, evaluated on every code in every nibble position, give the e4m3
byte of the code's integer value (the table widening) or of that value times 2^-9 (the linear widening, the default),
with torch's float8_e4m3fn as the oracle. The constants are read from the helpers' source, so a change there is what
is tested."""
import re

import torch

from humming.capabilities import get_profile
from humming.core.common.layout import LINEAR_LABELS, LINEAR_SCALE, e4m3_linear_label
from humming.core.families.register_a8.layout import e4m3_label
from humming.core.families.register_a8.narrow import luts
from humming.devices import get_backend
from humming.devices.nvidia.convert import RS8_WIDEN_LINEAR_T, RS8_WIDEN_T, RS8_WIDEN_TABLES


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


def _helper(name: str, text: str = RS8_WIDEN_T) -> str:
    m = re.search(rf"{name}\([^)]*\)\s*\{{(.*?)\n\}}", text, re.S)
    assert m, name
    return m.group(1)


def _hex(text: str) -> list[int]:
    return [int(h, 16) for h in re.findall(r"0x([0-9A-Fa-f]+)u", text)]


def _tables() -> tuple[int, int, int, int]:
    """The four lookup words the kernels keep in registers (la0 la1 | lb0 lb1): the backend's RS8_WIDEN_TABLES, and the
    same words in the narrow form's source (computed from ktiles)."""
    words = tuple(w for w, _ in RS8_WIDEN_TABLES)
    text = luts(get_backend(get_profile("nvidia-h200")))  # the narrow form's tables, from the NVIDIA backend's data
    la = re.search(r"la0 = 0x([0-9A-F]+)u \+ keep, la1 = 0x([0-9A-F]+)u", text)
    lb = re.search(r"lb0 = 0x([0-9A-F]+)u \+ keep, lb1 = 0x([0-9A-F]+)u", text)
    assert tuple(int(h, 16) for h in (*la.groups(), *lb.groups())) == words
    return words


def e4m3_bytes(values: list[int]) -> int:
    codes = torch.tensor(values, dtype=torch.float32).to(torch.float8_e4m3fn).view(torch.uint8).tolist()
    return sum(c << (8 * i) for i, c in enumerate(codes))


def signed(code: int) -> int:
    return code - 16 if code & 8 else code


def per_word(w: int, a0: int, a1: int, b0: int, b1: int) -> tuple[int, int]:
    """int4n8_to_e4m3x8_x of the backend on a word of labels: (lo, hi), with the flip constant read from its text."""
    body = _helper("int4n8_to_e4m3x8_x")
    (flip,) = _hex(body)
    for text in ("prmt_b32(a0, a1, w) ^ prmt_b32(b0, b1, wf)", "prmt_b32(a0, a1, w >> 16) ^ prmt_b32(b0, b1, wf >> 16)"):
        assert text in body, text
    wf = w ^ flip
    return (prmt(a0, a1, w) ^ prmt(b0, b1, wf), prmt(a0, a1, w >> 16) ^ prmt(b0, b1, wf >> 16))


def label_word(codes: list[int]) -> int:
    """Eight two's-complement codes -> the word of their labels (nibble i = label of code i), as the layout packs."""
    labels = e4m3_label(torch.tensor(codes, dtype=torch.int64)).tolist()
    return sum(c << (4 * i) for i, c in enumerate(labels))


def test_labels_swap_bits_2_and_3():
    codes = torch.arange(16)
    labels = e4m3_label(codes)
    assert sorted(labels.tolist()) == list(range(16))  # a bijection
    assert torch.equal(e4m3_label(labels), codes)  # an involution: the same function undoes it
    assert labels.tolist()[:8] == [0, 1, 2, 3, 8, 9, 10, 11]


def test_word_level_widening_is_exact_for_every_code_and_position():
    tables = _tables()
    g = torch.Generator().manual_seed(0)
    words = [[(c + i) % 16 for i in range(8)] for c in range(16)]  # every code in every nibble
    words += torch.randint(0, 16, (512, 8), generator=g, dtype=torch.int64).tolist()
    for codes in words:
        want = (e4m3_bytes([signed(c) for c in codes[:4]]), e4m3_bytes([signed(c) for c in codes[4:]]))
        assert per_word(label_word(codes), *tables) == want, codes


def test_widening_reads_the_flipped_labels_where_the_first_lookup_gives_a_sign():
    """The identity the helper rests on, per label: where h is clear the flipped lookup is a sign mask that undoes the
    table's complement of negative values; where h is set the first lookup is 0 (every a-table byte is below 0x80)."""
    a0, a1, b0, b1 = _tables()
    assert all(((x >> (8 * i)) & 0x80) == 0 for x in (a0, a1) for i in range(4))
    for label in range(16):
        first, flipped = prmt(a0, a1, label) & 0xFF, prmt(b0, b1, label ^ 8) & 0xFF
        negative = bool(label & 4)  # the sign is bit 2 of the label's low 3 bits
        if label & 8:
            assert first == 0
        else:
            assert flipped == (0xFF if negative else 0)


def test_prmt_emulation_replicates_signs():
    assert prmt(0x80402010, 0, 0x3210) == 0x80402010
    assert prmt(0x80402010, 0, 0x8BA9) == 0x00FF0000  # signs of bytes 1, 2, 3, 0 replicated
    assert prmt(0x80402010, 0, 0x000B) == 0x101010FF  # nibble 0 = 0xB: byte 3 (0x80) replicated


# ---- the linear widening (int4_to_e4m3x8, WgmmaRs8Layout.widen "linear", the default): an add and a lop3 a byte

def lop3(a: int, b: int, c: int, table: int) -> int:
    """PTX lop3.b32: bit i of the result is bit (a_i << 2 | b_i << 1 | c_i) of the 8-bit table."""
    out = 0
    for i in range(32):
        idx = (((a >> i) & 1) << 2) | (((b >> i) & 1) << 1) | ((c >> i) & 1)
        out |= ((table >> idx) & 1) << i
    return out


def linear_word(w: int) -> tuple[int, int]:
    """int4_to_e4m3x8 of the backend on a word of labels: (lo, hi), with its masks, addend and lop3 read from its
    text."""
    body = _helper("e4m3x4_of_labels", RS8_WIDEN_LINEAR_T)
    add = int(re.search(r"x \+ 0x([0-9A-Fa-f]+)u", body).group(1), 16)
    const, table = re.search(r"lop3\.b32 %0, %1, %2, 0x([0-9A-Fa-f]+), 0x([0-9A-Fa-f]+);", body).groups()
    outer = _helper("int4_to_e4m3x8", RS8_WIDEN_LINEAR_T)
    masks = [int(h, 16) for h in re.findall(r"0x([0-9A-Fa-f]+)u", outer)]
    assert "lo = e4m3x4_of_labels(w & " in outer and "hi = e4m3x4_of_labels((w >> 4) & " in outer and len(masks) == 2

    def of_labels(x: int) -> int:
        t = (x + add) & 0xFFFFFFFF
        assert all(((x >> (8 * i)) & 0xFF) + ((add >> (8 * i)) & 0xFF) < 256 for i in range(4)), "a carry leaves a byte"
        return lop3(t, x, int(const, 16), int(table, 16))

    return of_labels(w & masks[0]), of_labels((w >> 4) & masks[1])


def linear_word_of_codes(codes: list[int]) -> int:
    """Eight two's-complement codes -> the word the layout packs for the linear widening: byte e holds code e's label
    (low nibble, the lo output) and code 4 + e's (high nibble, the hi output)."""
    labels = e4m3_linear_label(torch.tensor(codes, dtype=torch.int64)).tolist()
    return sum((labels[e] | labels[4 + e] << 4) << (8 * e) for e in range(4))


def test_linear_labels_are_a_bijection():
    labels = e4m3_linear_label(torch.arange(16)).tolist()
    assert sorted(labels) == list(range(16)) and tuple(labels) == LINEAR_LABELS


def test_linear_widening_is_exact_for_every_code_and_position():
    """Every code in every position widens to the e4m3 byte of its value times 2^-9 (torch's float8_e4m3fn decodes
    it; the layout's scales carry LINEAR_SCALE = 2^9 back), never a NaN byte."""
    g = torch.Generator().manual_seed(1)
    words = [[(c + i) % 16 for i in range(8)] for c in range(16)]
    words += torch.randint(0, 16, (512, 8), generator=g, dtype=torch.int64).tolist()
    for codes in words:
        lo, hi = linear_word(linear_word_of_codes(codes))
        for word, part in ((lo, codes[:4]), (hi, codes[4:])):
            got = torch.tensor([(word >> (8 * e)) & 0xFF for e in range(4)], dtype=torch.uint8)
            values = (got.view(torch.float8_e4m3fn).double() * LINEAR_SCALE).tolist()
            assert values == [float(signed(c)) for c in part], (codes, hex(word))


def test_linear_widening_bytes_are_the_linear_range():
    """The bytes it makes are 0x00-0x08 and 0x80-0x88: where e4m3 is evenly spaced (b x 2^-9 for b <= 16)."""
    got = {(linear_word(linear_word_of_codes([c] * 8))[0] & 0xFF) for c in range(16)}
    assert got <= set(range(9)) | set(range(0x80, 0x89)) and len(got) == 16
    for b in range(17):
        assert torch.tensor([b], dtype=torch.uint8).view(torch.float8_e4m3fn).item() == b * 2.0**-9
