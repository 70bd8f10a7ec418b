"""CPU: the 8-bit mma.sync kernel (W8A8 int8 / fp8) is planned from capabilities, compiles with NVRTC for
every profile whose path it executes, and its PTX holds the intended instruction (never tcgen05 kind::i8
on B300/Rubin, whose INT8 takes the legacy mma.sync path)."""
import itertools
import re

import pytest
import torch

import humming
from humming import api
from humming.capabilities import list_profiles
from humming.core.layout import W8A8Layout, pack_codes_k32
from humming.core.nvrtc import select_toolchain
from humming.core.paths import choose_path
from humming.core.planner import plan_w8a8
from humming.devices import get_backend
from humming.errors import UnsupportedOnDevice

SCHEMES = ["w8a8-int8", "w8a8-fp8", "w8a8-fp8-tensor"]
CASES = []
for caps in list_profiles(include_abstract=False):
    for name in SCHEMES:
        try:
            choice = choose_path(caps, humming.schemes.get(name))
        except UnsupportedOnDevice:
            continue
        if api._runs_on_w8a8(choice, humming.schemes.get(name)):
            CASES.append((caps, name, choice))


def test_the_cases_cover_the_legacy_int8_devices():
    names = {(c.name, s) for c, s, _ in CASES}
    assert {("nvidia-b300", "w8a8-int8"), ("nvidia-rubin", "w8a8-int8"), ("nvidia-t4", "w8a8-int8"),
            ("nvidia-l40s", "w8a8-fp8"), ("thead-zhenwu-810e", "w8a8-int8")} <= names
    assert not any(c.name in ("nvidia-h200", "nvidia-b200") for c, _, _ in CASES)  # wgmma / tcgen05 planned there


@pytest.mark.parametrize("caps,scheme,choice", CASES, ids=[f"{c.name}-{s}" for c, s, _ in CASES])
def test_compiles_with_the_intended_mma(caps, scheme, choice):
    route = get_backend(caps).compile_route(caps)
    try:
        select_toolchain(route.arch, route.min_nvrtc)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])
    for m in (1, 200):
        p = plan_w8a8(caps, W8A8Layout(choice.a_type, 1024, 2048, "channel"), m, "f16", choice, scheme=scheme)
        _, mod = api.compile_plan(p, caps)
        mma = set(re.findall(r"mma\.sync\.aligned\.(m\d+n\d+k\d+)\.row\.col\.(\w+)\.(\w+)", mod.ptx))
        if choice.a_type == "s8":
            k16 = caps.find_mma(family="mma_sync", a_type="s8", shape=(16, 8, 32))
            assert mma == ({("m16n8k32", "s32", "s8")} if k16 else {("m8n8k16", "s32", "s8")})
        else:
            assert mma == {("m16n8k32", "f32", "e4m3")}
        assert "tcgen05" not in mod.ptx and "kind::i8" not in mod.ptx and "wgmma" not in mod.ptx
        if caps.name in ("nvidia-b300", "nvidia-rubin"):
            assert p.path == "legacy" and "kind::i8 not available" in p.explain()


def test_k32_atom_layout_matches_the_kernel_indexing():
    n, k = 128, 128
    codes = torch.randint(0, 256, (n, k), dtype=torch.uint8)
    words = pack_codes_k32(codes).view(n // 64, k // 64, 8, 32, 4)
    for na, ka, s, t, lane, r in itertools.product(range(2), range(2), range(2), range(8), (0, 5, 31), range(2)):
        word = int(words[na, ka, s * 4 + t // 2, lane, (t % 2) * 2 + r]) & 0xFFFFFFFF
        g, q = lane // 4, lane % 4
        for e in range(4):  # register byte e = k 4q + e (+16 for b1) of column t*8 + g
            assert (word >> (8 * e)) & 0xFF == int(codes[na * 64 + t * 8 + g, ka * 64 + s * 32 + r * 16 + q * 4 + e])


def test_w8a8_refuses_what_it_does_not_run():
    caps = api.resolve_profile("nvidia-l40s")
    choice = choose_path(caps, humming.schemes.get("w4a8-int8"))
    assert not api._runs_on_w8a8(choice, humming.schemes.get("w4a8-int8"))
    with pytest.raises(humming.ShapeError, match="multiple of 128"):
        plan_w8a8(caps, W8A8Layout("s8", 1024, 1088, "channel"), 1, "f16",
                  choose_path(caps, humming.schemes.get("w8a8-int8")))
