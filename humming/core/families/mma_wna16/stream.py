"""Generates the *stream* WnA16 kernel: the decode path (M <= 16) that reads weights straight from
global memory into registers, with no shared-memory staging and no block barriers in the main loop.

Roles are swapped against the tile kernel: the weights are the MMA's A operand (16 output channels x
16 k) and the activations its B operand (16 k x 8 tokens). The packed layout is the same one the tile
kernel reads (humming.core.common.layout): a lane's pair (ks, n8 tile nt, r) holds channel nt*8 + g, so for
the m16 tile t the A registers are pairs (nt=2t, r=0), (2t+1, 0), (2t, 1), (2t+1, 1).

Block (y, z) owns the 64-channel slab y and the K range of split z; its WARPS_K warps take every
WARPS_K-th 64-wide k atom of that range, each keeping the next atom's 16-byte loads in flight while
it decodes and multiplies the current one. Warps fold their sums in shared memory at the end; split-K
partials are added by the last block of the slab, in a fixed order.
"""
from __future__ import annotations

from humming.core.common.emit import Template
from humming.core.common.layout import pair_index_c
from humming.core.common.mma_pieces import _c, gs_epilogue_parts, helper_prelude, pair_decode
from humming.core.families.mma_wna16.sizing import (
    X_PITCH,
    _bulk_table_rows,
    bulk_slot_bytes,
    fold_applies,
    stream_smem_bytes,
    x_smem_layout,
    x_smem_tokens,
)


def stream_kernel_source(plan, backend, caps=None) -> str:
    t = plan.tiles
    lay = plan.layout
    dec = lay.decode
    cb = dec.container
    ppw = 16 // cb
    if getattr(t, "bulk", 0):
        from humming.devices.base import HelperRequest

        prelude = backend.helpers("stream_bulk", HelperRequest(mma=plan.instruction, act=plan.act, weight=dec,
                                                               async_copy=plan.async_copy, caps=caps))
    else:
        prelude = helper_prelude(plan, backend, caps, dec)
    token_tiles = t.bm // 8
    s_group, z_group = lay.scale_group, lay.zero_group

    def table_addr(ptr: str, group: int, k: str) -> str:
        # 8 values (one per n8 tile) of this lane's channel g, for k
        row = "0" if group < 0 else f"({k} / {group})"
        return f"{ptr} + (size_t){row} * N + n0 + (lane >> 2) * 8"

    # groups of 64 or more (or one row) change at most once per atom: read once per atom (with x_ring, they
    # travel in the ring with the atom's weights); smaller groups are read per k16 step
    ring = bool(t.x_ring)
    bulk = bool(getattr(t, "bulk", 0))
    staged = bool(getattr(t, "x_smem", 0))
    per_step, ring_tables, ring_decl, per_atom = [], [], [], []
    table_rows = _bulk_table_rows(lay) if bulk else []
    for ptr, var, group in (("S", "ss", s_group), ("Z", "zz", z_group)):
        if bulk and group:  # read from the slot before its refill (_bulk_main_loop): {var}r[row of the atom][4]
            if group < 0 or group >= 64:
                per_atom.append(f"const uint32_t (&{var}8)[4] = {var}r[0];")
            else:
                per_step.append(f"const uint32_t (&{var}8)[4] = {var}r[ks * 16 / {group}];")
        elif group and (group < 0 or group >= 64):
            if staged:  # the block's rows of the table, staged in shared memory (_x_smem_parts)
                row = "0" if group < 0 else f"(atom * 64 / {group} - {var}_row0)"
                per_atom.append(f"uint32_t {var}8[4]; lds_u4({var}8, {var}_s + {row} * 64 + (lane >> 2) * 8);")
            elif ring:
                ring_decl.append(f"uint32_t {var}r[R][4];  // {var} table of each atom in the ring")
                ring_tables.append((var, ptr, group))
                per_atom.append(f"const uint32_t (&{var}8)[4] = {var}r[s];")
            else:
                per_atom.append(f"uint32_t {var}8[4]; load_g128_cached({var}8, {table_addr(ptr, group, 'atom * 64')});")
        elif group:
            per_step.append(f"uint32_t {var}8[4]; load_g128_cached({var}8, {table_addr(ptr, group, 'k')});")
    if ring:
        ring_decl.insert(0, "uint32_t xr[R][4][TOKEN_TILES][2];  // activations as the MMA's B operand, per k16 step and token tile")
        activations = "const uint32_t (&xb)[TOKEN_TILES][2] = xr[s][ks];"
    elif bulk or staged:
        activations = "const uint32_t (&xb)[TOKEN_TILES][2] = xa[ks];"
    else:
        activations = """const int k = atom * 64 + ks * 16;
          // activations as the B operand: token g + 8j, k pairs 2q and 2q + 8
          uint32_t xb[TOKEN_TILES][2];
          #pragma unroll
          for (int j = 0; j < TOKEN_TILES; ++j) {
            const int tok = j * 8 + g;
            const uint16_t* xp = A + (size_t)(tok < M ? tok : 0) * K + k + 2 * q;
            xb[j][0] = tok < M ? load_g32(xp) : 0u;
            xb[j][1] = tok < M ? load_g32(xp + 8) : 0u;
          }"""
    if staged:
        if per_step:
            raise ValueError("x_smem stages tables of groups >= 64 (one row per atom); this layout has smaller groups")
        per_atom.insert(0, _X_SMEM_ACTIVATIONS.fill(origin=_staged_origin(t)))
    per_step_code = "\n          ".join(per_step)
    per_atom_code = "\n      ".join(per_atom)
    ring_decl_code = "".join("\n  " + line for line in ring_decl)

    def fetch(slot: str, atom: str, indent: str, parts: str = "wxt") -> str:
        """Issue the global loads of atom `atom` into ring slot `slot`: its weights (16-byte loads; part w) and, with
        x_ring, its activations (k pairs 2q, 2q + 8 of each k16 step for token g + 8j; part x) and per-atom tables
        (part t)."""
        lines = [
            f"const uint32_t* p = wbase + (size_t)({atom}) * ATOM_U4 * 4;",
            "#pragma unroll",
            f"for (int c = 0; c < CB; ++c) load_g128(buf[{slot}][c], p + c * 128);",
        ] if "w" in parts else []
        if ring and "x" in parts:
            lines += [
                "#pragma unroll",
                "for (int ks = 0; ks < 4; ++ks)",
                "  #pragma unroll",
                "  for (int jt = 0; jt < TOKEN_TILES; ++jt) {",
                "    const int tok = jt * 8 + g;",
                f"    const uint16_t* xp = A + (size_t)(tok < M ? tok : 0) * K + ({atom}) * 64 + ks * 16 + 2 * q;",
                f"    xr[{slot}][ks][jt][0] = tok < M ? load_g32(xp) : 0u;",
                f"    xr[{slot}][ks][jt][1] = tok < M ? load_g32(xp + 8) : 0u;",
                "  }",
            ]
        for var, ptr, group in ring_tables if "t" in parts else ():
            lines.append(f"load_g128_cached({var}r[{slot}], {table_addr(ptr, group, f'({atom}) * 64')});")
        return "\n".join(indent + line for line in lines)

    pick, decode, zero_const = pair_decode(lay, bool(s_group), bool(z_group))
    fold = bool(t.fold)
    if fold:  # the MMA takes the exact raw codes; (code + zz) * ss is applied per atom in fp32 (see fold_code)
        pick, decode = "", ""
    mma_acc = "tmp[tt][j]" if fold else "acc[tt][j]"
    atom_head, ks_head, atom_tail = (_fold_parts(lay, bool(s_group), bool(z_group)) if fold else ("", "", ""))

    k_line = "const int k = atom * 64 + ks * 16;" if ring and per_step else ""
    # the atom's words are in registers already (ring slot s, or wv of the bulk variant), indexed by constants
    decode_pairs = _DECODE_PAIRS.fill(pair_index=pair_index_c("ks", "nt", "r", lay.tile_major),
                                      words="wv" if bulk else "buf[s]", ppw=ppw, pick=pick, decode=decode)
    if t.fold == 2:
        atom_body = _fold_tt_outer_body(per_atom_code, lay, bool(s_group), bool(z_group), decode_pairs,
                                        "xa" if bulk or staged else "xr[s]")
    else:
        atom_body = f"""      {per_atom_code}{atom_head}
        #pragma unroll
        for (int ks = 0; ks < 4; ++ks) {{
          {activations}
          {k_line}
          {per_step_code}{ks_head}
          #pragma unroll
          for (int tt = 0; tt < 4; ++tt) {{
            {decode_pairs}
            #pragma unroll
            for (int j = 0; j < TOKEN_TILES; ++j) mma_k16({mma_acc}, a, xb[j][0], xb[j][1]);
          }}
        }}{atom_tail}    }}
"""

    first = "atom0 + wk + s * WARPS_K"
    stage_tables, stage_x, x_smem_consts = _x_smem_parts(plan) if staged else ("", "", "")
    if plan.pdl:  # weights and tables are constant: fetched before the wait for the previous kernel
        if bulk:
            raise ValueError("programmatic dependent launch (pdl) is written for the register-ring stream kernel")
        prologue = f"""  #pragma unroll
  for (int s = 0; s < PF; ++s)
    if (s < natoms) {{
{fetch("s", first, "      ", "wt")}
    }}{stage_tables}
  pdl_wait();  // the previous kernel's outputs (our activations) are visible; nothing was read or written yet{stage_x}"""
        if ring:
            prologue += f"""
  #pragma unroll
  for (int s = 0; s < PF; ++s)
    if (s < natoms) {{
{fetch("s", first, "      ", "x")}
    }}"""
    else:
        prologue = f"""  #pragma unroll
  for (int s = 0; s < PF; ++s)
    if (s < natoms) {{
{fetch("s", first, "      ")}
    }}{stage_tables}{stage_x}"""
    if bulk:
        main_loop = _bulk_main_loop(lay, table_rows, atom_body)
    else:
        main_loop = f"""  // ring of R = PF + 1 register slots: atom j lives in slot j % R; PF atoms stay in flight while the warp
  // decodes and multiplies the current one
  uint32_t buf[R][CB][4];{ring_decl_code}
{prologue}
  for (int i = 0; i < natoms; i += R) {{
    #pragma unroll
    for (int s = 0; s < R; ++s) {{
      const int j = i + s;
      if (j >= natoms) break;
      const int atom = atom0 + wk + j * WARPS_K;
      if (j + PF < natoms) {{
{fetch("(s + PF) % R", "atom + PF * WARPS_K", "        ")}
      }}
{atom_body}  }}
"""
    bulk_consts = bulk_fold_sync = ""
    wbase_line = "const uint32_t* wbase = B + ((size_t)slab * katoms_total) * ATOM_U4 * 4 + lane * 4;"
    if bulk:
        bulk_consts = _bulk_constants(lay, token_tiles, table_rows)
        bulk_fold_sync = "\n    __syncthreads();  // every warp is done with its ring, which the fold overwrites"
        wbase_line = "const uint32_t* wbase = B + ((size_t)slab * katoms_total) * ATOM_U4 * 4;  // this slab's atoms"
    gs_doc, scale_line, row_mul = gs_epilogue_parts(plan, "tok")
    split_code = _SPLITS_BY_WORKSPACE
    if plan.cluster_splits:
        from humming.core.plan import cluster_splits_bytes

        if bulk or t.balance:
            raise ValueError("split-K clusters are written for the register-ring stream kernel without balance")
        prelude += backend.helpers("cluster_dsmem", caps=caps)
        split_code = (f"  constexpr int CS_OFFSET = {plan.smem_bytes - cluster_splits_bytes(plan)};  "
                      f"// the other splits' partials (first block)\n" + _SPLITS_BY_CLUSTER)
    pdl_trigger = ""
    if plan.pdl:
        prelude += backend.helpers("grid_dependency", caps=caps)
        pdl_trigger = "\n  pdl_launch_dependents();  // the next kernel may start its weight prefetch as SMs free up"
    if t.balance:
        if bulk:
            raise ValueError("balance is written for the register-ring stream kernel")
        unit_code = """  // balance: blocks 0 .. N/64 - BALANCE - 1 take whole slabs; the last BALANCE slabs run as two blocks each, one
  // per half of K (split-K partials, the second to finish adds both)
  const int full = N / 64 - BALANCE, unit = blockIdx.y;
  const int slab = unit < full ? unit : full + (unit - full) / 2;
  const int zsplit = unit < full ? 0 : (unit - full) % 2, splits = unit < full ? 1 : 2;
  k_per_split = K / splits;"""
        balance_const = f"\nconstexpr int BALANCE = {t.balance};                 // slabs split in two halves of K"
    else:
        unit_code = "  const int slab = blockIdx.y, zsplit = blockIdx.z, splits = gridDim.z;"
        balance_const = ""
    return f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
{prelude}

namespace cfg {{
constexpr int WARPS_K = {t.warps_k};{balance_const}
constexpr int THREADS = 32 * WARPS_K;
constexpr int TOKEN_TILES = {token_tiles};         // n8 tiles of activations (tokens)
constexpr int CB = {cb};                            // container bits per code
constexpr int ATOM_U4 = 32 * CB;                    // 16-byte words per 64x64 weight atom
constexpr int PF = {t.stages - 1}, R = PF + 1;          // atoms in flight per warp, register ring size{bulk_consts}{x_smem_consts}
}}
{_STAGE_ROWS if staged else ""}
extern "C" __global__ void __launch_bounds__(cfg::THREADS) {plan.kernel_name}(
    const uint16_t* __restrict__ A, const uint32_t* __restrict__ B, const uint16_t* __restrict__ S,
    const uint16_t* __restrict__ Z, const float* __restrict__ CS, const uint16_t* __restrict__ BIAS,
    uint16_t* __restrict__ C, float* __restrict__ WS, int* __restrict__ CNT,
    int M, int N, int K, int k_per_split, float out_scale,
    const float* __restrict__ GS) {{        {gs_doc}

  using namespace cfg;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int last_block;{pdl_trigger}
  const int lane = threadIdx.x & 31, wk = threadIdx.x >> 5;
{unit_code}
  const int n0 = slab * 64;
  const int katoms_total = K / 64;
  const int atom0 = zsplit * (k_per_split / 64);
  const int natoms = k_per_split / 64 / WARPS_K;
  const int g = lane >> 2, q = lane & 3;
  // this lane's 16-byte words of atom a: chunk c at ((slab * katoms + a) * ATOM_U4 + c * 32 + lane) * 16 bytes
  {wbase_line}

  float acc[4][TOKEN_TILES][4];
  #pragma unroll
  for (int i = 0; i < 4; ++i)
    #pragma unroll
    for (int j = 0; j < TOKEN_TILES; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
{zero_const}
{main_loop}
  // fold the warps' partial sums (shared memory), then split-K partials (workspace)
  constexpr int PER_WARP = 4 * TOKEN_TILES * 4 * 32;
  float* red = reinterpret_cast<float*>(smem);
  if (WARPS_K > 1) {{{bulk_fold_sync}
    if (wk > 0) {{
      #pragma unroll
      for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < TOKEN_TILES; ++j)
          #pragma unroll
          for (int e = 0; e < 4; ++e) red[(wk - 1) * PER_WARP + ((i * TOKEN_TILES + j) * 4 + e) * 32 + lane] = acc[i][j][e];
    }}
    __syncthreads();
    if (wk == 0) {{
      for (int w = 1; w < WARPS_K; ++w)
        #pragma unroll
        for (int i = 0; i < 4; ++i)
          #pragma unroll
          for (int j = 0; j < TOKEN_TILES; ++j)
            #pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] += red[(w - 1) * PER_WARP + ((i * TOKEN_TILES + j) * 4 + e) * 32 + lane];
    }}
  }}
{split_code}
  if (wk != 0) return;
  {scale_line}
  #pragma unroll
  for (int i = 0; i < 4; ++i)
    #pragma unroll
    for (int j = 0; j < TOKEN_TILES; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {{
        const int ch = n0 + i * 16 + g + 8 * (e >> 1), tok = j * 8 + 2 * q + (e & 1);
        if (tok < M) {{
          float v = acc[i][j][e] * scale;{row_mul}
          if (CS) v *= load_f32(CS + ch);
          if (BIAS) v += act_to_f32(load_u16(BIAS + ch));
          store_act(C + (size_t)tok * N + ch, v);
        }}
      }}
}}
"""


def _fold_parts(lay, scales: bool, zeros: bool) -> tuple[str, str, str]:
    """Code of the fold variant: per-atom partial sums ``tmp`` of raw codes x activations, the activations' sums
    ``sx`` over the atom (one MMA with an all-ones A per k16 step), and the per-atom fp32 epilogue
    acc += ss * (tmp + zz * sx) for the lane's channels tt*16 + g (+8) (zz = -(magic + zero), ss = scale)."""
    if fold_applies(lay):
        raise ValueError(fold_applies(lay))
    head = """
      float tmp[4][TOKEN_TILES][4], sx[TOKEN_TILES][4];  // this atom's raw sums and activation sums
      #pragma unroll
      for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < TOKEN_TILES; ++j)
          #pragma unroll
          for (int e = 0; e < 4; ++e) tmp[i][j][e] = sx[j][e] = 0.0f;"""
    ks = """
          {  // sum of the activations over k: rows of an all-ones A
            const uint32_t one2 = f32x2_to_act2(1.0f, 1.0f);
            const uint32_t ones[4] = {one2, one2, one2, one2};
            #pragma unroll
            for (int j = 0; j < TOKEN_TILES; ++j) mma_k16(sx[j], ones, xb[j][0], xb[j][1]);
          }"""
    z, sc = _fold_factors(lay, scales, zeros)
    tail = f"""
        #pragma unroll
        for (int tt = 0; tt < 4; ++tt)
          #pragma unroll
          for (int h = 0; h < 2; ++h) {{
            const float zf = {z}, sf = {sc};
            #pragma unroll
            for (int j = 0; j < TOKEN_TILES; ++j)
              #pragma unroll
              for (int c = 0; c < 2; ++c) {{
                const int e = h * 2 + c;
                acc[tt][j][e] = fmaf(sf, fmaf(zf, sx[j][e], tmp[tt][j][e]), acc[tt][j][e]);
              }}
          }}"""
    return head, ks, tail


def _fold_factors(lay, scales: bool, zeros: bool) -> tuple[str, str]:
    """C expressions of the zero term zz and the scale ss (as float) for the lane's accumulator rows: e >> 1 = h
    picks channel g or g + 8, i.e. n8 tile 2*tt + h: half h of the tables' word tt."""
    z = "act_to_f32((uint16_t)(zz8[tt] >> (16 * h)))" if zeros else _c(lay.zero_const)
    sc = "act_to_f32((uint16_t)(ss8[tt] >> (16 * h)))" if scales else "1.0f"
    return z, sc


def _fold_tt_outer_body(per_atom_code: str, lay, scales: bool, zeros: bool, decode_pairs: str,
                        xs: str) -> str:
    """fold == 2: the fold arithmetic with the 16-channel tiles outermost, so only one tile's raw sums are live
    (4 x TOKEN_TILES registers instead of 16 x TOKEN_TILES). Every k16 step's activations must already be in
    registers ``xs[ks][token tile][2]``: it needs the x_ring or the bulk option."""
    z, sc = _fold_factors(lay, scales, zeros)
    return f"""      {per_atom_code}
      float sx[TOKEN_TILES][4];  // the activations' sums over this atom: rows of an all-ones A
      {{
        const uint32_t one2 = f32x2_to_act2(1.0f, 1.0f);
        const uint32_t ones[4] = {{one2, one2, one2, one2}};
        // two chains of two MMAs (even / odd k16 steps) instead of one of four: 28672x8192 M=1 (x_smem) 37.9 ->
        // 36.4 us (docs/performance.md); the fold=1 form keeps one chain (two measured up to 6%
        // slower there: more registers)
        float sx2[TOKEN_TILES][4];
        #pragma unroll
        for (int j = 0; j < TOKEN_TILES; ++j)
          #pragma unroll
          for (int e = 0; e < 4; ++e) sx[j][e] = sx2[j][e] = 0.0f;
        #pragma unroll
        for (int ks = 0; ks < 4; ++ks)
          #pragma unroll
          for (int j = 0; j < TOKEN_TILES; ++j) mma_k16((ks & 1) ? sx2[j] : sx[j], ones, {xs}[ks][j][0], {xs}[ks][j][1]);
        #pragma unroll
        for (int j = 0; j < TOKEN_TILES; ++j)
          #pragma unroll
          for (int e = 0; e < 4; ++e) sx[j][e] += sx2[j][e];
      }}
      #pragma unroll
      for (int tt = 0; tt < 4; ++tt) {{
        float tmp[TOKEN_TILES][4];  // raw sums of channels tt*16 + g (+8) over this atom
        #pragma unroll
        for (int j = 0; j < TOKEN_TILES; ++j)
          #pragma unroll
          for (int e = 0; e < 4; ++e) tmp[j][e] = 0.0f;
        #pragma unroll
        for (int ks = 0; ks < 4; ++ks) {{
          {{
            {decode_pairs}
            #pragma unroll
            for (int j = 0; j < TOKEN_TILES; ++j) mma_k16(tmp[j], a, {xs}[ks][j][0], {xs}[ks][j][1]);
          }}
        }}
        #pragma unroll
        for (int h = 0; h < 2; ++h) {{
          const float zf = {z}, sf = {sc};
          #pragma unroll
          for (int j = 0; j < TOKEN_TILES; ++j)
            #pragma unroll
            for (int c = 0; c < 2; ++c) {{
              const int e = h * 2 + c;
              acc[tt][j][e] = fmaf(sf, fmaf(zf, sx[j][e], tmp[j][e]), acc[tt][j][e]);
            }}
        }}
      }}
    }}
"""


# ---- the bulk-copy variant (tiles.bulk): weights, tables and activations reach shared memory by bulk copy


def _bulk_constants(lay, token_tiles: int, table_rows) -> str:
    return f"""
constexpr int W_BYTES = 16 * ATOM_U4;                // one atom's weights, as stored
constexpr int TAB_ROWS = {len(table_rows)};                          // 128-byte table rows per atom (scales, then zeros)
constexpr int BM = 8 * TOKEN_TILES, X_PITCH = {X_PITCH};
constexpr int X_OFF = W_BYTES + 128 * TAB_ROWS;       // activation rows, X_PITCH apart
constexpr int SLOT_BYTES = X_OFF + X_PITCH * BM;     // {bulk_slot_bytes(lay, 8 * token_tiles)}"""


def _bulk_issue(lay, table_rows, slot: str, atom: str, indent: str) -> str:
    """Refill ring slot ``slot`` with atom ``atom``: lane 0 announces the bytes and copies the weights, lanes
    1.. one table row each, lanes 16.. one activation row each (token rows < M only)."""
    lines = [
        "{",
        f"  const uint32_t dst = ring + ({slot}) * SLOT_BYTES, bar = bars + 8 * ({slot});",
        f"  const int a_ = {atom};",
        "  fence_proxy_async_smem();  // the warp's reads of this slot (ordered by the warp sync) before the copies",
        "  if (lane == 0) {",
        "    mbar_expect_tx(bar, slot_tx);",
        "    bulk_copy_g2s(dst, wbase + (size_t)a_ * ATOM_U4 * 4, W_BYTES, bar);",
        "  }",
    ]
    for r, (ptr, row) in enumerate(table_rows):
        lines.append(f"  if (lane == {r + 1}) bulk_copy_g2s(dst + W_BYTES + {r * 128}, {ptr} + (size_t)({row}) * N + n0, 128, bar);")
    lines += [
        "  if (lane >= 16 && lane - 16 < x_rows)",
        "    bulk_copy_g2s(dst + X_OFF + (lane - 16) * X_PITCH, A + (size_t)(lane - 16) * K + a_ * 64, 128, bar);",
        "}",
    ]
    return "\n".join(indent + line for line in lines)


def _bulk_main_loop(lay, table_rows, atom_body: str) -> str:
    """The main loop of the bulk variant: a ring of R shared-memory slots per warp, each completed by its own
    mbarrier. A warp waits for slot s, reads the atom into registers (its weight words, the activations as
    B fragments with ldmatrix, its table rows), refills the slot with the atom R ahead and then computes, so
    R atoms stay in flight without holding registers."""
    reads = []
    for var, ptr in (("ss", "S"), ("zz", "Z")):
        idx = [i for i, row in enumerate(table_rows) if row[0] == ptr]
        if idx:
            reads.append(f"uint32_t {var}r[{len(idx)}][4];  // this lane's 8 values of each {var} row of the atom")
            reads.append("#pragma unroll")
            reads.append(f"for (int r = 0; r < {len(idx)}; ++r) lds_128({var}r[r], slot + W_BYTES + ({idx[0]} + r) * 128 + (lane >> 2) * 16);")
    reads_code = "".join("\n      " + line for line in reads)
    return f"""  // per-warp ring of R slots in shared memory, filled by bulk copies: slot s of warp wk holds one atom's
  // weights (W_BYTES, as stored), its table rows and its activation rows; mbarrier s completes when all landed
  const uint32_t ring = smem_u32(smem) + wk * R * SLOT_BYTES;
  const uint32_t bars = smem_u32(smem) + WARPS_K * R * SLOT_BYTES + wk * R * 8;
  const int x_rows = M < BM ? M : BM;
  const uint32_t slot_tx = W_BYTES + TAB_ROWS * 128 + x_rows * 128;
  if (lane == 0) {{
    #pragma unroll
    for (int s = 0; s < R; ++s) mbar_init(bars + 8 * s, 1);
    mbar_init_fence();
  }}
  __syncwarp();
  #pragma unroll
  for (int s = 0; s < R; ++s)
    if (s < natoms)
{_bulk_issue(lay, table_rows, "s", "atom0 + wk + s * WARPS_K", "      ")}
  uint32_t phase = 0;
  for (int i = 0; i < natoms; i += R, phase ^= 1) {{
    #pragma unroll
    for (int s = 0; s < R; ++s) {{
      const int j = i + s;
      if (j >= natoms) break;
      const int atom = atom0 + wk + j * WARPS_K;
      const uint32_t slot = ring + s * SLOT_BYTES;
      mbar_wait(bars + 8 * s, phase);
      uint32_t wv[CB][4];  // this lane's words of the atom (the global layout: chunk c, lane, 16 bytes)
      #pragma unroll
      for (int c = 0; c < CB; ++c) lds_128(wv[c], slot + c * 512 + lane * 16);
      uint32_t xa[4][TOKEN_TILES][2];  // activations as the B operand, per k16 step and token tile
      #pragma unroll
      for (int jt = 0; jt < TOKEN_TILES; ++jt)
        #pragma unroll
        for (int h = 0; h < 2; ++h) {{  // k 32h .. 32h + 31: four 8x8 matrices, token rows x 8 k each
          uint32_t r[4];
          ldmatrix_x4(r, slot + X_OFF + (jt * 8 + (lane & 7)) * X_PITCH + h * 64 + (lane >> 3) * 16);
          xa[2 * h][jt][0] = r[0]; xa[2 * h][jt][1] = r[1];
          xa[2 * h + 1][jt][0] = r[2]; xa[2 * h + 1][jt][1] = r[3];
        }}{reads_code}
      __syncwarp();  // every lane has read slot s
      if (j + R < natoms)
{_bulk_issue(lay, table_rows, "s", "atom + R * WARPS_K", "        ")}
{atom_body}  }}
"""


_STAGE_ROWS = r"""
// rows x cols16 16-byte words from global memory (rows `gpitch` elements apart) into packed shared-memory rows;
// each thread keeps 8 loads in flight, then stores them (rows at or past rows_valid are not read)
template <int ROWS, int COLS16>
__device__ __forceinline__ void stage_rows(uint16_t* dst, const uint16_t* src, size_t gpitch, int rows_valid) {
  constexpr int TOTAL = ROWS * COLS16;
  #pragma unroll 1
  for (int base = 0; base < TOTAL; base += 8 * cfg::THREADS) {
    uint32_t v[8][4];
    #pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int i = base + u * cfg::THREADS + (int)threadIdx.x;
      if (i < TOTAL && i / COLS16 < rows_valid) load_g128_cached(v[u], src + (size_t)(i / COLS16) * gpitch + (i % COLS16) * 8);
    }
    #pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int i = base + u * cfg::THREADS + (int)threadIdx.x;
      if (i < TOTAL && i / COLS16 < rows_valid) {
        uint32_t* d = reinterpret_cast<uint32_t*>(dst + (size_t)i * 8);
        d[0] = v[u][0]; d[1] = v[u][1]; d[2] = v[u][2]; d[3] = v[u][3];
      }
    }
  }
}
// 16 bytes of shared memory (16-byte aligned) into four registers
__device__ __forceinline__ void lds_u4(uint32_t (&r)[4], const uint16_t* p) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(p);
  r[0] = w[0]; r[1] = w[1]; r[2] = w[2]; r[3] = w[3];
}
"""

# ``origin``: the first atom the block staged (_staged_origin)
_X_SMEM_ACTIVATIONS = Template("""uint32_t xa[4][TOKEN_TILES][2];  // this atom's activations as the B operand, from the staged copy
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks)
        #pragma unroll
        for (int jt = 0; jt < TOKEN_TILES; ++jt) {
          const int tok = jt * 8 + g;
          const uint32_t* xp = reinterpret_cast<const uint32_t*>(x_s + (tok < M ? tok : 0) * XS_K + (atom - ${origin}) * 64 + ks * 16 + 2 * q);
          xa[ks][jt][0] = tok < M ? xp[0] : 0u;
          xa[ks][jt][1] = tok < M ? xp[4] : 0u;
        }""")


# the MMA's A registers of m16 tile tt at k16 step ks: the lane's pairs (nt = 2 tt + h, r), decoded from the atom's
# words ``words`` (``ppw`` pairs a word); ``pick`` / ``decode``: the layout's statements (pair_decode)
_DECODE_PAIRS = Template("""uint32_t a[4];
            #pragma unroll
            for (int h = 0; h < 2; ++h)
              #pragma unroll
              for (int r = 0; r < 2; ++r) {
                const int nt = 2 * tt + h;
                const int p = ${pair_index};  // the lane's pair index in the atom
                uint32_t v = dq_raw(${words}[p / ${ppw} / 4][p / ${ppw} % 4], p % ${ppw});
                ${pick}
                ${decode}
                a[r * 2 + h] = v;
              }""")


def _staged_origin(tiles) -> str:
    """The first atom an x_smem block stages: its split's first (atom0), or 0 with balance (every block stages all
    of K, whichever half it multiplies)."""
    return "0" if tiles.balance else "atom0"


def _x_smem_parts(plan) -> tuple[str, str, str]:
    """(table staging + shared-memory pointers, activation staging + barrier, cfg constants) of an x_smem plan."""
    t, lay = plan.tiles, plan.layout
    k_split = plan.k // plan.splits
    origin = _staged_origin(t)
    tokens = x_smem_tokens(plan.m, t.bm)
    staged = x_smem_layout(lay, tokens, k_split, stream_smem_bytes(t, lay), t.threads)
    if isinstance(staged, str):
        raise ValueError(staged)
    consts = (f"\nconstexpr int XS_TOKENS = {tokens}, XS_K = {k_split};  // staged activations: at most XS_TOKENS "
              f"tokens x the K range of a split"
              f"\nconstexpr int XS_OFFSET = {staged['x_offset']};  // bytes into shared memory (after the fold area)")
    lines = ["", "  // x_smem: this block's table rows now, its activations after the wait; shared loads per atom",
             "  uint16_t* const x_s = reinterpret_cast<uint16_t*>(smem + XS_OFFSET);"]
    for tab in staged["tables"]:
        var, group, rows = tab["var"], tab["group"], tab["rows"]
        ptr = "S" if var == "ss" else "Z"
        row0 = "0" if group < 0 else f"{origin} * 64 / {group}"
        total = "1" if group < 0 else f"(K + {group - 1}) / {group}"
        lines += [f"  uint16_t* const {var}_s = reinterpret_cast<uint16_t*>(smem + {tab['offset']});",
                  f"  const int {var}_row0 = {row0};",
                  f"  stage_rows<{rows}, 8>({var}_s, {ptr} + (size_t){var}_row0 * N + n0, N, {total} - {var}_row0);"]
    stage_x = f"""
  if (M > XS_TOKENS) __trap();  // the plan reserved XS_TOKENS rows: a launch for more tokens is a planning bug
  stage_rows<XS_TOKENS, XS_K / 8>(x_s, A + (size_t){origin} * 64, K, M);
  __syncthreads();  // the staged copies are visible to every warp"""
    return "\n".join(lines), stage_x, consts


# split-K partials through the global workspace: each split writes its partial in accumulator-register order (4
# registers per 16-byte store, WS[slab][split][16-channel tile i, token tile j][lane]: a warp's store covers 512
# contiguous bytes), the last block to take a ticket on the slab's counter reads them back the same way and adds them
# in split order. Lane l of warp 0 reads only what lane l of the other blocks' warp 0 wrote.
_SPLITS_BY_WORKSPACE = r"""  if (splits > 1) {
    constexpr int SPLIT_FLOATS = 4 * TOKEN_TILES * 4 * 32;  // one split's partial of the slab
    float* slab_ws = WS + (size_t)slab * splits * SPLIT_FLOATS + lane * 4;
    if (wk == 0) {
      #pragma unroll
      for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < TOKEN_TILES; ++j)
          store_f32x4(slab_ws + (size_t)zsplit * SPLIT_FLOATS + (i * TOKEN_TILES + j) * 128, acc[i][j][0], acc[i][j][1],
                      acc[i][j][2], acc[i][j][3]);
    }
    fence_device();
    __syncthreads();
    if (threadIdx.x == 0) {
      int* counter = CNT + slab;
      const int ticket = atomic_add_i32(counter, 1);
      last_block = ticket == splits - 1;
      if (last_block) store_i32(counter, 0);
    }
    __syncthreads();
    if (!last_block) return;
    fence_device();
    if (wk == 0) {
      // acc = the partials of splits 0, 1, ... added in that order (deterministic whichever block is last).
      // The split loop stays rolled (compile time); the loads of one pass do not depend on each
      // other, so they overlap: one L2 round trip per split (a rolled loop per accumulator paid one per add).
      #pragma unroll
      for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < TOKEN_TILES; ++j)
          #pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
      #pragma unroll 1
      for (int z = 0; z < splits; ++z)
        #pragma unroll
        for (int i = 0; i < 4; ++i)
          #pragma unroll
          for (int j = 0; j < TOKEN_TILES; ++j) {
            float r[4];
            load_f32x4_l2(r, slab_ws + (size_t)z * SPLIT_FLOATS + (i * TOKEN_TILES + j) * 128);
            #pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] += r[e];
          }
    }
  }"""

# split-K partials inside a thread-block cluster (1 x 1 x splits; Plan.cluster_splits): the other splits store theirs
# into the first block's shared memory (CS_OFFSET: (splits - 1) x [4 * TOKEN_TILES tiles][32 lanes] x 4 floats), one
# cluster barrier, and the first block adds them in split order
_SPLITS_BY_CLUSTER = r"""  if (splits > 1) {
    const uint32_t rank = cluster_rank();  // = zsplit (the cluster spans the grid's z)
    constexpr int PART_BYTES = 4 * TOKEN_TILES * 32 * 16;
    cluster_sync();  // every block of the cluster has started (its shared memory exists) before peers store into it
    if (rank > 0 && wk == 0) {
      const uint32_t dst = cluster_peer_addr(smem_u32(smem + CS_OFFSET), 0) + (rank - 1) * PART_BYTES;
      #pragma unroll
      for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < TOKEN_TILES; ++j)
          st_cluster_f32x4(dst + ((i * TOKEN_TILES + j) * 32 + lane) * 16, acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]);
    }
    // every split's partial is in the first block (which stays until it has read them). Letting the other blocks
    // leave after their arrival alone measured the same (docs/performance.md)
    cluster_sync();
    if (rank > 0) return;
    if (wk == 0) {
      #pragma unroll 1
      for (int z = 1; z < splits; ++z) {
        const float* part = reinterpret_cast<const float*>(smem + CS_OFFSET + (z - 1) * PART_BYTES);
        #pragma unroll
        for (int i = 0; i < 4; ++i)
          #pragma unroll
          for (int j = 0; j < TOKEN_TILES; ++j)
            #pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] += part[((i * TOKEN_TILES + j) * 32 + lane) * 4 + e];
      }
    }
  }"""
