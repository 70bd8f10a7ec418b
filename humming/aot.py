"""Ahead-of-time builds: compile the kernels a model's layers will need before the first request arrives.

    shapes = model_shapes(json.load(open("config.json")))          # [(name, N, K), ...] of a Llama-like decoder
    report = build_kernels([(n, k) for _, n, k in shapes], "w4a16", profile="nvidia-h200")
    experts = moe_shapes(config)                                   # [(name, N, K, E, top_k), ...] of an MoE decoder
    report = build_kernels(..., moe=[(n, k, e, top_k) for _, n, k, e, top_k in experts])

Which kernels: for every layer shape and every M of the chosen M buckets (``humming.core.tuning.entries.buckets()``;
the open bucket above 1024 is sampled), the plan the runtime will make (``humming.core.registry.select``); distinct kernels are compiled once, in parallel threads (NVRTC releases the
GIL), through the disk cache, so the runtime and a second build find them all there.
Works without a GPU: kernels are compiled for the profile's target. (What a layer's first call compiles in the
background: humming.core.runtime.precompile.)
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

from humming.errors import HummingError, ShapeError, UnsupportedOnDevice


# ------------------------------------------------------------------------------------------------ model shapes
def _text_config(config: dict) -> dict:
    for key in ("text_config", "llm_config", "language_config"):
        if "hidden_size" not in config and isinstance(config.get(key), dict):
            return config[key]
    return config


def model_shapes(config: dict, fused: bool = False) -> list[tuple[str, int, int]]:
    """(name, N, K) of the linear layers of a Llama-like decoder layer from a HuggingFace config.json dict:
    q/k/v/o projections from hidden_size, num_attention_heads, num_key_value_heads, head_dim and gate/up/down
    from intermediate_size. ``fused``: qkv and gate_up as one GEMM each (how vLLM runs them)."""
    cfg = _text_config(config)
    try:
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
    except (KeyError, TypeError, ValueError):
        raise ShapeError("the model config needs integer hidden_size and num_attention_heads "
                         "(a Llama-like HuggingFace config.json)") from None
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    inter = cfg.get("intermediate_size")
    if moe_shapes(config) and not _dense_mlp_layers(cfg):
        inter = None  # every MLP is a mixture of experts (its intermediate_size is the experts')
    q, kv = heads * head_dim, kv_heads * head_dim
    shapes: list[tuple[str, int, int]]
    if fused:
        shapes = [("qkv_proj", q + 2 * kv, hidden), ("o_proj", hidden, q)]
    else:
        shapes = [("q_proj", q, hidden), ("k_proj", kv, hidden), ("v_proj", kv, hidden), ("o_proj", hidden, q)]
    if inter:
        inter = int(inter)
        if fused:
            shapes += [("gate_up_proj", 2 * inter, hidden), ("down_proj", hidden, inter)]
        else:
            shapes += [("gate_proj", inter, hidden), ("up_proj", inter, hidden), ("down_proj", hidden, inter)]
    return shapes


# (experts, experts per token, intermediate size of one expert): the config keys of the MoE decoders, first found wins
_MOE_KEYS = (("num_experts", "n_routed_experts", "num_local_experts"),
             ("num_experts_per_tok", "experts_per_token"),
             ("moe_intermediate_size", "intermediate_size"))


def _first(cfg: dict, keys: tuple[str, ...]):
    return next((cfg[key] for key in keys if cfg.get(key)), None)


def _dense_mlp_layers(cfg: dict) -> bool:
    """Whether an MoE decoder also has dense MLP layers (DeepSeek's first_k_dense_replace, Qwen3-MoE's
    mlp_only_layers), whose size is intermediate_size."""
    return bool(cfg.get("first_k_dense_replace") or cfg.get("mlp_only_layers")) and bool(cfg.get("moe_intermediate_size"))


def moe_shapes(config: dict) -> list[tuple[str, int, int, int, int]]:
    """(name, N, K, experts, top_k) of the expert GEMMs of an MoE decoder's HuggingFace config.json (Qwen3-MoE,
    Mixtral, DeepSeek-V3, gpt-oss): gate+up as one GEMM [2I, H] and down [H, I] per expert; [] for a dense model."""
    cfg = _text_config(config)
    experts, top_k, inter = (_first(cfg, keys) for keys in _MOE_KEYS)
    if not experts or not top_k:
        return []
    try:
        hidden, experts, top_k, inter = int(cfg["hidden_size"]), int(experts), int(top_k), int(inter)
    except (KeyError, TypeError, ValueError):
        raise ShapeError("the MoE config needs integer hidden_size, a number of experts, experts per token and an "
                         "intermediate size (moe_intermediate_size or intermediate_size)") from None
    return [("experts.gate_up_proj", 2 * inter, hidden, experts, top_k),
            ("experts.down_proj", hidden, inter, experts, top_k)]


def unique_shapes(named: Iterable[tuple[str, int, int]]) -> list[tuple[tuple[int, int], list[str]]]:
    """((N, K), [layer names]) in first-seen order."""
    out: dict[tuple[int, int], list[str]] = {}
    for name, n, k in named:
        out.setdefault((n, k), []).append(name)
    return list(out.items())


# ------------------------------------------------------------------------------------------------ plans
def ms_for(ms: Iterable[int] | None = None, exact: bool = False) -> list[int]:
    """The M values to plan: every M of the buckets holding ``ms`` (all buckets when None), or ``ms`` as given."""
    from humming.core.tuning import entries as tuning

    if exact and ms is not None:
        return sorted(set(int(m) for m in ms))
    chosen = tuning.buckets() if ms is None else sorted({tuning.bucket_of(int(m)) for m in ms}, key=lambda b: b.lo)
    return [m for b in chosen for m in b.ms()]


def kernel_plans(caps, shapes: Iterable[tuple[int, int]], scheme, ms: Iterable[int], act: str = "f16") -> dict:
    """{kernel name: a plan that uses it} over every shape and M: what the runtime would compile (the registry's
    choice for each M). Raises ShapeError for a shape the scheme's layout rejects."""
    from humming.core.families.mma_wna16.layout import layout_for
    from humming.core.problem import dense_problem
    from humming.core.registry import select

    plans: dict = {}
    ms = list(ms)
    for n, k in shapes:
        first = dense_problem(scheme, 1, n, k, act)  # (N and K padded to whole atoms where they are not)
        layout_for(scheme, first.n, first.k, act, caps=caps)  # (a ShapeError names the shape)
        for m in ms:
            p = select(dense_problem(scheme, m, n, k, act), caps).plan
            plans.setdefault(p.kernel_name, p)
    return plans


def moe_kernel_plans(caps, shapes: Iterable[tuple[int, int, int, int]], scheme, tokens: Iterable[int],
                     act: str = "f16") -> dict:
    """{kernel name: a plan that uses it} of indexed MoE GEMMs (N, K, experts, top_k) at each token count: what
    humming.moe_gemm and QuantMoE would compile. Raises ShapeError for a shape the MoE kernels reject."""
    from humming.core.problem import Problem
    from humming.core.registry import select

    plans: dict = {}
    tokens = list(tokens)
    for n, k, experts, top_k in shapes:
        for t in tokens:
            p = select(Problem(scheme, t, n, k, act, form="indexed", experts=experts, top_k=top_k), caps).plan
            plans.setdefault(p.kernel_name, p)
    return plans


# ------------------------------------------------------------------------------------------------ build
@dataclass
class BuildReport:
    profile: str
    arch: str
    shapes: list[tuple[int, int]]
    kernels: int = 0
    compiled: int = 0
    cache_hits: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (kernel or shape, why)
    skipped_shapes: list[tuple[tuple[int, int], str]] = field(default_factory=list)
    seconds: float = 0.0
    compile_seconds: float = 0.0  # NVRTC time summed over the kernels compiled now
    names: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.skipped_shapes


def build_kernels(shapes: Iterable[tuple[int, int]], scheme="w4a16", profile=None, ms: Iterable[int] | None = None,
                  *, act: str = "f16", exact: bool = False, jobs: int | None = None,
                  progress: Callable[[int, int, str, bool], None] | None = None,
                  moe: Iterable[tuple[int, int, int, int]] = ()) -> BuildReport:
    """Compile every distinct kernel of ``shapes`` x M buckets, and of the MoE GEMMs ``moe`` ((N, K, experts, top_k))
    x the same buckets of tokens, for a profile (default: this device's) through the kernel cache.
    ``progress(done, total, kernel_name, cache_hit)`` is called after each kernel."""
    from humming.core.compile.nvrtc import select_toolchain
    from humming.core.problem import scheme_of
    from humming.core.runtime.compiled import compile_plan, is_compiled
    from humming.devices import get_backend
    from humming.devices.current import live_arch, resolve_profile

    t_start = time.perf_counter()
    explicit = profile is not None
    try:
        caps = resolve_profile(profile)
    except UnsupportedOnDevice as exc:
        raise UnsupportedOnDevice(f"{exc}; or name the target with --profile NAME") from None
    sch = scheme_of(scheme)
    if getattr(sch, "act", None):
        raise UnsupportedOnDevice(f"{sch.name} quantizes activations; only WnA16 kernels can be built ahead of time yet")
    live = None if explicit else live_arch()
    run_arch = live if live and live != caps.target.arch else None  # what a layer does for a forced profile
    route = get_backend(caps).compile_route(caps)
    arch = run_arch or route.arch
    if route.compiler == "nvrtc" or run_arch:
        select_toolchain(arch, None if run_arch else route.min_nvrtc)  # fail early, naming what to install
    shapes = list(dict.fromkeys((int(n), int(k)) for n, k in shapes))
    report = BuildReport(caps.name, arch, shapes)
    m_values = ms_for(ms, exact)
    plans: dict = {}
    for n, k in shapes:
        try:
            found = kernel_plans(caps, [(n, k)], sch, m_values, act)
        except ShapeError as exc:
            report.skipped_shapes.append(((n, k), str(exc)))
            continue
        for name, p in found.items():
            plans.setdefault(name, p)
    for n, k, experts, top_k in dict.fromkeys(tuple(int(v) for v in shape) for shape in moe):
        report.shapes.append((n, k))
        try:
            found = moe_kernel_plans(caps, [(n, k, experts, top_k)], sch, m_values, act)
        except ShapeError as exc:
            report.skipped_shapes.append(((n, k), f"MoE {experts} experts top-{top_k}: {exc}"))
            continue
        for name, p in found.items():
            plans.setdefault(name, p)
    report.kernels = len(plans)
    report.names = sorted(plans)

    def one(p):
        if is_compiled(caps, p, run_arch):  # compiled earlier in this process
            return p, True, 0.0
        _, module = compile_plan(p, caps, run_arch)
        if module is None:  # vendor compiler route: no NVRTC module to ask
            return p, False, 0.0
        return p, module.cache_hit, module.compile_seconds

    done = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs or min(16, os.cpu_count() or 1))) as pool:
        futures = {pool.submit(one, p): p for p in plans.values()}
        for fut in as_completed(futures):
            done += 1
            name, hit = futures[fut].kernel_name, False
            try:
                _, hit, seconds = fut.result()
            except HummingError as exc:
                report.failed.append((name, f"{type(exc).__name__}: {exc}"))
            else:
                report.cache_hits += int(hit)
                report.compiled += int(not hit)
                report.compile_seconds += seconds
            if progress is not None:
                progress(done, len(futures), name, hit)
    report.seconds = time.perf_counter() - t_start
    return report


__all__ = ["BuildReport", "build_kernels", "kernel_plans", "model_shapes", "moe_kernel_plans", "moe_shapes", "ms_for",
           "unique_shapes"]
