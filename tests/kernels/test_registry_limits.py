"""CPU: the registry honours the limits a profile declares: a family whose plan needs more threads per block or
shared memory than the profile allows, or that cannot plan on it, hands the problem on, and the chosen plan says
why; 64-thread warps are refused by name; thread-block clusters stay within max_cluster_size (none where the profile
declares no clusters); a compiled kernel using more registers per thread than the profile declares is refused."""
from __future__ import annotations

import dataclasses

import pytest

from humming.capabilities import get_profile
from humming.core.problem import Problem, scheme_of
from humming.core.registry import cluster_size, limit_refusal, select
from humming.errors import UnsupportedOnDevice


def with_limits(name: str, **limits):
    caps = get_profile(name)
    return dataclasses.replace(caps, limits=dataclasses.replace(caps.limits, **limits))


@pytest.mark.parametrize("scheme", ["w4a16", "w8a16", "w4a8-fp8", "w8a8-int8"])
def test_threads_per_block_is_law(scheme):
    caps = with_limits("nvidia-h200", max_threads_per_block=256)
    for m in (1, 16, 128, 1024, 4096):
        sel = select(Problem(scheme_of(scheme), m, 8192, 8192, "f16"), caps)
        assert sel.plan.threads <= 256, (scheme, m, sel.plan.kernel_name)
        assert not limit_refusal(sel.plan, caps)
    big = select(Problem(scheme_of("w4a16"), 4096, 8192, 8192, "f16"), caps).plan
    assert any("allows 256 (max_threads_per_block)" in r for r in big.reasons)


def test_small_shared_memory_falls_back():
    caps = with_limits("nvidia-h200", smem_per_block_kb=100)
    for m in (1, 64, 1024):
        plan = select(Problem(scheme_of("w4a16"), m, 8192, 8192, "f16"), caps).plan
        assert plan.smem_bytes <= 100 * 1024, (m, plan.kernel_name)


def test_other_warp_sizes_are_refused():
    caps = with_limits("nvidia-h200", warp_size=64)
    with pytest.raises(UnsupportedOnDevice, match="32-thread warps"):
        select(Problem(scheme_of("w4a16"), 16, 4096, 4096, "f16"), caps)


# ---- thread-block clusters: at most max_cluster_size blocks, none where the profile declares no clusters ----------
def _cluster_plans(caps):
    """(scheme, m, plan) chosen for a few problems whose default plans on the H200 launch clusters."""
    for scheme, m, n, k in (("w4a16", 1, 8192, 8192), ("w4a16", 4, 4096, 14336), ("w4a16", 1024, 8192, 8192),
                            ("w4a8-fp8", 1, 8192, 8192), ("w8a8-int8", 4, 4096, 14336)):
        yield scheme, m, select(Problem(scheme_of(scheme), m, n, k, "f16"), caps).plan


def test_the_h200_plans_use_clusters_within_its_limit():
    caps = get_profile("nvidia-h200")
    assert caps.limits.max_cluster_size == 8  # declared by the Hopper family: the portable most
    sizes = {cluster_size(p) for _, _, p in _cluster_plans(caps)}
    assert sizes == {2} and all(not limit_refusal(p, caps) for _, _, p in _cluster_plans(caps))


def test_max_cluster_size_one_gives_plans_without_clusters():
    caps = with_limits("nvidia-h200", max_cluster_size=1)
    for scheme, m, plan in _cluster_plans(caps):
        assert cluster_size(plan) == 1 and plan.cluster_dims is None, (scheme, m, plan.kernel_name)


def test_limit_refusal_names_the_cluster_limit():
    clustered = next(p for _, _, p in _cluster_plans(get_profile("nvidia-h200")))
    assert "allows 1 (max_cluster_size)" in limit_refusal(clustered, with_limits("nvidia-h200", max_cluster_size=1))
    caps = get_profile("nvidia-h200")
    no_clusters = dataclasses.replace(caps, memory=dataclasses.replace(caps.memory, cluster_dsmem=False,
                                                                       cluster_multicast=False))
    assert "declares no clusters" in limit_refusal(clustered, no_clusters)
    for scheme, m, plan in _cluster_plans(no_clusters):  # the planners choose cluster-free forms
        assert plan.cluster_dims is None and not limit_refusal(plan, no_clusters), (scheme, m)


def test_an_explicit_cluster_beyond_the_limit_is_a_named_error():
    from humming.core.families.register_a.planner import cluster_refusal

    caps = with_limits("nvidia-h200", max_cluster_size=2)
    assert "declares max_cluster_size 2" in cluster_refusal(caps, 8192, 8, True, 4)
    assert cluster_refusal(caps, 8192, 8, True, 2) == ""


# ---- registers per thread: the compiled kernel's count against the profile's declaration ---------------------------
LOW_REGS = """\
name: acme-a100-lowregs-{limit}
extends: nvidia-a100
match: {{names: ["ACME A100 low registers {limit}"]}}
limits: {{registers_per_thread: {limit}}}
"""


def _derived_a100(tmp_path, limit: int):
    from humming.capabilities import Registry

    (tmp_path / f"lowregs{limit}.yaml").write_text(LOW_REGS.format(limit=limit), encoding="utf-8")
    return Registry(extra_dirs=[tmp_path]).get(f"acme-a100-lowregs-{limit}")


def test_a_kernel_over_the_declared_registers_is_refused(tmp_path, monkeypatch, compiled_for_profile):
    monkeypatch.setenv("HUMMING_CACHE_DIR", str(tmp_path / "cache"))
    caps = _derived_a100(tmp_path, 64)
    plan = select(Problem(scheme_of("w4a16"), 64, 4096, 4096, "f16"), caps).plan
    with pytest.raises(UnsupportedOnDevice) as info:
        compiled_for_profile(plan, caps)
    text = str(info.value)
    used = int(text.split(" uses ")[1].split()[0])
    assert plan.kernel_name in text and used > 64
    assert "acme-a100-lowregs-64 declares registers_per_thread 64" in text


def test_a_kernel_within_the_declared_registers_compiles(tmp_path, monkeypatch, compiled_for_profile):
    from humming.core.compile.cubin import register_counts

    monkeypatch.setenv("HUMMING_CACHE_DIR", str(tmp_path / "cache"))
    caps = _derived_a100(tmp_path, 255)
    plan = select(Problem(scheme_of("w4a16"), 64, 4096, 4096, "f16"), caps).plan
    _, module = compiled_for_profile(plan, caps)
    assert 0 < register_counts(module.cubin)[plan.kernel_name] <= 255


def test_register_counts_of_what_is_not_a_cubin_are_empty():
    from humming.core.compile.cubin import register_counts

    assert register_counts(b"") == {} and register_counts(b"\x7fELF" + bytes(100)) == {}
    assert register_counts(b"not an elf at all" * 10) == {}


def test_abstract_profile_without_shared_memory_is_a_named_error():
    """An abstract family profile (no smem_per_block_kb) is refused by name, not a TypeError inside a planner."""
    import humming
    from humming.errors import UnsupportedOnDevice

    for scheme in ("w4a16", "w8a8-int8"):
        with pytest.raises(UnsupportedOnDevice, match="abstract family profile"):
            humming.plan(scheme, 16, 1024, 1024, profile="thead-ppu")
