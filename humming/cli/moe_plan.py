"""The plan of `python -m humming plan --moe`: the MoE GEMM the registry chooses for T tokens, each sent to top-k of
E stacked [N, K] experts."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from humming.errors import ShapeError

if TYPE_CHECKING:
    from humming.core.plan import Plan


def moe_plan(args: argparse.Namespace) -> Plan:
    """The plan ``humming.core.registry.select`` makes for the MoE problem the arguments describe (``--tokens``
    defaulting to ``--m``, ``--form`` to indexed). ShapeError for a missing or impossible count."""
    from humming.core.problem import Problem, scheme_of
    from humming.core.registry import select
    from humming.devices.current import resolve_profile
    from humming.options import resolve as resolve_options

    if args.experts is None or args.top_k is None:
        raise ShapeError("--moe needs --experts E and --top-k (experts per token)")
    tokens = args.m if args.tokens is None else args.tokens
    if args.experts < 1 or tokens < 1 or not 1 <= args.top_k <= args.experts:
        raise ShapeError(f"--moe needs --experts >= 1, --tokens >= 1 and 1 <= --top-k <= --experts; got "
                         f"{args.experts} experts, {tokens} tokens, top-k {args.top_k}")
    caps = resolve_profile(args.profile)
    scheme = scheme_of(args.scheme)
    if args.group_size is not None:
        scheme = scheme.with_(group_size=args.group_size)
    problem = Problem(scheme, tokens, args.n, args.k, args.act, resolve_options(None), form=args.form or "indexed",
                      experts=args.experts, top_k=args.top_k, act_order=bool(args.act_order))
    return select(problem, caps).plan
