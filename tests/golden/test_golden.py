"""The restructuring guard: every planning answer and generated kernel is as tests/golden/kernels.json.gz records."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import golden  # noqa: E402


def test_every_plan_and_kernel_source_is_as_recorded():
    diff = golden.differences(golden.load(), golden.record_all())
    assert not diff, "the code no longer answers as recorded (python tests/golden/golden.py --check):\n" + "\n".join(diff)
