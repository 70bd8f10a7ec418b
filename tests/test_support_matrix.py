"""docs/status.md is the support matrix the registry gives now (`python -m humming support --write docs/status.md`)."""
from pathlib import Path

from humming.cli.support import matrix

ROOT = Path(__file__).resolve().parents[1]


def test_status_md_is_the_current_support_matrix():
    assert (ROOT / "docs" / "status.md").read_text() == matrix(), (
        "docs/status.md is stale: run `python -m humming support --write docs/status.md`")


def test_every_sm90a_scheme_row_names_a_family():
    text = matrix()
    rows = [ln for ln in text.splitlines() if ln.startswith("| w4a16 |") or ln.startswith("| w8a8-fp8 |")]
    assert len(rows) == 2 and all("-" not in ln.split("|")[2:-1] for ln in rows)
