"""Bad input of every kind issue 46 lists, each case in its own process with a deadline, and what humming did with it.

    python scripts/hostile_battery.py [--only WORD] [--timeout 120] [--workers N] [--json FILE]

Categories: profile files (not UTF-8, deep nesting, alias bombs, huge files, NaN / infinite / impossible limits,
same-name replacement, FIFOs, devices, directories; declared limits a plan or a compiled kernel must honour), API
arguments (plan / gemm / quantize with wrong types and ranges, tiny weights) and settings (unparsable values, an NVRTC
pin to a missing, empty or non-library path). Outcomes:

    named error <Type>    a humming error (HummingError) or a refusal printed by the CLI: what should happen
    handled <what>        the right non-error answer (a plan within the declared limits, a warning)
    accepted              silent acceptance: the bad input went through unremarked
    raw crash <Type>      an exception that is not a humming error, or the process died
    timeout               no answer within --timeout seconds (e.g. a FIFO read)

No GPU is needed (kernels are compiled with NVRTC, GEMMs on CPU tensors run the reference). Exit status 1 where any
case was accepted, crashed or timed out.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HEAD = "name: acme-hostile\nextends: nvidia-ampere\n"
H200_CHILD = "name: acme-h200-{tag}\nextends: nvidia-h200\nmatch: {{names: [ACME {tag}]}}\nlimits: {{{limits}}}\n"
GOOD_CASES = ("named error", "handled")


class Refused(Exception):
    """A CLI refused the input by name (exit 1 and a FAIL line): reported as a named error."""


@dataclass(frozen=True)
class Case:
    name: str
    category: str
    run: Callable[[Path], object]  # returns None (accepted) or a str (handled); raises to refuse
    env: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------- profile files
def _write(tmp: Path, name: str, data: str | bytes) -> Path:
    path = tmp / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def _load(text: str | bytes, name: str = "p.yaml") -> Callable[[Path], object]:
    def run(tmp: Path):
        from humming.capabilities import load_profile_file

        return load_profile_file(_write(tmp, name, text)) and None
    return run


def _registry(files: dict[str, str | bytes], then: str | None = None) -> Callable[[Path], object]:
    """Every profile of a HUMMING_PROFILE_PATH directory holding ``files`` resolved (and ``then`` shown by info)."""
    def run(tmp: Path):
        import humming
        from humming.capabilities import Registry

        for name, data in files.items():
            _write(tmp, name, data)
        reg = Registry(extra_dirs=[tmp])
        reg.all()
        if then:
            os.environ["HUMMING_PROFILE_PATH"] = str(tmp)
            humming.device.info(then)
    return run


def _bomb(levels: int = 9, width: int = 9) -> str:
    lines = ["  a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _cli_validate(*paths: str) -> Callable[[Path], object]:
    def run(tmp: Path):
        from humming.cli import profile as profile_cli

        real = [str(tmp / p) if not p.startswith("/") else p for p in paths]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = profile_cli._validate(real)
        fails = [line for line in out.getvalue().splitlines() if line.startswith("FAIL")]
        if rc == 1 and fails:
            raise Refused(fails[0][6:])
    return run


def _fifo(then: Callable[[Path], object], name: str = "pipe.yaml") -> Callable[[Path], object]:
    def run(tmp: Path):
        os.mkfifo(tmp / name)
        return then(tmp)
    return run


def _dir_case(run_in: Callable[[Path], object]) -> Callable[[Path], object]:
    def run(tmp: Path):
        (tmp / "folder.yaml").mkdir()
        return run_in(tmp)
    return run


def _honoured(limits: str, scheme: str, m: int, check: Callable[[object, object], str]) -> Callable[[Path], object]:
    """A profile derived from the H200 declaring ``limits``: the plan chosen must keep them (``check`` -> what it
    kept, or '' where the plan breaks a limit: silent acceptance)."""
    def run(tmp: Path):
        import humming
        from humming.capabilities import Registry

        _write(tmp, "derived.yaml", H200_CHILD.format(tag="d", limits=limits))
        caps = Registry(extra_dirs=[tmp]).get("acme-h200-d")
        os.environ["HUMMING_PROFILE_PATH"] = str(tmp)
        plan = humming.plan(scheme, m, 8192, 8192, profile=caps)
        return check(plan, caps) or None
    return run


def _threads_ok(plan, caps) -> str:
    return f"{plan.threads} threads per block" if plan.threads <= caps.limits.max_threads_per_block else ""


def _smem_ok(plan, caps) -> str:
    return f"{plan.smem_bytes} B smem" if plan.smem_bytes <= caps.limits.smem_per_block_kb * 1024 else ""


def _cluster_ok(plan, caps) -> str:
    dims = plan.cluster_dims or (1, 1, 1)
    blocks = dims[0] * dims[1] * dims[2]
    return f"clusters of {blocks}" if blocks <= caps.limits.max_cluster_size else ""


def _registers(tmp: Path):
    from humming.capabilities import Registry
    from humming.core.problem import Problem, scheme_of
    from humming.core.registry import select
    from humming.core.runtime.compiled import compile_plan

    _write(tmp, "lowregs.yaml", "name: acme-a100-regs\nextends: nvidia-a100\nmatch: {names: [ACME regs]}\n"
                                "limits: {registers_per_thread: 64}\n")
    caps = Registry(extra_dirs=[tmp]).get("acme-a100-regs")
    plan = select(Problem(scheme_of("w4a16"), 64, 4096, 4096, "f16"), caps).plan
    compile_plan(plan, caps)


def profile_cases() -> list[Case]:
    lim = "name: acme-hostile\nextends: nvidia-ampere\nlimits: {%s}\n"
    hop = "name: acme-hostile\nextends: nvidia-hopper\nlimits: {%s}\n"
    c = [
        Case("profile not UTF-8", "profile", _load(HEAD.encode() + b"notes: [caf\xe9]\n")),
        Case("profile not UTF-8 in a path directory", "profile", _registry({"x.yaml": HEAD.encode() + b"\xff\xfe\n"})),
        Case("profile BOM + NUL bytes", "profile", _load(b"\xef\xbb\xbf" + HEAD.encode() + b"notes: [a\x00b]\n")),
        Case("profile nested lists x5000", "profile", _load(HEAD + "notes: " + "[" * 5000 + "]" * 5000 + "\n")),
        Case("profile nested maps x5000", "profile", _load(HEAD + "data: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n")),
        Case("profile alias bomb under notes", "profile", _load(HEAD + "x:\n" + _bomb() + "notes: *a8\n")),
        Case("profile alias bomb under extension data, then info", "profile", _registry({"x.yaml": (
            "name: acme-bomb\nextends: nvidia-ampere\nvendor_extensions:\n  boom:\n    data:\n"
            + _bomb().replace("  a", "      a"))}, then="acme-bomb")),
        Case("profile alias cycle", "profile", _load(HEAD + "notes: &a [*a]\n")),
        Case("profile of 5 MB", "profile", _load(HEAD + "notes: [" + "x, " * 1_700_000 + "x]\n")),
        Case("profile integer of 5000 digits", "profile", _load(lim % ("sms: " + "9" * 5000))),
        Case("profile memory_tb_s .nan", "profile", _load(lim % "memory_tb_s: .nan")),
        Case("profile sms .inf", "profile", _load(lim % "sms: .inf")),
        Case("profile sms 1e9", "profile", _load(lim % "sms: 1000000000")),
        Case("profile smem_per_block_kb 1e9", "profile", _load(lim % "smem_per_block_kb: 1000000000")),
        Case("profile smem 200 KB on sm_80 (163 max)", "profile", _load(lim % "smem_per_block_kb: 200")),
        Case("profile max_threads_per_block 2048", "profile", _load(lim % "max_threads_per_block: 2048")),
        Case("profile max_threads_per_block 1000 (not whole warps)", "profile",
             _load(lim % "max_threads_per_block: 1000")),
        Case("profile registers_per_thread 300", "profile", _load(lim % "registers_per_thread: 300")),
        Case("profile warp_size 64 on NVIDIA", "profile", _load(lim % "warp_size: 64")),
        Case("profile max_cluster_size 32", "profile", _load(hop % "max_cluster_size: 32")),
        Case("profile max_cluster_size 0", "profile", _load(hop % "max_cluster_size: 0")),
        Case("profile negative sms", "profile", _load(lim % "sms: -4")),
        Case("profile sms as text", "profile", _load(lim % "sms: lots")),
        Case("profile named like a built-in (no replaces:)", "profile", _registry({"h200.yaml": (
            "name: nvidia-h200\nextends: nvidia-hopper\nmatch: {names: [H200]}\nlimits: {sms: 7}\n")})),
        Case("profile validate: same-name sibling", "profile", lambda tmp: (
            _write(tmp, "a.yaml", HEAD), _write(tmp, "b.yaml", HEAD), _cli_validate("a.yaml")(tmp))[-1]),
        Case("profile validate: two files of one name", "profile", lambda tmp: (
            _write(tmp, "a.yaml", HEAD), (tmp / "d").mkdir(), _write(tmp / "d", "b.yaml", HEAD),
            _cli_validate("a.yaml", "d/b.yaml")(tmp))[-1]),
        Case("profile FIFO, load_profile_file", "profile", _fifo(lambda tmp: _load_path(tmp / "pipe.yaml"))),
        Case("profile FIFO in a path directory", "profile", _fifo(_registry({"ok.yaml": HEAD}))),
        Case("profile FIFO as _targets.yaml", "profile", _fifo(_registry({}), name="_targets.yaml")),
        Case("profile validate FIFO (CLI)", "profile", _fifo(_cli_validate("pipe.yaml"))),
        Case("profile validate directory (CLI)", "profile", _dir_case(_cli_validate("folder.yaml"))),
        Case("profile validate /dev/zero (CLI)", "profile", _cli_validate("/dev/zero")),
        Case("profile validate /dev/null (CLI)", "profile", _cli_validate("/dev/null")),
        Case("profile validate missing file (CLI)", "profile", _cli_validate("missing.yaml")),
        Case("limit: max_threads_per_block 256 at M=1024", "limits",
             _honoured("max_threads_per_block: 256", "w4a16", 1024, _threads_ok)),
        Case("limit: smem_per_block_kb 100 at M=1024", "limits",
             _honoured("smem_per_block_kb: 100", "w4a16", 1024, _smem_ok)),
        Case("limit: max_cluster_size 1 at M=1", "limits", _honoured("max_cluster_size: 1", "w4a16", 1, _cluster_ok)),
        Case("limit: max_cluster_size 1 at M=1024", "limits",
             _honoured("max_cluster_size: 1", "w4a16", 1024, _cluster_ok)),
        Case("limit: registers_per_thread 64, compiled", "limits", _registers),
    ]
    return c


def _load_path(path: Path):
    from humming.capabilities import load_profile_file

    load_profile_file(path)


# ---------------------------------------------------------------- API arguments
def _plan(*args, **kw) -> Callable[[Path], object]:
    def run(tmp: Path):
        import humming

        humming.plan(*args, profile=kw.pop("profile", "nvidia-h200"), **kw)
    return run


def _qw():
    import torch

    import humming

    torch.manual_seed(0)
    return humming.quantize(torch.randn(256, 512), "w4a16")


def _gemm(make_x, weight=None) -> Callable[[Path], object]:
    def run(tmp: Path):
        import torch

        import humming

        qw = _qw() if weight is None else weight()
        humming.gemm(make_x(torch), qw)
    return run


def _quantize(make_w, scheme: str = "w4a16", **kw) -> Callable[[Path], object]:
    def run(tmp: Path):
        import torch

        import humming

        torch.manual_seed(0)
        humming.quantize(make_w(torch), scheme, **kw)
    return run


def api_cases() -> list[Case]:
    s = "w4a16"
    return [
        Case("plan M=1.5", "api", _plan(s, 1.5, 4096, 4096)),
        Case("plan M='16'", "api", _plan(s, "16", 4096, 4096)),
        Case("plan M=None", "api", _plan(s, None, 4096, 4096)),
        Case("plan M=True", "api", _plan(s, True, 4096, 4096)),
        Case("plan M=0", "api", _plan(s, 0, 4096, 4096)),
        Case("plan M=-1", "api", _plan(s, -1, 4096, 4096)),
        Case("plan M=2**31", "api", _plan(s, 2**31, 4096, 4096)),
        Case("plan N=0", "api", _plan(s, 16, 0, 4096)),
        Case("plan N=-64", "api", _plan(s, 16, -64, 4096)),
        Case("plan K=0", "api", _plan(s, 16, 4096, 0)),
        Case("plan K=-128", "api", _plan(s, 16, 4096, -128)),
        Case("plan w4a8-fp8 N=0 (was ZeroDivisionError)", "api", _plan("w4a8-fp8", 1024, 0, 4096)),
        Case("plan group_size=0", "api", _plan(s, 16, 4096, 4096, group_size=0)),
        Case("plan unknown scheme", "api", _plan("w3a7-nonsense", 16, 4096, 4096)),
        Case("plan act='f32'", "api", _plan(s, 16, 4096, 4096, act="f32")),
        Case("plan unknown profile", "api", _plan(s, 16, 4096, 4096, profile="nvidia-h9000")),
        Case("gemm x 0-d tensor", "api", _gemm(lambda t: t.tensor(1.0))),
        Case("gemm x numpy array", "api", _gemm(lambda t: t.randn(4, 512).numpy())),
        Case("gemm x None", "api", _gemm(lambda t: None)),
        Case("gemm x int32", "api", _gemm(lambda t: t.ones(4, 512, dtype=t.int32))),
        Case("gemm x wrong K", "api", _gemm(lambda t: t.randn(4, 500))),
        Case("gemm weight a plain tensor", "api", _gemm(lambda t: t.randn(4, 512), weight=lambda: __import__(
            "torch").randn(256, 512))),
        Case("gemm weight None", "api", _gemm(lambda t: t.randn(4, 512), weight=lambda: None)),
        Case("quantize group_size=0", "api", _quantize(lambda t: t.randn(256, 512), group_size=0)),
        Case("quantize group_size=-128", "api", _quantize(lambda t: t.randn(256, 512), group_size=-128)),
        Case("quantize group_size=1.5", "api", _quantize(lambda t: t.randn(256, 512), group_size=1.5)),
        Case("quantize group_size='128'", "api", _quantize(lambda t: t.randn(256, 512), group_size="128")),
        Case("quantize K=200 not divisible by the group", "api", _quantize(lambda t: t.randn(256, 200))),
        Case("quantize weight None", "api", _quantize(lambda t: None)),
        Case("quantize weight 1-D", "api", _quantize(lambda t: t.randn(512))),
        Case("quantize weight numpy", "api", _quantize(lambda t: t.randn(256, 512).numpy())),
        Case("quantize weight with NaN", "api", _quantize(lambda t: t.full((256, 512), float("nan")))),
        Case("quantize weights of 1e-30 (all zero)", "api", _quantize(lambda t: t.randn(256, 512) * 1e-30)),
        Case("quantize unknown scheme", "api", _quantize(lambda t: t.randn(256, 512), scheme="w9a9")),
    ]


# ---------------------------------------------------------------- settings
def _compile_trivial(tmp: Path):
    from humming.core.compile.compiler import compile_cuda

    compile_cuda('extern "C" __global__ void battery_k(float* p) { p[0] = 1.0f; }', ["battery_k"], "sm_80",
                 cache=None)


def _plan_small(tmp: Path):
    import humming

    humming.plan("w4a16", 16, 4096, 4096, profile="nvidia-h200")


def _precompile_mode(tmp: Path):
    from humming.core.runtime.precompile import precompile_mode

    precompile_mode()


def _ppu_flags(tmp: Path):
    from humming.capabilities import get_profile
    from humming.devices.thead_ppu.backend import vendor_flags

    vendor_flags(get_profile("thead-zhenwu-810e"))  # a profile with vendor extensions reads the switch


def _detect(tmp: Path):
    from humming.devices.nvidia.detect import query_driver

    query_driver()


def _device_info(tmp: Path):
    import humming

    humming.device.info()


def _nvrtc_pin(make: Callable[[Path], str]) -> Callable[[Path], object]:
    def run(tmp: Path):
        os.environ["HUMMING_NVRTC_PATH"] = make(tmp)
        from humming.core.compile.nvrtc import select_toolchain

        select_toolchain("sm_80", None)
    return run


def _empty_dir(tmp: Path) -> str:
    (tmp / "empty").mkdir()
    return str(tmp / "empty")


def _text_file(tmp: Path) -> str:
    return str(_write(tmp, "notes.txt", "not a library\n"))


def _broken_so(tmp: Path) -> str:
    (tmp / "lib").mkdir()
    _write(tmp / "lib", "libnvrtc.so.12", b"\x7fELF" + os.urandom(64))
    return str(tmp / "lib")


def settings_cases() -> list[Case]:
    return [
        Case("HUMMING_CACHE=maybe", "settings", _compile_trivial, {"HUMMING_CACHE": "maybe"}),
        Case("HUMMING_CACHE_MEMORY=lots", "settings", _compile_trivial, {"HUMMING_CACHE_MEMORY": "lots"}),
        Case("HUMMING_CACHE_MEMORY=-5", "settings", _compile_trivial, {"HUMMING_CACHE_MEMORY": "-5"}),
        Case("HUMMING_NVRTC=twelve", "settings", _compile_trivial, {"HUMMING_NVRTC": "twelve"}),
        Case("HUMMING_NVRTC=99 (not installed)", "settings", _compile_trivial, {"HUMMING_NVRTC": "99"}),
        Case("HUMMING_LINEINFO=2", "settings", _compile_trivial, {"HUMMING_LINEINFO": "2"}),
        Case("HUMMING_TUNE=perhaps", "settings", _plan_small, {"HUMMING_TUNE": "perhaps"}),
        Case("HUMMING_UNVERIFIED_KERNELS=y", "settings", _plan_small, {"HUMMING_UNVERIFIED_KERNELS": "y"}),
        Case("HUMMING_PRECOMPILE=sometimes", "settings", _precompile_mode, {"HUMMING_PRECOMPILE": "sometimes"}),
        Case("HUMMING_PPU_NVCC_FLAGS unbalanced quote", "settings", _ppu_flags, {"HUMMING_PPU_NVCC_FLAGS": '"-O3'}),
        Case("HUMMING_PPU_EXTENSIONS=half", "settings", _ppu_flags, {"HUMMING_PPU_EXTENSIONS": "half"}),
        Case("HUMMING_SKIP_DETECT=later", "settings", _detect, {"HUMMING_SKIP_DETECT": "later"}),
        Case("HUMMING_DEVICE_PROFILE unknown", "settings", _device_info, {"HUMMING_DEVICE_PROFILE": "nvidia-h9000"}),
        Case("HUMMING_PROFILE_PATH missing directory, plan", "settings", _plan_small,
             {"HUMMING_PROFILE_PATH": "/nonexistent/humming-profiles"}),
        Case("HUMMING_PROFILE_PATH missing directory, device info", "settings", _device_info,
             {"HUMMING_PROFILE_PATH": "/nonexistent/humming-profiles"}),
        Case("HUMMING_NVRTC_PATH missing directory", "settings", _nvrtc_pin(lambda tmp: str(tmp / "missing"))),
        Case("HUMMING_NVRTC_PATH empty directory", "settings", _nvrtc_pin(_empty_dir)),
        Case("HUMMING_NVRTC_PATH a text file", "settings", _nvrtc_pin(_text_file)),
        Case("HUMMING_NVRTC_PATH a broken libnvrtc.so", "settings", _nvrtc_pin(_broken_so)),
    ]


def all_cases() -> list[Case]:
    return profile_cases() + api_cases() + settings_cases()


# ---------------------------------------------------------------- running
def run_case(case: Case, tmp: Path) -> dict:
    """In the child: run one case and classify what happened."""
    from humming.errors import HummingError

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = case.run(tmp)
        except Refused as exc:
            return {"outcome": "named error CLI", "detail": str(exc)}
        except HummingError as exc:
            return {"outcome": f"named error {type(exc).__name__}", "detail": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - the point is to see what escapes
            return {"outcome": f"raw crash {type(exc).__name__}", "detail": str(exc)}
    if isinstance(result, str):
        return {"outcome": "handled", "detail": result}
    ours = [w for w in caught if w.category.__module__.startswith("humming")]
    if ours:
        return {"outcome": f"handled warning {ours[0].category.__name__}", "detail": str(ours[0].message)}
    return {"outcome": "accepted", "detail": ""}


def _child(name: str) -> None:
    case = next(c for c in all_cases() if c.name == name)
    os.environ.update(case.env)
    with tempfile.TemporaryDirectory(prefix="humming-battery-") as tmp:
        os.environ.setdefault("HUMMING_CACHE_DIR", str(Path(tmp) / "cache"))
        out = run_case(case, Path(tmp))
    sys.stdout.write("\n" + json.dumps(out) + "\n")


def _spawn(case: Case, timeout: float) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUMMING_")}
    env.update({"HUMMING_SKIP_DETECT": "1", "PYTHONPATH": str(ROOT)})
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, __file__, "--child", case.name], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"outcome": "timeout", "detail": f"no answer in {timeout:.0f} s", "seconds": timeout}
    seconds = time.perf_counter() - t0
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"outcome": f"raw crash (exit {done.returncode})", "detail": tail, "seconds": seconds}
    return {**json.loads(lines[-1]), "seconds": seconds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="run only the cases whose name contains this text")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    ap.add_argument("--workers", type=int, default=max(2, os.cpu_count() or 2))
    ap.add_argument("--json", default="", help="also write every case's outcome and message here")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child)
        return 0
    cases = [c for c in all_cases() if args.only.lower() in c.name.lower()]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.workers) as pool:
        results = list(pool.map(lambda c: _spawn(c, args.timeout), cases))
    width = max(len(c.name) for c in cases)
    print(f"{'category':9}  {'case':{width}}  outcome")
    totals: dict[str, int] = {}
    for case, res in zip(cases, results):
        detail = " ".join(res["detail"].split())[:110]
        print(f"{case.category:9}  {case.name:{width}}  {res['outcome']}" + (f": {detail}" if detail else ""))
        kind = next((k for k in ("named error", "handled", "accepted", "raw crash", "timeout")
                     if res["outcome"].startswith(k)), res["outcome"])
        totals[kind] = totals.get(kind, 0) + 1
    print(f"\n{len(cases)} cases in {time.perf_counter() - t0:.0f} s: "
          + ", ".join(f"{k} {totals.get(k, 0)}" for k in ("named error", "handled", "accepted", "raw crash", "timeout")))
    if args.json:
        Path(args.json).write_text(json.dumps([{"case": c.name, "category": c.category, **r}
                                               for c, r in zip(cases, results)], indent=1))
    return 0 if all(k in GOOD_CASES for k in totals) else 1


if __name__ == "__main__":
    sys.exit(main())
