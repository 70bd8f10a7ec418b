"""The CUDA C++ of the MoE routing kernels: one block of ``THREADS`` threads builds a whole
:class:`~humming.core.moe.routing.Routing` in one launch (``humming.core.moe.route_kernel`` compiles and launches
them).

Three forms, each a kernel per input dtype (int32 / int64, spelled ``32`` / ``64`` in the names):

* ``humming_moe_route_ids{I}_map{M}`` (:func:`~humming.core.moe.routing.route`): slot ``s`` goes to
  ``expert_map[topk_ids[s]]`` (or ``topk_ids[s]`` without a map; ``has_map`` says which), dropped when that is not in
  ``[0, num_experts)``. (1) Per-expert counts in shared memory: the lanes of a warp with the same expert are found
  with ``__match_any_sync`` and their leader adds their number with one shared atomic. (2) An exclusive block scan of
  the counts rounded up to ``block_m`` gives each expert's padded run. (3) ``expert_ids``, ``num_padded``, and the
  sentinel in every position that holds no slot (run tails, everything past the used length). (4) The slots are
  placed chunk by chunk (``THREADS`` consecutive slots a chunk), stably: a slot's position is its run's start, plus
  the slots of its expert placed by earlier chunks, plus those of earlier warps in this chunk (per-warp counts, one
  byte each, summed with ``__dp4a``), plus those of earlier lanes in its warp (``__popc`` of the match mask).
* ``humming_moe_layout_offsets{I}`` (:func:`~humming.core.moe.routing.routing_from_offsets`) and
  ``humming_moe_layout_counts{I}`` (:func:`~humming.core.moe.routing.routing_from_counts`): rows already grouped per
  expert. Each expert's count and first row come from the offsets (clamped to ``[0, num_rows]``, made
  non-decreasing with a block max-scan) or the counts (clamped to ``[0, capacity_per_expert]``, expert ``e`` starting
  at row ``e * capacity_per_expert``); after the same scan every position of ``sorted_ids`` looks up its expert with a
  binary search over the run starts and is written once.

Every element of the three outputs is written, so they need no fill beforehand. At most ``MAX_EXPERTS`` experts
(one per thread in the scans); ``__match_any_sync`` needs sm_70 or later.
"""
from __future__ import annotations

__all__ = ["THREADS", "MAX_EXPERTS", "ID_BITS", "route_kernel_name", "layout_kernel_name", "KERNEL_NAMES",
           "route_source"]

THREADS = 1024  # one block; 32 warps (the per-warp byte counts are packed four to a word)
MAX_EXPERTS = 1024  # one expert per thread in the scans
ID_BITS = (32, 64)  # int32 / int64 inputs


def route_kernel_name(id_bits: int, map_bits: int) -> str:
    """The routing kernel reading ``topk_ids`` of ``id_bits`` and ``expert_map`` of ``map_bits`` bits."""
    return f"humming_moe_route_ids{id_bits}_map{map_bits}"


def layout_kernel_name(form: str, bits: int) -> str:
    """The kernel of rows grouped per expert: ``form`` "offsets" or "counts", its input of ``bits`` bits."""
    if form not in ("offsets", "counts"):
        raise ValueError(f"form must be 'offsets' or 'counts', got {form!r}")
    return f"humming_moe_layout_{form}{bits}"


KERNEL_NAMES: tuple[str, ...] = (
    tuple(route_kernel_name(i, m) for i in ID_BITS for m in ID_BITS)
    + tuple(layout_kernel_name(f, b) for f in ("offsets", "counts") for b in ID_BITS)
)

_CTYPE = {32: "int", 64: "long long"}

_COMMON = r"""
// MoE routing (humming.core.moe.route_source): one block of THREADS threads builds a whole routing.
//   sorted_ids [capacity]            slot ids by expert, ascending within an expert, each expert's run padded to a
//                                    multiple of block_m with the sentinel; the sentinel past the used length
//   expert_ids [capacity / block_m]  the expert of each block of block_m entries; -1 past the used length
//   num_padded [1]                   the used length
// Every element of the outputs is written.

#define THREADS {threads}
#define WARPS (THREADS / 32)
#define MAX_EXPERTS {max_experts}
#define FULL_MASK 0xffffffffu
static_assert(WARPS == 32, "one warp scans the warp totals; the per-warp counts fill WARPS / 4 words");

struct Sum {{
  __device__ int operator()(int a, int b) const {{ return a + b; }}
}};
struct Max {{
  __device__ int operator()(int a, int b) const {{ return a > b ? a : b; }}
}};

// Inclusive scan (with op) of one value per thread, in thread order. Afterwards warp_sums[WARPS - 1] holds the
// block's total until the next scan.
template <typename Op>
__device__ int block_inclusive_scan(int v, int* warp_sums, Op op) {{
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int d = 1; d < 32; d <<= 1) {{
    const int up = __shfl_up_sync(FULL_MASK, v, d);
    if (lane >= d) v = op(up, v);
  }}
  __syncthreads();  // warp_sums may still be read by the previous scan's threads
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {{
    int w = warp_sums[lane];
    for (int d = 1; d < 32; d <<= 1) {{
      const int up = __shfl_up_sync(FULL_MASK, w, d);
      if (lane >= d) w = op(up, w);
    }}
    warp_sums[lane] = w;
  }}
  __syncthreads();
  return warp == 0 ? v : op(warp_sums[warp - 1], v);
}}

// The expert whose padded run holds position p (< the used length): the last e with pad_start[e] <= p. An empty
// run starts where the next one does, so the last such e is the run that holds p.
__device__ int expert_at(const int* pad_start, int num_experts, int p) {{
  int lo = 0, hi = num_experts - 1;
  while (lo < hi) {{
    const int mid = (lo + hi + 1) >> 1;
    if (pad_start[mid] <= p) lo = mid; else hi = mid - 1;
  }}
  return lo;
}}

// Lay out the padded runs of count (one per thread, 0 past num_experts): pad_start[e] for e <= num_experts
// (pad_start[num_experts] is the used length), num_padded, expert_ids. Returns the used length; ends with a barrier,
// so pad_start is readable by every thread.
__device__ int lay_out_runs(int count, int num_experts, int block_m, int capacity, int* pad_start, int* warp_sums,
                            int* expert_ids, int* num_padded) {{
  const int tid = threadIdx.x;
  const int padded = (count + block_m - 1) & -block_m;  // block_m is a power of two
  const int end = block_inclusive_scan(padded, warp_sums, Sum());
  const int used = warp_sums[WARPS - 1];
  if (tid < num_experts) pad_start[tid] = end - padded;
  if (tid == 0) {{
    pad_start[num_experts] = used;
    num_padded[0] = used;
  }}
  __syncthreads();
  const int blocks = capacity / block_m;
  for (int b = tid; b < blocks; b += THREADS) {{
    const int p = b * block_m;
    expert_ids[b] = p < used ? expert_at(pad_start, num_experts, p) : -1;
  }}
  return used;
}}
"""

_ROUTE = r"""
// The local expert of slot s, or -1 when it has none (an id outside the map, an unmapped expert, an id outside
// [0, num_experts)).
template <typename Id, typename Map>
__device__ __forceinline__ int local_expert(const Id* ids, const Map* expert_map, int has_map, int num_global,
                                            int num_experts, int s) {
  long long e = (long long)ids[s];
  if (has_map) {
    if (e < 0 || e >= num_global) return -1;
    e = (long long)expert_map[e];
  }
  return e >= 0 && e < num_experts ? (int)e : -1;
}

template <typename Id, typename Map>
__device__ void route(const Id* ids, const Map* expert_map, int has_map, int num_global, int num_slots,
                      int num_experts, int block_m, int capacity, int* sorted_ids, int* expert_ids, int* num_padded) {
  __shared__ int count[MAX_EXPERTS];          // slots per expert
  __shared__ int pad_start[MAX_EXPERTS + 1];  // where each expert's padded run starts; then the used length
  __shared__ int placed[MAX_EXPERTS];         // slots per expert placed by earlier chunks
  // per chunk: warp_count[e] holds the number of expert e's slots in warp w in its byte w
  __shared__ unsigned warp_count[MAX_EXPERTS][WARPS / 4];
  __shared__ int warp_sums[WARPS];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // 1. count the slots of each expert (whole warps take every step: __match_any_sync needs all 32 lanes)
  if (tid < num_experts) {
    count[tid] = 0;
    placed[tid] = 0;
    for (int q = 0; q < WARPS / 4; ++q) warp_count[tid][q] = 0u;
  }
  __syncthreads();
  for (int base = 0; base < num_slots; base += THREADS) {
    const int s = base + tid;
    const int e = s < num_slots ? local_expert(ids, expert_map, has_map, num_global, num_experts, s) : -1;
    const unsigned peers = __match_any_sync(FULL_MASK, e);  // the lanes of this warp with the same expert
    if (e >= 0 && lane == __ffs(peers) - 1) atomicAdd(&count[e], __popc(peers));
  }
  __syncthreads();

  // 2. the padded runs, expert_ids and num_padded
  const int used = lay_out_runs(tid < num_experts ? count[tid] : 0, num_experts, block_m, capacity, pad_start,
                                warp_sums, expert_ids, num_padded);

  // 3. the sentinel where no slot goes: each run's tail, then everything past the used length
  if (tid < num_experts) {
    for (int p = pad_start[tid] + count[tid]; p < pad_start[tid + 1]; ++p) sorted_ids[p] = num_slots;
  }
  for (int p = used + tid; p < capacity; p += THREADS) sorted_ids[p] = num_slots;

  // 4. place the slots, THREADS at a time, in slot order within each expert
  const unsigned lanes_before = (1u << lane) - 1u;
  for (int base = 0; base < num_slots; base += THREADS) {
    const int s = base + tid;
    const int e = s < num_slots ? local_expert(ids, expert_map, has_map, num_global, num_experts, s) : -1;
    const unsigned peers = __match_any_sync(FULL_MASK, e);
    const bool leader = e >= 0 && lane == __ffs(peers) - 1;
    if (leader) reinterpret_cast<unsigned char*>(warp_count[e])[warp] = (unsigned char)__popc(peers);
    __syncthreads();
    if (e >= 0) {
      // same-expert slots before this one in the chunk: earlier lanes of this warp, then earlier warps (a byte each;
      // __dp4a with 0x01010101 adds the four bytes of a word)
      unsigned before = __popc(peers & lanes_before);
      const unsigned* row = warp_count[e];
      for (int q = 0; q < warp / 4; ++q) before = __dp4a(row[q], 0x01010101u, before);
      if (warp % 4) before = __dp4a(row[warp / 4] & ((1u << 8 * (warp % 4)) - 1u), 0x01010101u, before);
      sorted_ids[pad_start[e] + placed[e] + (int)before] = s;
    }
    __syncthreads();  // every slot of the chunk has read placed and warp_count
    if (leader) {
      atomicAdd(&placed[e], __popc(peers));
      reinterpret_cast<unsigned char*>(warp_count[e])[warp] = 0;
    }
    __syncwarp();  // the next chunk's leaders of this warp write its bytes after these resets
  }
}
"""

_LAYOUT = r"""
// Rows already grouped per expert: expert e's i-th row is first_row[e] + i for i < count[e]; the sentinel num_rows
// fills the rest. Every position looks its expert up and is written once.
__device__ void lay_out_rows(int count, int first, int num_experts, int num_rows, int block_m, int capacity,
                             int* sorted_ids, int* expert_ids, int* num_padded) {
  __shared__ int counts[MAX_EXPERTS];
  __shared__ int first_row[MAX_EXPERTS];
  __shared__ int pad_start[MAX_EXPERTS + 1];
  __shared__ int warp_sums[WARPS];
  const int tid = threadIdx.x;
  if (tid < num_experts) {
    counts[tid] = count;
    first_row[tid] = first;
  }
  const int used = lay_out_runs(count, num_experts, block_m, capacity, pad_start, warp_sums, expert_ids, num_padded);
  for (int p = tid; p < capacity; p += THREADS) {
    int v = num_rows;
    if (p < used) {
      const int e = expert_at(pad_start, num_experts, p);
      const int i = p - pad_start[e];
      if (i < counts[e]) v = first_row[e] + i;
    }
    sorted_ids[p] = v;
  }
}

template <typename T>
__device__ __forceinline__ int clamp_to(T v, int hi) {
  return v < (T)0 ? 0 : (v > (T)hi ? hi : (int)v);
}

// Expert e owns rows [offsets[e], offsets[e + 1]), the offsets clamped to [0, num_rows] and made non-decreasing.
template <typename T>
__device__ void layout_offsets(const T* offsets, int num_experts, int num_rows, int block_m, int capacity,
                               int* sorted_ids, int* expert_ids, int* num_padded) {
  __shared__ int ends[MAX_EXPERTS];
  __shared__ int warp_sums[WARPS];
  const int tid = threadIdx.x;
  const int start0 = clamp_to(offsets[0], num_rows);
  const int raw_end = tid < num_experts ? clamp_to(offsets[tid + 1], num_rows) : 0;
  const int end = max(start0, block_inclusive_scan(raw_end, warp_sums, Max()));  // the running maximum
  if (tid < num_experts) ends[tid] = end;
  __syncthreads();
  const int first = tid == 0 ? start0 : (tid < num_experts ? ends[tid - 1] : 0);
  lay_out_rows(tid < num_experts ? end - first : 0, first, num_experts, num_rows, block_m, capacity, sorted_ids,
               expert_ids, num_padded);
}

// Expert e owns rows [e * capacity_per_expert, e * capacity_per_expert + counts[e]), the count clamped to
// [0, capacity_per_expert].
template <typename T>
__device__ void layout_counts(const T* counts, int num_experts, int capacity_per_expert, int block_m, int capacity,
                              int* sorted_ids, int* expert_ids, int* num_padded) {
  const int tid = threadIdx.x;
  const int count = tid < num_experts ? clamp_to(counts[tid], capacity_per_expert) : 0;
  const int first = tid < num_experts ? tid * capacity_per_expert : 0;  // < num_rows: no overflow
  lay_out_rows(count, first, num_experts, num_experts * capacity_per_expert, block_m, capacity,
               sorted_ids, expert_ids, num_padded);
}
"""


def _route_entry(id_bits: int, map_bits: int) -> str:
    return (
        f'extern "C" __global__ void __launch_bounds__(THREADS) {route_kernel_name(id_bits, map_bits)}(\n'
        f"    const {_CTYPE[id_bits]}* ids, const {_CTYPE[map_bits]}* expert_map, int has_map, int num_global,\n"
        f"    int num_slots, int num_experts, int block_m, int capacity, int* sorted_ids, int* expert_ids,\n"
        f"    int* num_padded) {{\n"
        f"  route(ids, expert_map, has_map, num_global, num_slots, num_experts, block_m, capacity, sorted_ids,\n"
        f"        expert_ids, num_padded);\n"
        f"}}\n"
    )


def _layout_entry(form: str, bits: int) -> str:
    size = "num_rows" if form == "offsets" else "capacity_per_expert"
    return (
        f'extern "C" __global__ void __launch_bounds__(THREADS) {layout_kernel_name(form, bits)}(\n'
        f"    const {_CTYPE[bits]}* {form}, int num_experts, int {size}, int block_m, int capacity,\n"
        f"    int* sorted_ids, int* expert_ids, int* num_padded) {{\n"
        f"  layout_{form}({form}, num_experts, {size}, block_m, capacity, sorted_ids, expert_ids, num_padded);\n"
        f"}}\n"
    )


def route_source() -> str:
    """The CUDA C++ of every routing kernel (:data:`KERNEL_NAMES`), one module."""
    entries = [_route_entry(i, m) for i in ID_BITS for m in ID_BITS]
    entries += [_layout_entry(f, b) for f in ("offsets", "counts") for b in ID_BITS]
    common = _COMMON.format(threads=THREADS, max_experts=MAX_EXPERTS)
    return "\n".join([common.strip() + "\n", _ROUTE.strip() + "\n", _LAYOUT.strip() + "\n"] + entries)
