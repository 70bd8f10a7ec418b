"""The GPU's clock and power right after a benchmark row (nvidia-smi): the H200 reaches its 700 W cap within about a
second of load and then runs 10-15% slower, so a row's number depends on the load before it; the state says which
regime the row ran in. Imported by bench/bench_wna16.py (tests/test_bench_gpu_state.py checks the parsing)."""
from __future__ import annotations

import shutil
import subprocess

QUERY = "clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"
POWER_CAP = 0x4  # nvidia-smi's clock-event reason: the software power cap


def parse(line: str) -> dict:
    """One line of ``nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits`` as numbers: sm_mhz, watts,
    celsius, reasons (the bit mask), power_capped; {} when the line does not have those four fields."""
    fields = [f.strip() for f in line.strip().split(",")]
    if len(fields) != 4:
        return {}
    try:
        mhz, watts, celsius = float(fields[0]), float(fields[1]), float(fields[2])
        reasons = int(fields[3], 16) if fields[3].lower().startswith("0x") else int(fields[3])
    except ValueError:
        return {}
    return {"sm_mhz": mhz, "watts": watts, "celsius": celsius, "reasons": reasons,
            "power_capped": bool(reasons & POWER_CAP)}


def read(index: int = 0) -> dict:
    """The state of GPU ``index`` now, or {} without nvidia-smi (or when it fails)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {}
    try:
        out = subprocess.run([exe, f"--id={index}", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse(out.splitlines()[0]) if out.strip() else {}


def describe(state: dict) -> str:
    """A short text of a state for a log line ("" for none)."""
    if not state:
        return ""
    return f"  [{state['sm_mhz']:.0f} MHz {state['watts']:.0f} W{' capped' if state['power_capped'] else ''}]"
