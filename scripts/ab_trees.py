"""A/B of two source trees of humming on the GPU (a layout or generator change that a regex variant cannot express):
each tree's kernels timed in its own process, interleaved a b b a, best of its two runs kept; every output checked
against the reference. Same method as the benchmark (CUDA-graph replay over weight copies past the L2).

    git archive HEAD humming device_profiles | (mkdir -p ab_old && tar -x -C ab_old)   # the tree before the change
    python scripts/ab_trees.py --trees ab_old,. --cases w4a16:16:28672x8192,w8a16:128:8192x8192@nvidia-a100

A case is scheme:M:NxK, optionally @profile (kernels planned for that profile, run on this GPU).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from results import save_rows  # noqa: E402


def _worker(cases: list[str]) -> None:
    import torch
    from gemm_timing import error_and_time, weight_copies

    import humming

    rows = []
    for case in cases:
        spec = case.split("@")[0]
        scheme, m, shape = spec.split(":")
        n, k = map(int, shape.split("x"))
        torch.manual_seed(0)
        qws = weight_copies(scheme, n, k)
        x = torch.randn(int(m), k, device="cuda", dtype=torch.float16)
        err, us = error_and_time(x, qws)
        plan = humming.plan(scheme, int(m), n, k).kernel_name
        rows.append({"case": case, "us": us, "err": err, "kernel": plan})
        del qws
        torch.cuda.empty_cache()
    print("ROWS " + json.dumps(rows), flush=True)


def _run(tree: str, cases: list[str]) -> list[dict]:
    """One worker process per profile group (HUMMING_DEVICE_PROFILE) on ``tree``."""
    rows = []
    groups: dict[str, list[str]] = {}
    for c in cases:
        groups.setdefault(c.split("@")[1] if "@" in c else "", []).append(c)
    for profile, group in groups.items():
        env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
        if profile:
            env["HUMMING_DEVICE_PROFILE"] = profile
        res = subprocess.run([sys.executable, __file__, "--worker", ",".join(group)], env=env, capture_output=True,
                             text=True)
        line = [ln for ln in res.stdout.splitlines() if ln.startswith("ROWS ")]
        if res.returncode or not line:
            raise SystemExit(f"worker on {tree} failed:\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}")
        rows += json.loads(line[0][5:])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trees", default="ab_old,.")
    ap.add_argument("--cases", default="w4a16:16:28672x8192")
    ap.add_argument("--worker", default=None)
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = ap.parse_args()
    if args.worker:
        _worker(args.worker.split(","))
        return
    a, b = args.trees.split(",")
    cases = args.cases.split(",")
    best: dict[tuple[str, str], dict] = {}
    for tree in (a, b, b, a):
        for row in _run(tree, cases):
            key = (tree, row["case"])
            if key not in best or row["us"] < best[key]["us"]:
                best[key] = row
    rows = []
    print(f"| case | {a} us | {b} us | {b}/{a} | err {a} | err {b} |")
    print("|---|---|---|---|---|---|")
    for c in cases:
        ra, rb = best[(a, c)], best[(b, c)]
        rows.append({"case": c, a: ra, b: rb})
        print(f"| {c} | {ra['us']:.1f} | {rb['us']:.1f} | {rb['us'] / ra['us']:.3f} | {ra['err']:.1e} | {rb['err']:.1e} |")
    save_rows(args.out, "ab_trees.json", rows)


if __name__ == "__main__":
    main()
