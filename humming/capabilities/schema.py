"""The shape of a profile file and of the target-rule file (_targets.yaml), as checker specs.

Profile grammar (every section optional except `name`; sections merge along `extends`):

    name: nvidia-b300                 extends: nvidia-blackwell-datacenter
    replaces: nvidia-b300             # only in a HUMMING_PROFILE_PATH file meant to replace a visible profile
    abstract: false                   verified: true        display_name: "NVIDIA B300"
    vendor: nvidia                    backend: nvidia
    match: {names: ["B300"], compute_capability: [10, 3]}   # cc defaults to the target's
    target: {arch: sm_103a, family: sm_103f, min_nvrtc: "12.9", compiler: nvrtc}
    mma_sync: {shapes: [ENTRY...], remove: [SELECTOR...]}
    wgmma:    {shapes: [ENTRY...], remove: [SELECTOR...]}
    tcgen05:  {kinds: {KIND: ENTRY or [ENTRY...]}, kinds_remove: [KIND...]}
    vendor_extensions: {NAME: {spelling, description, confirmed, mma: [ENTRY...], data: {...}}}
    memory: {cp_async, ldmatrix, stmatrix, tma, mbarrier, setmaxnreg, griddepcontrol, cluster_multicast, cluster_dsmem: bool, tmem_kb: int|null}
    limits: {sms, smem_per_block_kb, max_threads_per_block, registers_per_thread, warp_size, max_cluster_size,
             l2_mb, memory_gb, memory_tb_s, peak_tflops: {type: TFLOPS}}
    formats: {hidden: [e3m4, e0m3]}
    notes: [text...]                  sources: [text...]

ENTRY: {shape: [m, n, k], types: [...] | a_types: [...] + b_types: [...], acc: [...],
        n_values: [..] | {min, max, step}, kind: K (mma_sync only), scales: [{format, vec, min_nvrtc}],
        min_nvrtc: "13.1"}
"""
from __future__ import annotations

from humming.capabilities import vocabulary as V
from humming.capabilities.checks import (
    MAX_MMA_DIM,
    Bool,
    Either,
    Free,
    Ident,
    Int,
    ListOf,
    MapOf,
    Nullable,
    Num,
    OneOrList,
    Pair,
    Str,
    Struct,
    Triple,
    Version,
    Word,
)

ELEMENT = Word(V.ELEMENT_TYPES, "type")
ACC = Word(V.ACCUMULATOR_TYPES, "accumulator type")
N_VALUE = Int(1, maximum=MAX_MMA_DIM)
N_RANGE = Struct({"min": N_VALUE, "max": N_VALUE, "step": N_VALUE}, required=("min", "max", "step"))
SCALE = Struct(
    {"format": Word(V.SCALE_FORMATS, "scale format"), "vec": ListOf(Int(1, (1, 2, 4)), nonempty=True),
     "min_nvrtc": Version()},
    required=("format", "vec"),
)

_ENTRY_FIELDS = {
    "shape": Triple(),
    "types": ListOf(ELEMENT, nonempty=True, unique=True),
    "a_types": ListOf(ELEMENT, nonempty=True, unique=True),
    "b_types": ListOf(ELEMENT, nonempty=True, unique=True),
    "acc": ListOf(ACC, nonempty=True, unique=True),
    "n_values": Either(ListOf(N_VALUE, nonempty=True), N_RANGE, expected="a list of N or {min, max, step}"),
    "scales": ListOf(SCALE, nonempty=True),
    "min_nvrtc": Version(),
}
ENTRY = Struct(_ENTRY_FIELDS, required=("shape", "acc"))
MMA_SYNC_ENTRY = Struct({**_ENTRY_FIELDS, "kind": Word(V.MMA_SYNC_KINDS, "mma.sync kind")}, required=("shape", "acc"))
SELECTOR = Struct({"shape": Triple(), "type": ELEMENT, "kind": Word(V.MMA_SYNC_KINDS, "mma.sync kind")})

MMA_SYNC = Struct({"shapes": ListOf(MMA_SYNC_ENTRY), "remove": ListOf(SELECTOR, nonempty=True)})
WGMMA = Struct({"shapes": ListOf(ENTRY), "remove": ListOf(SELECTOR, nonempty=True)})
TCGEN05 = Struct({
    "kinds": MapOf(Either(ENTRY, ListOf(ENTRY, nonempty=True), expected="an entry or a list of entries"),
                   keys=Word(V.TCGEN05_KINDS, "kind")),
    "kinds_remove": ListOf(Word(V.TCGEN05_KINDS, "kind"), nonempty=True, unique=True),
})
EXTENSION = Struct({
    "spelling": Str(), "description": Str(), "confirmed": Bool(), "mma": ListOf(ENTRY, nonempty=True),
    "data": MapOf(Free()),
})

MATCH = Struct({"names": OneOrList(Str()), "compute_capability": Nullable(Pair()), "vendor": Ident()})
TARGET = Struct({
    "arch": Nullable(Ident()), "family": Nullable(Ident()), "min_nvrtc": Version(),
    "compiler": Word(V.COMPILERS, "compiler"), "fallback_compiler": Nullable(Word(V.COMPILERS, "compiler")),
})
# Upper bounds for any backend: far above every device known, so that only a typo or a hostile file hits them
# (sms 1e9, smem 1e9 KB). Numbers must be finite (NaN and infinity are refused) and above zero; null means unknown.
# Tighter, per-target ceilings for NVIDIA targets are in humming.capabilities.ceilings.
MAX_LIMITS: dict[str, int] = {
    "sms": 4096, "smem_per_block_kb": 4096, "max_threads_per_block": 4096, "registers_per_thread": 1024,
    "max_cluster_size": 64, "l2_mb": 4096, "memory_gb": 65536, "memory_tb_s": 1000, "peak_tflops": 1_000_000,
    "tmem_kb": 4096,
}
WARP_SIZES = (8, 16, 32, 64, 128)
MEMORY = Struct({**{k: Bool() for k in V.MEMORY_FEATURES},
                 "tmem_kb": Nullable(Int(1, maximum=MAX_LIMITS["tmem_kb"]))})
LIMITS = Struct({
    **{k: Nullable(Int(1, maximum=MAX_LIMITS[k])) for k in ("sms", "smem_per_block_kb", "max_threads_per_block",
                                                            "registers_per_thread", "max_cluster_size")},
    "warp_size": Nullable(Int(1, choices=WARP_SIZES)),
    **{k: Nullable(Num(MAX_LIMITS[k], positive=True)) for k in ("l2_mb", "memory_gb", "memory_tb_s")},
    "peak_tflops": MapOf(Num(MAX_LIMITS["peak_tflops"], positive=True), keys=Str()),
})
FORMATS = Struct({"hidden": ListOf(Word(V.HIDDEN_FORMATS, "hidden format"), unique=True)})

PROFILE = Struct(
    {
        "name": Ident(), "replaces": Ident(), "extends": Nullable(Ident()), "abstract": Bool(), "verified": Bool(),
        "vendor": Ident(), "backend": Word(V.BACKENDS, "backend"), "display_name": Str(),
        "match": MATCH, "target": TARGET,
        "mma_sync": MMA_SYNC, "wgmma": WGMMA, "tcgen05": TCGEN05, "vendor_extensions": MapOf(EXTENSION),
        "memory": MEMORY, "limits": LIMITS, "formats": FORMATS,
        "notes": OneOrList(Str()), "sources": OneOrList(Str()),
    },
    required=("name",),
)

# ---- _targets.yaml: which compile target can have which instructions (data, from FACTS.md §1) ----
INSTRUCTION_SET = Struct({"mma_sync": MMA_SYNC, "wgmma": WGMMA, "tcgen05": TCGEN05})
TARGET_RULE = Struct(
    {
        "compute_capability": Pair(), "min_nvrtc": Version(), "family": Nullable(Ident()),
        "binary_compat": Word(("exact", "major"), "binary_compat"),
        "instructions": ListOf(Ident(), unique=True),
        "memory": ListOf(Word(V.TARGET_MEMORY_WORDS, "memory feature"), unique=True),
        "hidden_formats": ListOf(Word(V.HIDDEN_FORMATS, "hidden format"), unique=True),
        "notes": OneOrList(Str()),
    },
    required=("compute_capability", "min_nvrtc", "binary_compat"),
)
BACKEND_RULE = Struct(
    {"families": ListOf(Word(V.MMA_FAMILIES, "family"), unique=True),
     "compilers": ListOf(Word(V.COMPILERS, "compiler"), unique=True)},
    required=("families", "compilers"),
)
RULES = Struct({
    "instruction_sets": MapOf(INSTRUCTION_SET),
    "targets": MapOf(TARGET_RULE),
    "backends": MapOf(BACKEND_RULE, keys=Word(V.BACKENDS, "backend")),
})
