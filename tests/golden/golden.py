"""The golden record of every generated kernel: a guard that restructuring the code keeps each plan and each
kernel's source byte for byte.

A *case* is a planning question asked through the public API (profile, scheme, M, N, K, activation type, group
size, and a variant setting), a mixture-of-experts GEMM (the model shapes of the MoE benchmark through the registry's
``select``: form, experts, top-k, tokens, act-order, MoE knobs), or one of the tuner's candidate plans. Its *record*
is what the code answers: the kernel's name, the SHA-256 of its CUDA source, the launch shape (grid, threads, cluster,
PDL), shared memory, workspace and the plan's reasons; or the error it raises.

    python tests/golden/golden.py --write            record the current code's answers (tests/golden/kernels.json.gz)
    python tests/golden/golden.py --check            compare (what tests/golden/test_golden.py does)
    python tests/golden/golden.py --write-wording    rewrite only wording: the reasons, error messages and the
                                                     comments of generated sources; refuses if anything else differs

Cases run with a clean environment: no ``HUMMING_*`` variable of the caller's, no user tuning file (the shipped
tuning data applies), so the record depends on the code alone.
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import itertools
import json
import os
import re
import sys
import tempfile
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "kernels.json.gz"

# Ms: every bucket edge and the odd sizes the rules treat specially (fitted token tiles, rounds of tiles)
MS_FULL = (1, 2, 3, 4, 5, 8, 9, 12, 16, 17, 24, 32, 33, 48, 64, 65, 80, 96, 100, 127, 128, 129, 160, 166, 167, 192,
           200, 255, 256, 257, 300, 384, 385, 448, 512, 513, 600, 640, 768, 769, 896, 1000, 1024, 1025, 1500, 2048,
           2049, 3000, 4096, 4097, 6000, 8192, 16384)
MS_SHORT = (1, 4, 8, 16, 32, 64, 96, 128, 160, 192, 256, 300, 384, 512, 768, 1024, 2048, 4096, 8192)
MS_FEW = (1, 8, 16, 64, 128, 256, 1024, 4096)
# (N, K): the benchmark's shapes, a square one, a small one and a narrow one
SHAPES_FULL = ((4096, 4096), (8192, 8192), (28672, 8192), (4096, 14336), (1024, 2048), (2048, 7168), (576, 7168))
SHAPES_SHORT = ((4096, 4096), (8192, 8192), (28672, 8192), (4096, 14336))
SHAPES_FEW = ((8192, 8192), (1024, 2048))
HOPPER = ("nvidia-h200", "nvidia-h100", "nvidia-h20")
UNVERIFIED = ("nvidia-b200", "nvidia-b300", "nvidia-rubin", "nvidia-thor", "nvidia-rtx-5090", "nvidia-gb10")

# Variant settings, each with the profiles, schemes, Ms and shapes it is recorded over. A setting is a dict of
# the switch names of the code being recorded (VARIANT_APPLY turns it into that code's mechanism).
W4A16 = ("w4a16", "w4a16-zp", "w8a16", "w4a16-fp4", "w4a16-nvfp4", "mxint4", "w3a16")
W8 = ("w8a8-int8", "w8a8-fp8", "w8a8-fp8-tensor", "w8a8-fp8-block", "w4a8-int8", "w4a8-fp8", "w4a8-mxfp4")
INT4_16 = ("w4a16", "w4a16-zp")
W4A8 = ("w4a8-int8", "w4a8-fp8")
VARIANTS: tuple[tuple[dict, tuple[str, ...], tuple[str, ...]], ...] = (
    # (setting, schemes, profiles)
    ({"HUMMING_WGMMA": "0"}, W8, HOPPER[:1]),
    ({"HUMMING_WGMMA_WNA16": "0"}, W4A16, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS": "0"}, W4A16, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS": "1"}, W4A16, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS": "1"}, ("w4a16-mxfp4", "w4a4-nvfp4", "w4a4-mxfp4"), HOPPER[:1]),  # e2m1 on register-A
    ({"HUMMING_WGMMA_FAST_ACCUM": "1"}, W8, HOPPER[:1]),
    ({"HUMMING_W4A8_WIDEN": "prmt"}, W4A8, HOPPER[:1] + ("nvidia-l40s", "nvidia-rtx-5090")),
    ({"HUMMING_WGMMA_W4A8_RS": "0"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_CHAIN": "128"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_CHAIN": "64"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS_STSM": "0"}, W4A16 + W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_WS": "0"}, W8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_WIDE_FROM": "128"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_STREAMK": "0"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_STREAMK": "132"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_PF": "3"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_DIRECT": "0"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_STAGGER": "0"}, W4A16 + W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS_TMA": "0"}, W4A16, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS_PF": "3"}, W4A16, HOPPER[:1]),
    ({"HUMMING_WGMMA_W8A8_TMA": "0"}, W8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_TMA": "1"}, W8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_TMA": "0"}, W8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_WS": "0"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_WIDENED": "1"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_WIDENED": "2"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_BT": "128"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_BT": "256"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS_FIT_TILE": "0"}, W4A16 + W4A8, HOPPER[:1]),
    ({"HUMMING_PDL": "0"}, W4A16, HOPPER[:1]),
    ({"HUMMING_PDL_PREFILL": "0"}, W4A16, HOPPER[:1]),
    ({"HUMMING_CLUSTER_SPLITS": "0"}, W4A16, HOPPER[:1]),
    ({"HUMMING_CLUSTER_SPLITS": "4"}, W4A16, HOPPER[:1]),
    ({"HUMMING_CLUSTER_SPLITS": "8"}, W4A16, HOPPER[:1]),
    ({"HUMMING_ACT_WIDEN": "0"}, W8, HOPPER + ("nvidia-a100", "nvidia-l40s", "nvidia-t4", "thead-zhenwu-810e")),
    ({"HUMMING_ACT_WIDEN": "1"}, W8, HOPPER[:1] + ("nvidia-a100", "nvidia-l40s", "nvidia-rtx-5090")),
    ({"HUMMING_WGMMA_W4A8_RS_RASTER": "0"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_RASTER": "3"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_PDL": "1"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_L2NEXT": "0"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_CLUSTER": "0"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_W4A8_RS_CLUSTER": "2"}, W4A8, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS_WS": "0"}, W4A16, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS_WS": "1"}, W4A16, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS_STREAMK": "0"}, W4A16, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS_SK_EARLY": "1"}, W4A16, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS_ROUNDS": "0"}, W4A16, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS_RASTER": "0"}, W4A16, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS_RASTER": "3"}, W4A16, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS_CLUSTER": "0"}, W4A16, HOPPER[:1]),
    ({"HUMMING_WGMMA_RS_CLUSTER": "2"}, W4A16, HOPPER[:1]),
    ({"HUMMING_STREAM_BULK": "1"}, W4A16, HOPPER[:1]),
    ({"HUMMING_TUNE": "0"}, W4A16, HOPPER[:1]),
    ({"HUMMING_UNVERIFIED_KERNELS": "1"}, None, UNVERIFIED),
    ({"HUMMING_WGMMA": "0", "HUMMING_WGMMA_WNA16": "0"}, None, HOPPER[:1]),
)


# The variant settings as the code has them now: each former switch (its name and value as recorded) becomes tuning
# knobs (humming.core.tuning.knobs), call options (humming.GemmOptions) or a deployment setting (the environment).
def _knob(name, value):
    return {"knobs": {name: value}}


TRANSLATION = {
    ("HUMMING_WGMMA", "0"): _knob("wgmma_8bit.enabled", False),
    ("HUMMING_WGMMA_WNA16", "0"): _knob("wgmma_wna16.enabled", False),
    ("HUMMING_WGMMA_RS", "0"): _knob("register_a.min_m", None),
    ("HUMMING_WGMMA_RS", "1"): {"knobs": {"register_a.min_m": 128, "register_a.any_group": True}},
    ("HUMMING_WGMMA_FAST_ACCUM", "1"): {"options": {"fast_accum": True}},
    ("HUMMING_W4A8_WIDEN", "prmt"): {"options": {"w4a8_widen": "prmt"}},
    ("HUMMING_WGMMA_W4A8_RS", "0"): _knob("register_a8.min_m", None),
    ("HUMMING_WGMMA_W4A8_RS_CHAIN", "128"): _knob("register_a8.chain", 128),
    ("HUMMING_WGMMA_W4A8_RS_CHAIN", "64"): _knob("register_a8.chain", 64),
    ("HUMMING_WGMMA_RS_STSM", "0"): _knob("register_a.stmatrix", False),
    ("HUMMING_WGMMA_WS", "0"): _knob("wgmma_8bit.w4a8_warp_specialised", False),
    ("HUMMING_WGMMA_W4A8_RS_WIDE_FROM", "128"): _knob("register_a8.wide_from", 128),
    ("HUMMING_WGMMA_W4A8_RS_STREAMK", "0"): _knob("register_a8.streamk", 0),
    ("HUMMING_WGMMA_W4A8_RS_STREAMK", "132"): _knob("register_a8.streamk", 132),
    ("HUMMING_WGMMA_W4A8_RS_PF", "3"): _knob("register_a8.narrow_prefetch", 3),
    ("HUMMING_WGMMA_W4A8_RS_DIRECT", "0"): _knob("register_a8.direct_int8", False),
    ("HUMMING_WGMMA_STAGGER", "0"): _knob("wgmma.stagger", False),
    ("HUMMING_WGMMA_RS_TMA", "0"): _knob("register_a.tma", False),
    ("HUMMING_WGMMA_RS_PF", "3"): _knob("register_a.prefetch", 3),
    ("HUMMING_WGMMA_W8A8_TMA", "0"): _knob("wgmma_8bit.w8a8_tma", False),
    ("HUMMING_WGMMA_W4A8_TMA", "1"): _knob("wgmma_8bit.w4a8_tma", True),
    ("HUMMING_WGMMA_W4A8_TMA", "0"): _knob("wgmma_8bit.w4a8_tma", False),
    ("HUMMING_WGMMA_W4A8_RS_WS", "0"): _knob("register_a8.producer", False),
    ("HUMMING_WGMMA_W4A8_RS_WIDENED", "1"): _knob("register_a8.widened_slots", 1),
    ("HUMMING_WGMMA_W4A8_RS_WIDENED", "2"): _knob("register_a8.widened_slots", 2),
    ("HUMMING_WGMMA_W4A8_RS_BT", "128"): _knob("register_a8.token_tile", 128),
    ("HUMMING_WGMMA_W4A8_RS_BT", "256"): _knob("register_a8.token_tile", 256),
    ("HUMMING_WGMMA_RS_FIT_TILE", "0"): _knob("wgmma.fit_token_tile", False),
    ("HUMMING_PDL", "0"): _knob("launch.pdl", False),
    ("HUMMING_PDL_PREFILL", "0"): _knob("launch.pdl_prefill", False),
    ("HUMMING_CLUSTER_SPLITS", "0"): _knob("launch.cluster_splits", 0),
    ("HUMMING_CLUSTER_SPLITS", "4"): _knob("launch.cluster_splits", 4),
    ("HUMMING_CLUSTER_SPLITS", "8"): _knob("launch.cluster_splits", 8),
    ("HUMMING_ACT_WIDEN", "0"): {"options": {"act_widen": False}},
    ("HUMMING_ACT_WIDEN", "1"): {"options": {"act_widen": True}},
    ("HUMMING_WGMMA_W4A8_RS_RASTER", "0"): _knob("register_a8.raster", 0),
    ("HUMMING_WGMMA_W4A8_RS_RASTER", "3"): _knob("register_a8.raster", 3),
    ("HUMMING_WGMMA_W4A8_RS_PDL", "1"): _knob("register_a8.pdl", True),
    ("HUMMING_WGMMA_W4A8_RS_L2NEXT", "0"): _knob("register_a8.l2next", False),
    ("HUMMING_WGMMA_W4A8_RS_CLUSTER", "0"): _knob("register_a8.cluster", 0),
    ("HUMMING_WGMMA_W4A8_RS_CLUSTER", "2"): _knob("register_a8.cluster", 2),
    ("HUMMING_WGMMA_RS_WS", "0"): _knob("register_a.producer", False),
    ("HUMMING_WGMMA_RS_WS", "1"): _knob("register_a.producer", True),
    ("HUMMING_WGMMA_RS_STREAMK", "0"): _knob("register_a.streamk", False),
    ("HUMMING_WGMMA_RS_SK_EARLY", "1"): _knob("register_a.early_ring", True),
    ("HUMMING_WGMMA_RS_ROUNDS", "0"): _knob("register_a.rounds_rules", False),
    ("HUMMING_WGMMA_RS_RASTER", "0"): _knob("register_a.raster", 0),
    ("HUMMING_WGMMA_RS_RASTER", "3"): _knob("register_a.raster", 3),
    ("HUMMING_WGMMA_RS_CLUSTER", "0"): _knob("register_a.cluster", 0),
    ("HUMMING_WGMMA_RS_CLUSTER", "2"): _knob("register_a.cluster", 2),
    ("HUMMING_STREAM_BULK", "1"): _knob("mma_wna16.stream_bulk", True),
    ("HUMMING_TUNE", "0"): {"env": {"HUMMING_TUNE": "0"}},
    ("HUMMING_UNVERIFIED_KERNELS", "1"): {"env": {"HUMMING_UNVERIFIED_KERNELS": "1"}},
}


def translated(setting: dict) -> dict:
    """A recorded variant setting as {"knobs": ..., "options": ..., "env": ...} of the code under test."""
    out = {"knobs": {}, "options": {}, "env": {}}
    for item in setting.items():
        for kind, values in TRANSLATION[item].items():
            out[kind].update(values)
    return out


_active = {"options": None}


@contextlib.contextmanager
def _apply(setting: dict):
    from humming.core.tuning import knobs

    parts = translated({a: b for a, b in setting.items() if a != "__knobs__"})
    parts["knobs"].update(setting.get("__knobs__", {}))
    os.environ.update(parts["env"])
    _active["options"] = parts["options"] or None
    try:
        with knobs.override(parts["knobs"]):
            yield
    finally:
        _active["options"] = None


VARIANT_APPLY = _apply  # how a variant setting reaches the code being recorded


def _schemes() -> tuple[str, ...]:
    from humming import schemes

    return tuple(schemes.names())


def _act_schemes() -> tuple[str, ...]:
    from humming import schemes

    return tuple(name for name in schemes.names() if schemes.get(name).act)


def _profiles() -> tuple[str, ...]:
    from humming.capabilities import list_profiles

    return tuple(p.name for p in list_profiles())


def cases():
    """Every case: (key, kind, fields). kind "plan": humming.plan(scheme, m, n, k, profile, act) under a variant
    setting; kind "cand": the tuner's candidate plans of one (profile, scheme, M, shape)."""
    schemes = _schemes()
    for profile in _profiles():
        if profile == "nvidia-h200":
            ms, shapes, acts = MS_FULL, SHAPES_FULL, ("f16", "bf16")
        elif profile in HOPPER:
            ms, shapes, acts = MS_SHORT, SHAPES_SHORT, ("f16",)
        else:
            ms, shapes, acts = MS_FEW, SHAPES_FEW, ("f16", "bf16")
        for scheme, m, (n, k), act in itertools.product(schemes, ms, shapes, acts):
            yield _plan_case(profile, scheme, m, n, k, act, None, {})
    for profile in ("nvidia-h200", "nvidia-a100", "nvidia-t4"):  # other group sizes on one scheme
        for group, m, (n, k) in itertools.product((32, 64, 256, 512, -1), MS_FEW, SHAPES_FEW):
            for scheme in ("w4a16", "w4a16-zp", "w4a8-fp8"):
                yield _plan_case(profile, scheme, m, n, k, "f16", group, {})
    for setting, names, profiles in VARIANTS:
        for profile in profiles:
            shapes = SHAPES_SHORT if profile == "nvidia-h200" else SHAPES_FEW
            for scheme, m, (n, k) in itertools.product(names or schemes, MS_SHORT, shapes):
                yield _plan_case(profile, scheme, m, n, k, "f16", None, setting)
    for profile in ("nvidia-h200", "nvidia-h20", "nvidia-a100"):
        for scheme, m, (n, k) in itertools.product(("w4a16", "w8a16"), (1, 8, 16, 64, 128, 512, 1024),
                                                    ((8192, 8192), (4096, 14336))):
            yield f"cand|{profile}|{scheme}|f16|{m}|{n}x{k}", "cand", (profile, scheme, m, n, k, "f16")
    yield from moe_cases(schemes)
    for profile in ("nvidia-h200", "nvidia-a100", "nvidia-t4", "nvidia-rtx-5090", "nvidia-b300", "thead-zhenwu-810e"):
        for scheme, dtype, k in itertools.product(_act_schemes(), ("f16", "bf16", "f32"), (64, 2048, 4096, 14336)):
            for wide in ("", "f16", "bf16"):
                yield f"aq|{profile}|{scheme}|{dtype}|{k}|{wide}", "aq", (profile, scheme, dtype, k, wide)


# Mixture-of-experts GEMMs: (experts, top-k, [(N, K) of the gate+up and the down GEMM]) of the models the MoE
# benchmark runs, tensor-parallel shards (TP8) included
MOE_MODELS = {"deepseek-v3": (256, 8, ((4096, 7168), (7168, 2048), (512, 7168), (7168, 256))),
              "qwen3-30b-a3b": (128, 8, ((1536, 2048), (2048, 768), (192, 2048), (2048, 96))),
              "mixtral-8x7b": (8, 2, ((28672, 4096), (4096, 14336))),
              "gpt-oss-120b": (128, 4, ((5760, 2880), (2880, 2880)))}
MOE_TOKENS_FULL = (1, 8, 33, 64, 128, 512, 2048, 8192, 16384)
MOE_TOKENS_FEW = (1, 64, 512, 8192)
MOE_PROFILES = HOPPER + ("nvidia-a100", "nvidia-l40s", "nvidia-t4", "nvidia-rtx-5090", "nvidia-b200",
                         "thead-zhenwu-810e")
F16_ONLY = ("nvidia-t4",)  # no bf16 tensor cores: its MoE cases run f16 activations
MOE_KNOBS = ({"moe.wgmma_8bit_min_rows": 1}, {"moe.w4a8_min_rows": 1}, {"moe.mma_8bit_min_rows": None},
             {"moe.wgmma_min_rows": None}, {"register_a.any_group": True})


def moe_cases(schemes):
    """The MoE plans ``humming.core.registry.select`` makes: every scheme and profile on the model shapes (every form
    and more token counts on the H200), act-order experts, and the MoE knobs that are off by default switched on."""
    for profile in MOE_PROFILES:
        full = profile == "nvidia-h200"
        forms = ("indexed", "grouped", "masked") if full else ("indexed",)
        tokens = MOE_TOKENS_FULL if full else MOE_TOKENS_FEW
        for model, (experts, top_k, shapes) in MOE_MODELS.items():
            for scheme, t, (n, k), form in itertools.product(schemes, tokens, shapes, forms):
                yield _moe_case(profile, model, scheme, t, n, k, experts, top_k, form, False, {})
            if full:
                for scheme, t, (n, k) in itertools.product(("w4a16", "w8a16", "w4a8-fp8", "w4a8-int8"), tokens, shapes):
                    yield _moe_case(profile, model, scheme, t, n, k, experts, top_k, "indexed", True, {})
                for knob, scheme, t, (n, k) in itertools.product(MOE_KNOBS, schemes, MOE_TOKENS_FEW, shapes):
                    yield _moe_case(profile, model, scheme, t, n, k, experts, top_k, "indexed", False, knob)


def _moe_case(profile, model, scheme, tokens, n, k, experts, top_k, form, act_order, knob):
    extra = ",".join(f"{a}={b}" for a, b in sorted(knob.items()))
    act = "f16" if profile in F16_ONLY else "bf16"
    key = f"moe|{profile}|{model}|{scheme}|{act}|{form}|{tokens}|{n}x{k}|{'act-order' if act_order else ''}|{extra}"
    return key, "moe", (profile, scheme, tokens, n, k, experts, top_k, form, act_order, act, {"__knobs__": knob})


def _plan_case(profile, scheme, m, n, k, act, group, setting):
    env = ",".join(f"{a}={b}" for a, b in sorted(setting.items()))
    key = f"plan|{profile}|{scheme}|{act}|{m}|{n}x{k}|g{group}|{env}"
    return key, "plan", (profile, scheme, m, n, k, act, group, setting)


@contextlib.contextmanager
def clean_environment(setting: dict):
    """No HUMMING_* variable of the caller's, no user tuning file, in-process decisions forgotten; then the
    variant setting."""
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for name in [v for v in os.environ if v.startswith("HUMMING_")]:
                del os.environ[name]
            os.environ["HUMMING_TUNE_FILE"] = str(Path(tmp) / "none.json")
            os.environ["HUMMING_CACHE_DIR"] = str(Path(tmp) / "kernels")
            with VARIANT_APPLY(setting):
                _forget()
                yield
        finally:
            os.environ.clear()
            os.environ.update(saved)
            _forget()


def _forget() -> None:
    """Drop what the code remembers between calls that depends on the environment."""
    from humming.core.routes import widened_ranges as act_widen
    from humming.core.tuning import entries as tuning

    act_widen._decided.clear()
    tuning.clear_memory()


# ---------------------------------------------------------------------------------------------- captured plans
# Plans the compile tests build themselves (forced tiles, splits, token tiles, clusters ...), captured while the CPU
# suite ran (python tests/golden/golden.py --capture) as plain data: each dataclass as {"__class__": name, field:
# value}, each tuple as {"__tuple__": [...]}. Replaying one rebuilds the plan from the classes of the code under test
# (CLASSES) and generates its source again.
def dump(value):
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"__class__": type(value).__name__,
                **{f.name: dump(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, tuple):
        return {"__tuple__": [dump(v) for v in value]}
    if isinstance(value, list):
        return [dump(v) for v in value]
    if isinstance(value, dict):
        return {k: dump(v) for k, v in value.items()}
    return value


def classes() -> dict:
    """The dataclasses a captured plan may hold, by name (the code under test's)."""
    import dataclasses
    import importlib
    import pkgutil

    import humming

    out = {}
    for info in pkgutil.walk_packages(humming.__path__, "humming."):
        if ".cli" in info.name or info.name.endswith("__main__"):
            continue
        try:
            mod = importlib.import_module(info.name)
        except Exception:  # noqa: BLE001 - optional modules
            continue
        for name, obj in vars(mod).items():
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == mod.__name__:
                out.setdefault(name, obj)
    return out


def load_value(value, table: dict):
    if isinstance(value, dict):
        if "__tuple__" in value:
            return tuple(load_value(v, table) for v in value["__tuple__"])
        if "__class__" in value:
            if value["__class__"] == "TileConfig" and "TileConfig" not in table:  # recorded when every family shared
                return _SharedTiles({k: v for k, v in value.items() if k != "__class__"})  # one tiles class
            cls = table[value["__class__"]]
            import dataclasses

            kwargs = {k: load_value(v, table) for k, v in value.items() if k != "__class__"}
            init = {f.name for f in dataclasses.fields(cls) if f.init}
            obj = cls(**{k: v for k, v in kwargs.items() if k in init})
            for k, v in kwargs.items():
                if k not in init:
                    object.__setattr__(obj, k, v)
            return obj
        return {k: load_value(v, table) for k, v in value.items()}
    if isinstance(value, list):
        return [load_value(v, table) for v in value]
    return value


class _SharedTiles(dict):
    """The fields of a captured plan's tiles of the one class all families once shared; the plan's family gives them
    their class (Family.tiles) once the plan is built."""


def _family_tiles(p):
    import dataclasses

    from humming.core.registry import family_of

    if isinstance(p.tiles, _SharedTiles):
        return dataclasses.replace(p, tiles=family_of(p).tiles.from_fields(p.tiles))
    return p


def replay_captured(captured: list, tables: dict) -> dict:
    """The record of each captured plan's kernel as the code under test generates it."""
    table = classes()
    out = {}
    for i, item in enumerate(captured):
        key = f"captured|{item['profile']}|{item['kernel']}|{i}"
        try:
            p = _family_tiles(load_value(item["plan"], table))
            out[key] = _record_plan(p, item["profile"], tables)
        except Exception as exc:  # noqa: BLE001
            out[key] = _error(exc, tables)
    return out


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def code_of(source: str) -> str:
    """The source without its comments and blank lines: what the compiler sees."""
    lines = (ln.rstrip() for ln in _COMMENT.sub("", source).splitlines())
    return "\n".join(ln for ln in lines if ln)


def _sha(text: str) -> str:
    """The source's hash and its code's (comments left out), as "source:code"."""
    def h(t: str) -> str:
        return hashlib.sha256(t.encode()).hexdigest()[:16]

    return f"{h(text)}:{h(code_of(text))}"


def _record_plan(p, profile, sources: dict) -> dict:
    from humming import api

    src = api.source(p, profile)
    name = p.kernel_name
    sha = _sha(src)
    # one kernel name on one profile has one body; its first comment line names the plan's M, N and K
    shas = sources.setdefault(f"{profile}|{name}", [])
    if sha not in shas:
        shas.append(sha)
    return {"kernel": name, "source": shas.index(sha), "grid": list(p.grid), "threads": p.threads, "smem": p.smem_bytes,
            "workspace": p.workspace_floats, "cluster": list(p.cluster_dims or ()), "pdl": bool(p.pdl),
            "path": p.path, "family": p.family, "splits": p.splits, "reasons": _intern(sources, p.reasons)}


def _intern(tables: dict, words) -> int:
    """The index of a tuple of reasons (or one message) in the record's table of wordings (shared by every case)."""
    table = tables.setdefault("#words", {})
    return table.setdefault(json.dumps(words), len(table))


def _error(exc: BaseException, tables: dict) -> dict:
    return {"error": type(exc).__name__, "message": _intern(tables, [str(exc)])}


def run_case(kind: str, fields: tuple, sources: dict):
    from humming import api

    if kind == "plan":
        profile, scheme, m, n, k, act, group, _setting = fields
        try:
            p = api.plan(scheme, m, n, k, profile=profile, act=act, group_size=group, options=_active["options"])
            return _record_plan(p, profile, sources)
        except Exception as exc:  # noqa: BLE001 - every answer is recorded, errors included
            return _error(exc, sources)
    if kind == "aq":
        return _record_actquant(fields, sources)
    if kind == "moe":
        return _record_moe(fields, sources)
    profile, scheme, m, n, k, act = fields
    from humming import schemes as _schemes_mod
    from humming.capabilities import get_profile
    from humming.core.families.mma_wna16.candidates import candidates
    from humming.core.families.mma_wna16.layout import layout_for

    caps = get_profile(profile)
    try:
        layout = layout_for(_schemes_mod.get(scheme), n, k, act, caps=caps)
        plans = candidates(caps, layout, m, act, scheme)
    except Exception as exc:  # noqa: BLE001
        return _error(exc, sources)
    out = {}
    for p in plans:
        tiles = ",".join(f"{a}={b}" for a, b in sorted(vars(p.tiles).items()) if b)
        out[f"{p.path}|{tiles}|s{p.splits}"] = _record_plan(p, profile, sources)
    return out


def _record_moe(fields: tuple, sources: dict):
    """The plan of one MoE GEMM: T tokens, each to top-k of E stacked [N, K] experts, in the given form."""
    from humming.capabilities import get_profile
    from humming.core.problem import Problem, scheme_of
    from humming.core.registry import select
    from humming.options import resolve as resolve_options

    profile, scheme, tokens, n, k, experts, top_k, form, act_order, act, _setting = fields
    try:
        problem = Problem(scheme_of(scheme), tokens, n, k, act, resolve_options(None), form=form, experts=experts,
                          top_k=top_k, act_order=act_order)
        return _record_plan(select(problem, get_profile(profile)).plan, profile, sources)
    except Exception as exc:  # noqa: BLE001 - every answer is recorded, errors included
        return _error(exc, sources)


def _record_actquant(fields: tuple, tables: dict):
    """The activation-quantization kernel of a scheme's activations (``wide``: codes as exact 16-bit values)."""
    from humming import schemes as _schemes_mod
    from humming.actquant import activation_quant_source, plan_activation_quant
    from humming.core.actquant.generator import plan_actquant

    profile, scheme, dtype, k, wide = fields
    try:
        if wide:
            p = plan_actquant(_schemes_mod.get(scheme), dtype, k, wide=wide)
        else:
            p = plan_activation_quant(scheme, dtype, k, profile=profile)
        src = activation_quant_source(p, profile)
    except Exception as exc:  # noqa: BLE001
        return _error(exc, tables)
    shas = tables.setdefault(f"{profile}|{p.kernel_name}", [])
    sha = _sha(src)
    if sha not in shas:
        shas.append(sha)
    return {"kernel": p.kernel_name, "source": shas.index(sha), "threads": p.threads, "layout": p.layout,
            "vec": p.vec, "reasons": _intern(tables, p.reasons)}


def record_all(progress: bool = False) -> dict:
    sources: dict[str, str] = {}
    records: dict[str, object] = {}
    by_setting: dict[str, list] = {}
    for key, kind, fields in cases():
        setting = fields[-1] if kind in ("plan", "moe") else {}
        by_setting.setdefault(json.dumps(setting, sort_keys=True), []).append((key, kind, fields))
    for setting, group in by_setting.items():
        with clean_environment(json.loads(setting)):
            for key, kind, fields in group:
                records[key] = run_case(kind, fields, sources)
        if progress:
            print(f"{len(records)} cases ({setting})", file=sys.stderr)
    captured = _captured()
    with clean_environment({}):
        records.update(replay_captured(captured, sources))
    words = sources.pop("#words", {})
    return {"format": 1, "cases": records, "sources": sources,
            "words": [json.loads(w) for w, _ in sorted(words.items(), key=lambda item: item[1])]}


CAPTURED = Path(__file__).resolve().parent / "captured.json.gz"


def _captured() -> list:
    if not CAPTURED.exists():
        return []
    with gzip.open(CAPTURED, "rt") as f:
        return json.load(f)


def load() -> dict:
    with gzip.open(GOLDEN, "rt") as f:
        return json.load(f)


def write(data: dict) -> None:
    raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    with gzip.GzipFile(GOLDEN, "wb", mtime=0) as f:
        f.write(raw)


def _resolved(rec, words: list, keep_words: bool = True):
    """A record with its wording (reasons, error messages) looked up, or left out (``keep_words`` False: what
    --write-wording may change)."""
    if not isinstance(rec, dict):
        return rec
    if "error" in rec:
        return {"error": rec["error"], **({"message": words[rec["message"]]} if keep_words else {})}
    if "kernel" in rec:  # (the source index depends on which sources differ only in comments: compared by hash)
        return {**rec, "reasons": words[rec["reasons"]]} if keep_words else {
            a: b for a, b in rec.items() if a not in ("reasons", "source")}
    return {a: _resolved(b, words, keep_words) for a, b in rec.items()}


def differences(old: dict, new: dict, words: bool = True, limit: int = 20) -> list[str]:
    out = []
    for key in sorted(set(old["cases"]) | set(new["cases"])):
        a = _resolved(old["cases"].get(key), old["words"], words)
        b = _resolved(new["cases"].get(key), new["words"], words)
        if a != b:
            out.append(f"{key}:\n  golden: {json.dumps(a)[:600]}\n  now:    {json.dumps(b)[:600]}")
            if len(out) >= limit:
                break
    if len(out) < limit:
        def shas(table: dict, name: str):
            found = table.get(name)
            return found if words or found is None else [s.split(":")[1] for s in found]

        for name in sorted(set(old["sources"]) | set(new["sources"])):
            if shas(old["sources"], name) != shas(new["sources"], name):
                out.append(f"source of {name}: golden {old['sources'].get(name)}, now {new['sources'].get(name)}")
                if len(out) >= limit:
                    break
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true")
    g.add_argument("--check", action="store_true")
    g.add_argument("--write-wording", action="store_true")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    new = record_all(progress=True)
    if args.write:
        write(new)
        print(f"wrote {len(new['cases'])} cases, {len(new['sources'])} kernels to {GOLDEN}")
        return 0
    old = load()
    if args.write_wording:
        diff = differences(old, new, words=False)
        if diff:
            print("not only wording differs:\n" + "\n".join(diff))
            return 1
        write(new)
        print(f"rewrote the wording of {GOLDEN}")
        return 0
    diff = differences(old, new)
    print("\n".join(diff) if diff else f"{len(new['cases'])} cases, {len(new['sources'])} kernels: as recorded")
    return 1 if diff else 0


if __name__ == "__main__":
    raise SystemExit(main())
