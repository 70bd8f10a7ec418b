"""The 64-token wgmma chains both register-A W4A8 forms overlap in pairs (the narrow form's two token halves, the wide
form's quarters): chain c accumulates into partial pa (c even) or pb (c odd), so chain c + 1 is issued before chain
c is waited for and promoted into the fp32 sums facc."""
from __future__ import annotations


def part(c: int) -> str:
    """The partial chain c accumulates into."""
    return "pa" if c % 2 == 0 else "pb"


def chain_step(c: int, ind: str) -> str:
    """Issue the 64-token chain c (tokens 64c ..) into partial pa / pb: four k32 steps, one commit group."""
    return (f"{ind}wgmma_fence_operand({part(c)});\n{ind}wgmma_fence();\n{ind}#pragma unroll\n"
            f"{ind}for (int ks = 0; ks < 4; ++ks)  // tokens {64 * c}..{64 * c + 63}: slot rows + {64 * c}\n"
            f"{ind}  wgmma_k32_rs({part(c)}, a[ks], desc_x + {c} * (WT * BK / 16) + 2 * ks, ks > 0);\n"
            f"{ind}wgmma_commit();\n")


def wait_promote(c: int, pending: int, to_f32: str, ind: str) -> str:
    """Wait until chain c is done (``pending`` later groups may run on) and add its partial into facc."""
    body = "\n".join(f"{ind}  facc[WG_ACC_REGS * {c} + 4 * j + {i}] += {to_f32}({part(c)}[4 * j + {i}]) * sc{i // 2};"
                     for i in range(4))
    return (f"{ind}wgmma_wait<{pending}>();   // chain {c} done\n{ind}wgmma_fence_operand({part(c)});\n"
            f"{ind}#pragma unroll\n{ind}for (int j = 0; j < WT / 8; ++j) {{  // {part(c)}[4j + 2h + e]: token "
            f"{64 * c} + 8j + 2q + e\n{body}\n{ind}}}\n")
