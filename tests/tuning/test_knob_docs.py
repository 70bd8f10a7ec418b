"""The knob table of docs/tuning.md is the code's: every declared knob, its values, its defaults.yaml value and its
meaning, as `python -m humming info --knobs --markdown` prints them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from humming.core.tuning import knobs

DOC = Path(__file__).resolve().parents[2] / "docs" / "tuning.md"


def test_docs_table_is_the_codes():
    table = knobs.markdown_table()
    assert table in DOC.read_text(), ("docs/tuning.md's knob table differs from the code: replace it with "
                                      "`python -m humming info --knobs --markdown`")
    assert table.count("\n| `") == len(knobs.KNOBS)


def test_values_words():
    assert knobs.values_words(knobs.KNOBS["launch.cluster_splits"]) == "int 0..8"
    assert knobs.values_words(knobs.KNOBS["moe.max_token_tile"]) == "16 / 32 / 64 / 128"
    assert knobs.values_words(knobs.KNOBS["register_a.min_m"]) == "int >= 1 or null"
    assert knobs.values_words(knobs.KNOBS["register_a8.chain"]) == "64 / 128 or null"
    assert knobs.values_words(knobs.KNOBS["register_a.any_group"]) == "bool"


def test_cli_prints_it_without_a_device():
    out = subprocess.run([sys.executable, "-m", "humming", "info", "--knobs", "--markdown"], capture_output=True,
                         text=True, check=True, env={"PATH": "/usr/bin:/bin", "HUMMING_DEVICE_PROFILE": ""}).stdout
    assert out == knobs.markdown_table()
