"""The register-A kernel's A operand: the lane's ring of 4-bit weight atoms in flight (codes, and the scale / zero
table rows that travel with them), its loads, and the decode of an atom's codes into wgmma A fragments a[ks][0..3]
in the activation type (dq_raw: int4: magic number | code, + -(magic + zero), x scale; e2m1: sign and bits under the
mantissa, x scale). Scale groups of 16 / 32 k (NVFP4, MX) put 4 / 2 table rows of each atom in the ring."""
from __future__ import annotations

from humming.core.common.emit import Template, lines
from humming.core.families.register_a.layout import int4_codes, scale_rows_per_atom
from humming.core.families.register_a.planner import BK

X16_DECODE = True  # f16: odd pairs decoded in place as magic + 16 code (decode_pairs_x16)

# (f16, X16_DECODE) the constants of the x16 decode
X16_CONSTANTS = ("  const uint32_t x16_scale = f32x2_to_act2(0.0625f, 0.0625f);  // (magic + 16 code) / 16 = 64 + code\n"
                 "  const uint32_t x16_bias = f32x2_to_act2(960.0f, 960.0f);   // -(magic + zero) + 960 = -(64 + zero)\n")

RING = "  uint32_t wq[R][4];  // codes of the atoms in flight: k16 step ks of channels 16w + g (+8)"
TAB = "const int tab = slab * 64 + g * 8 + 2 * w;"


def _table(ptr: str, group: int, atom: str) -> str:
    """The load of this lane's two channels' values of table ``ptr`` for k atom ``atom`` (``group`` > 0: a row per
    group; < 0: the one row)."""
    row = f"(size_t)((unsigned)({atom}) * BK / {group}) * N + " if group > 0 else ""  # (unsigned: no signed division)
    return f"load_g32({ptr} + {row}tab)"


class WeightRing:
    """The lane's ring of R weight atoms: wq[slot] (the codes) and, for tables of a row per group, sq / zq[slot].
    ``split``: the kernel's K range starts at atom kt0 (split K, tail, stream-K); ``walk``: tables of groups that are
    whole atoms walk their rows with a pointer (the atoms are fetched in order): one add every group / BK atoms
    instead of a row index, a multiply and a 64-bit address per atom (not with the early ring, which fetches the next
    segment's atoms before this one's are done, nor under occupancy, whose registers are too short for the
    pointer)."""

    def __init__(self, lay, split: bool, walk: bool):
        self.tile_major = lay.tile_major
        self.offset = "kt0 + " if split else ""
        self.decl, self.loads, self.pick, self.fixed, self.row_ptrs = [], [], [], [], []
        rows = scale_rows_per_atom(lay)
        for ptr, var, group in (("S", "s", lay.scale_group), ("Z", "z", lay.zero_group)):
            if var == "s" and rows > 1:  # groups of 16 / 32 k: a row per group, all of the atom's in the ring
                self.decl.append(f"uint32_t sq[R][{rows}];  // this lane's two channels' S values of each atom in "
                                 f"flight, one per group of {group} k")
                self.loads += [Template(f"sq[${{slot}}][{j}] = load_g32(S + (size_t)((unsigned)(${{atom}}) * {rows} + {j}) "
                                        "* N + tab);") for j in range(rows)]
                step = 4 // rows  # k16 steps per group
                pick = f"sq[s][ks / {step}]" if step > 1 else "sq[s][ks]"
                self.pick.append(f"const uint32_t ss = h ? dup_hi({pick}) : dup_lo({pick});  // the group of step ks")
            elif group > 0:  # one row per atom: travels in the ring with the codes
                self.decl.append(f"uint32_t {var}q[R];  // this lane's two channels' {ptr} values of each atom in flight")
                if walk and group % BK == 0:
                    first = "kt0" if split else "0"
                    self.row_ptrs.append(f"const uint16_t* {var}p = {ptr} + (size_t)((unsigned)({first}) * BK / {group}) "
                                         f"* N + tab;  // the {ptr} row of the next atom fetched")
                    if group == BK:
                        self.loads.append(Template(f"{var}q[${{slot}}] = load_g32({var}p);  {var}p += N;"))
                    else:
                        self.loads.append(Template(
                            f"{var}q[${{slot}}] = load_g32({var}p);  if (((unsigned)(${{atom}}) + 1) % {group // BK} == 0) "
                            f"{var}p += N;  // (its group's last atom: the next row)"))
                else:
                    self.loads.append(Template(f"{var}q[${{slot}}] = {_table(ptr, group, '${atom}')};"))
                self.pick.append(f"const uint32_t {var}{var} = h ? dup_hi({var}q[s]) : dup_lo({var}q[s]);")
            elif group < 0:  # one row (per channel): loaded once
                self.fixed.append(f"const uint32_t {var}w = {_table(ptr, group, '0')};  // this lane's two channels")
                self.pick.append(f"const uint32_t {var}{var} = h ? dup_hi({var}w) : dup_lo({var}w);")
        if not lay.zero_group and int4_codes(lay.decode):
            self.pick.append("const uint32_t zz = zz_const;")

    def declarations(self) -> str:
        """The ring's arrays (RING, then the tables' rows in flight)."""
        return RING + "".join("\n  " + ln for ln in self.decl)

    def fixed_code(self) -> str:
        return "".join("\n  " + ln for ln in self.fixed)

    def row_ptr_code(self) -> str:
        return "".join("\n  " + ln for ln in self.row_ptrs)

    def fetch(self, slot: str, atom: str, indent: str, words: str = "") -> str:
        """Atom ``atom``'s codes (and table rows) into ring slot ``slot``, each line at ``indent``; ``words``: its
        offset from wsrc in words when not (atom) * ATOM_WORDS."""
        out = [f"const uint32_t* p = wsrc + {words or f'(size_t)({atom}) * ATOM_WORDS'};"]
        if self.tile_major:
            out.append(f"load_g128(wq[{slot}], p);  // chunk w: k16 steps 0..3 of this warp's 16 channels")
        else:
            out += ["#pragma unroll",
                    f"for (int ks = 0; ks < 4; ++ks) wq[{slot}][ks] = load_g32(p + ks * 128);  // word w of chunk ks"]
        values = {"slot": slot, "atom": self.offset + atom}  # (a table walked by pointer needs no atom)
        out += [t.fill(**{name: values[name] for name in t.slots}) for t in self.loads]
        return "\n".join(indent + ln for ln in out)


def weight_source(tile_major: bool) -> tuple[str, str]:
    """(this lane's word offset in an atom, the comment on the weights' address) by the atoms' order."""
    if tile_major:
        return ("w * 128 + lane * 4",
                "// weights: this lane's chunk w of atom (slab, kt) at ((slab * K/64 + kt) * 4 + w) * 128 + lane * 4 (words)")
    return ("lane * 4 + w", "// weights: word w of this lane's chunk ks of atom (slab, kt) at ((slab * K/64 + kt) * 4 + ks) "
            "* 128 + lane * 4 + w")


# the two code pairs of half h of k16 step ks: the table values picked, dq_raw, then the arithmetic
_DECODE_PAIRS = Template("""          ${pick}
          #pragma unroll
          for (int r = 0; r < 2; ++r) {
            uint32_t v = dq_raw(wq[s][ks], 2 * h + r);
            ${math}
            a[ks][r * 2 + h] = v;
          }""")

# f16 only: the two code pairs of half h of k16 step ks from one shift of the word by 8 h: pair 2h (bits 0-3 and
# 16-19) as magic + code plus -(magic + zero); pair 2h + 1 (bits 4-7 and 20-23) in place as magic + 16 code, exact in
# f16 (unit spacing up to 2048), times 1/16 plus -(64 + zero) in one exact fma; then the scale. One shift per word
# instead of three.
_DECODE_PAIRS_X16 = Template("""          ${pick}
          const uint32_t zz16 = act2_add(zz, x16_bias);
          const uint32_t wh = wq[s][ks] >> (8 * h);
          a[ks][h] = ${even};
          a[ks][2 + h] = ${odd};""")

# fold=2: the raw codes (the zero point and the scale applied per group in fp32)
DECODE_RAW = """          #pragma unroll
          for (int r = 0; r < 2; ++r) a[ks][r * 2 + h] = dq_raw(wq[s][ks], 2 * h + r);  // magic + code, exact"""


def decode_pairs(pick: list[str], math: str) -> str:
    return _DECODE_PAIRS.fill(pick=lines(*pick).rstrip("\n"), math=math)


def decode_pairs_x16(pick: list[str], scales: bool) -> str:
    even, odd = "act2_add(dq_raw(wh, 0), zz)", "act2_fma(dq_raw_x16(wh), x16_scale, zz16)"
    if scales:
        even, odd = f"act2_mul({even}, ss)", f"act2_mul({odd}, ss)"
    return _DECODE_PAIRS_X16.fill(pick=lines(*pick).rstrip("\n"), even=even, odd=odd)
