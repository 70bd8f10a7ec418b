"""CPU: `python -m humming plan --moe` explains the MoE GEMM the registry chooses (its family and token tile);
named errors for missing or impossible counts and for MoE options without --moe."""
from __future__ import annotations

import subprocess
import sys

import pytest

from humming.cli import main
from humming.core.problem import Problem, scheme_of
from humming.core.registry import select
from humming.devices.current import resolve_profile

ARGS = ["plan", "--scheme", "w4a16", "--moe", "--experts", "128", "--top-k", "8", "--tokens", "64", "--n", "1536",
        "--k", "2048", "--profile", "nvidia-h200"]


def _expected(form: str = "indexed"):
    problem = Problem(scheme_of("w4a16"), 64, 1536, 2048, "f16", form=form, experts=128, top_k=8)
    return select(problem, resolve_profile("nvidia-h200")).plan


@pytest.mark.parametrize("form", ["indexed", "grouped", "masked"])
def test_plan_moe_explains_the_registry_choice(form, capsys):
    assert main(ARGS + ["--form", form]) == 0
    out = capsys.readouterr().out
    plan = _expected(form)
    assert out.strip() == plan.explain().strip()
    assert plan.family in out.splitlines()[0]
    assert f"token tile {plan.tiles.bm}" in out


def test_plan_moe_as_a_command():
    done = subprocess.run([sys.executable, "-m", "humming", *ARGS], capture_output=True, text=True, check=True)
    assert "token tile" in done.stdout and _expected().family in done.stdout


@pytest.mark.parametrize("extra,message", [
    (["--moe"], "--moe needs --experts"),
    (["--moe", "--experts", "4", "--top-k", "5"], "top-k"),
    (["--experts", "4"], "only with --moe"),
    (["--form", "masked"], "only with --moe"),
    (["--act-order"], "only with --moe"),
])
def test_plan_moe_errors(extra, message, capsys):
    assert main(["plan", "--profile", "nvidia-h200", *extra]) == 2
    assert message in capsys.readouterr().err


def test_plan_moe_act_order_says_what_it_costs(capsys):
    assert main(ARGS + ["--act-order"]) == 0
    assert "act-order experts" in capsys.readouterr().out


def test_plan_under_a_knob_shows_a_kernel_that_is_off_by_default(capsys):
    w8a8 = ["plan", "--scheme", "w8a8-fp8", "--moe", "--experts", "128", "--top-k", "8", "--tokens", "2048", "--n",
            "1536", "--k", "2048", "--profile", "nvidia-h100", "--act", "bf16"]
    assert main(w8a8) == 0
    assert "moe-wgmma-8bit" not in capsys.readouterr().out
    assert main(w8a8 + ["--knob", "moe.wgmma_8bit_min_rows=16"]) == 0
    out = capsys.readouterr().out
    assert "moe-wgmma-8bit" in out.splitlines()[0] and "from 16 rows per expert" in out
    with pytest.raises(SystemExit):
        main(w8a8 + ["--knob", "moe.wgmma_8bit_min_rows"])  # not NAME=VALUE: a usage error
    assert "is not NAME=VALUE" in capsys.readouterr().err
    assert main(w8a8 + ["--knob", "moe.no_such_knob=1"]) != 0
    assert "unknown knob 'moe.no_such_knob'" in capsys.readouterr().err
