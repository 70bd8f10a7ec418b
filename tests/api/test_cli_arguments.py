"""The commands' size arguments (--m, --n, --k, --group-size, --shapes) take whole numbers from 1 to 2**31 - 1;
anything else is a usage error naming the range, before any planning."""
from __future__ import annotations

import argparse

import pytest

from humming.cli._args import MAX_DIM, parse_ms, parse_shapes, positive_int
from humming.core.quant import arguments
from humming.errors import ShapeError


def test_the_cli_bound_is_the_api_bound():
    assert MAX_DIM == arguments.MAX_DIM


@pytest.mark.parametrize("text", ["0", "-64", "1.5", "x", "", str(2**31)])
def test_positive_int_refuses(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected 1 to 2147483647"):
        positive_int(text)


def test_positive_int_takes_sizes():
    assert positive_int("16") == 16 and positive_int(str(MAX_DIM)) == MAX_DIM


@pytest.mark.parametrize("text", ["0x8192", "8192x0", f"{2**31}x16"])
def test_shapes_refuse_sizes_out_of_range(text):
    with pytest.raises(ShapeError, match="N and K must be from 1"):
        parse_shapes(text)


@pytest.mark.parametrize("text", ["0", "1,-1", f"1,{2**31}", "1.5"])
def test_ms_refuse_values_out_of_range(text):
    with pytest.raises(ShapeError, match="--m"):
        parse_ms(text)


def test_plan_command_refuses_n_zero(capsys):
    from humming.cli import plan

    parser = argparse.ArgumentParser()
    plan.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--n", "0"])
    assert "argument --n: 0 is out of range" in capsys.readouterr().err
