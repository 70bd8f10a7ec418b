"""The backend contract (humming.devices.base.Backend), on the CPU: the core kernel generators import no vendor module
and get every helper group and every piece of spelling data from the backend they are given; the NVIDIA backend
provides every name they ask for; the PPU backend refuses the groups of kernels it never runs."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from humming.devices.base import Backend, HelperRequest
from humming.devices.nvidia.backend import NvidiaBackend
from humming.devices.thead_ppu.backend import PPUBackend
from humming.errors import UnsupportedOnDevice

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "humming" / "core"
VENDORS = ("humming.devices.nvidia", "humming.devices.thead_ppu")


def _modules(folder: Path):
    for path in sorted(folder.rglob("*.py")):
        yield path, ast.parse(path.read_text(), filename=str(path))


def _imported(tree: ast.AST):
    """Every module name an import statement of the tree names (function-local imports included)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _is_backend(node: ast.AST) -> bool:
    """``backend`` (a generator's parameter) or ``get_backend(...)``."""
    if isinstance(node, ast.Name):
        return node.id == "backend"
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "get_backend"


def _asked_for() -> dict[str, set[str]]:
    """{"helpers": names, "data": names}: the string literals of backend.helpers("...") / backend.data("...") calls
    under humming/core."""
    asked: dict[str, set[str]] = {"helpers": set(), "data": set()}
    for _, tree in _modules(CORE):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in asked
                    and _is_backend(node.func.value) and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                asked[node.func.attr].add(node.args[0].value)
    return asked


def test_core_imports_no_vendor_module():
    offenders = [f"{path.relative_to(ROOT)}: {name}" for path, tree in _modules(CORE) for name in _imported(tree)
                 if name.startswith(VENDORS)]
    assert not offenders, "core modules must reach the device only through the backend they are given:\n" + \
        "\n".join(offenders)


def test_every_group_the_generators_ask_for_is_provided_by_the_nvidia_backend():
    asked = _asked_for()
    # the scan finds the generators' calls (a scan that found nothing would prove nothing)
    assert {"wgmma_rs", "wgmma_rs8", "tcgen05", "stream_bulk", "grid_dependency"} <= asked["helpers"]
    assert {"rs8_widen_tables", "tcgen05_idesc"} <= asked["data"]
    provided = set(NvidiaBackend.PRELUDES) | set(NvidiaBackend.GROUPS)
    assert asked["helpers"] <= provided, f"not provided by NvidiaBackend: {sorted(asked['helpers'] - provided)}"
    assert asked["data"] <= set(NvidiaBackend.DATA), \
        f"no NvidiaBackend data: {sorted(asked['data'] - set(NvidiaBackend.DATA))}"


def test_nvidia_tables_name_callables_and_spell_profile_groups():
    for table in (NvidiaBackend.PRELUDES, NvidiaBackend.GROUPS, NvidiaBackend.DATA):
        assert all(callable(f) for f in table.values())
    backend = NvidiaBackend()
    assert "griddepcontrol.wait" in backend.helpers("grid_dependency", caps=None)
    assert "stmatrix.sync.aligned" in backend.helpers("stmatrix", caps=None)
    assert len(backend.data("rs8_widen_tables")) == 4
    assert backend.data("tcgen05_idesc", kind="f16", a_type="bf16", b_type="bf16", acc="f32", m=128, n=128) == \
        (1 << 4) | (1 << 7) | (1 << 10) | ((128 >> 3) << 17) | ((128 >> 4) << 24)


def test_unknown_names_are_refused_naming_them():
    backend = NvidiaBackend()
    with pytest.raises(UnsupportedOnDevice, match="no_such_group"):
        backend.helpers("no_such_group")
    with pytest.raises(UnsupportedOnDevice, match="no_such_datum"):
        backend.data("no_such_datum")


def _wgmma_request() -> HelperRequest:
    class Wgmma:  # what the wgmma groups read of an MmaInstruction
        family, a_type, n_values = "wgmma", "f16", (128,)

        def describe(self) -> str:
            return "wgmma m64nNk16 f16"

    return HelperRequest(mma=Wgmma(), act="f16", weight=None, async_copy=True)


@pytest.mark.parametrize("group", ["wgmma_k32", "wgmma_rs", "wgmma_rs8", "tcgen05", "tcgen05_blockscaled"])
def test_ppu_backend_refuses_wgmma_and_tcgen05_groups(group):
    with pytest.raises(UnsupportedOnDevice, match=group):
        PPUBackend().helpers(group, _wgmma_request(), n=128)


def test_ppu_backend_offers_the_portable_groups_and_no_data():
    ppu = PPUBackend()
    assert ppu.helpers("grid_dependency", caps=None) == NvidiaBackend().helpers("grid_dependency", caps=None)
    assert ppu.helpers("e4m3_of_labels") == NvidiaBackend().helpers("e4m3_of_labels")
    with pytest.raises(UnsupportedOnDevice, match="rs8_widen_tables"):
        ppu.data("rs8_widen_tables")


def test_base_backend_has_no_groups():
    class Bare(Backend):
        name = "bare"

        def supports(self, caps):
            return True

        def compile_route(self, caps):
            raise NotImplementedError

        def prelude(self, request):
            return ""

    with pytest.raises(UnsupportedOnDevice, match="bare.*'wgmma_rs'"):
        Bare().helpers("wgmma_rs")
    with pytest.raises(UnsupportedOnDevice, match="bare.*'tcgen05_idesc'"):
        Bare().data("tcgen05_idesc")


def test_nvidia_modules_are_small():
    folder = ROOT / "humming" / "devices" / "nvidia"
    sizes = {p.name: len(p.read_text().splitlines()) for p in folder.glob("*.py")}
    assert max(sizes.values()) <= 400, sizes
