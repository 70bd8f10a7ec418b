"""docs/status.md is the support matrix the registry gives now (`python -m humming support --write docs/status.md`)."""
from pathlib import Path

from humming.cli.support import matrix

ROOT = Path(__file__).resolve().parents[1]


def test_status_md_is_the_current_support_matrix():
    assert (ROOT / "docs" / "status.md").read_text() == matrix(), (
        "docs/status.md is stale: run `python -m humming support --write docs/status.md`")


def test_every_sm90a_scheme_row_names_a_family():
    dense, moe = matrix().split("## Mixture-of-experts GEMMs")
    rows = [ln for ln in dense.splitlines() if ln.startswith("| w4a16 |") or ln.startswith("| w8a8-fp8 |")]
    assert len(rows) == 2 and all("-" not in ln.split("|")[2:-1] for ln in rows)


def test_the_moe_table_names_a_family_for_every_scheme_and_target():
    """Every preset scheme's MoE GEMM runs on every target (the tile kernel everywhere; the register-A kernel for
    int4 prefill on sm_90a)."""
    moe = matrix().split("## Mixture-of-experts GEMMs")[1]
    rows = [ln for ln in moe.splitlines() if ln.startswith("| ") and not ln.startswith(("| scheme", "| *"))]
    assert len(rows) >= 25
    for ln in rows:
        cells = [c.strip() for c in ln.split("|")[2:-1]]
        assert all(c and "-" not in c.replace("moe_", "").replace("register_a", "") for c in cells), ln
    w4a16 = next(ln for ln in rows if ln.startswith("| w4a16 |"))
    assert "moe_wna16 / moe_register_a" in w4a16
