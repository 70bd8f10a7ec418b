"""A/B on the GPU: one scheme's `humming.gemm` under several values of a tuning knob (humming.core.tuning.knobs) or of
a call option (humming.GemmOptions), against cuBLAS fp16 in the same rounds. One CUDA graph per setting (and one of
cuBLAS) over weight copies past the L2, captured after the setting's plans are made; then ``--rounds`` rounds (rounded
up to a whole balanced design, humming.tuner.balanced_orders) that replay every graph in orders giving each graph
every position and predecessor equally often (the GPU's clock follows its recent load: a fixed order favours one
position), the median per setting. Every setting's output is checked against the reference (relative error printed)
and the kernel that ran recorded (``*_ran``). Prints one line per (shape, M) with the median and the rounds' min-max,
and writes JSON (with the GPU's name) to OUT/ab_<knob or option>_<scheme>.json.

    python scripts/ab_knobs.py --knob register_a8.chain --values 128,64 --scheme w4a8-fp8 \
        --ms 512,1024,4096 [--shapes 8192x8192,28672x8192,4096x14336] [--out DIR]
    python scripts/ab_knobs.py --option fast_accum --values false,true --scheme w8a8-fp8 --ms 128,1024
    python scripts/ab_knobs.py --knob register_a.min_m+register_a.any_group --values 128+true,default

Values are comma-separated settings, each parsed as JSON (null, true, 128; text that is not JSON stays a string, e.g.
prmt); several knobs (or options) at once are joined by '+', and so are their values; ``default`` leaves a knob at its
value from the tuning data (an option at its GemmOptions default).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import humming  # noqa: E402
from humming import api  # noqa: E402
from humming.core.tuning import knobs  # noqa: E402
from humming.errors import ProfileError  # noqa: E402
from humming.tuner import copies_for, graph_timer, rotated_samples  # noqa: E402

DEFAULT = "default"


def prepared_layers(qw) -> list:
    """The runtime layers (humming.core.runtime.layer.Layer) ``qw`` has been prepared as (one per dtype, device,
    profile and options)."""
    return [api._registry[h] for h in qw.__dict__.get("_humming_prepared", {}).values() if isinstance(h, int) and h >= 0]


def forget_plans(qws) -> None:
    """Drop every prepared layer's forced plans and launch specs, so that the next call plans under the knobs in force
    then (the packed weights stay)."""
    for qw in qws:
        for lay in prepared_layers(qw):
            lay.plans.clear()
            lay.launches.clear()


def parse_value(text: str):
    """A setting's value: JSON (null, true, 128, 0.5), else the text itself (e.g. prmt)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def settings_of(names: list[str], values: str) -> list[tuple[str, dict]]:
    """(label, {name: value}) per comma-separated setting; ``default`` (for one name or the whole setting) leaves the
    name out."""
    out = []
    for label in values.split(","):
        parts = [DEFAULT] * len(names) if label == DEFAULT else label.split("+")
        if len(parts) != len(names):
            raise SystemExit(f"--values {label!r}: give one value per name of {'+'.join(names)} (joined by '+')")
        out.append((label, {n: parse_value(p) for n, p in zip(names, parts) if p != DEFAULT}))
    return out


def check_settings(kind: str, settings: list[tuple[str, dict]]) -> None:
    """Refuse unknown names and invalid values before any GPU work."""
    for label, values in settings:
        try:
            if kind == "knob":
                with knobs.override(values):
                    pass
            else:
                humming.GemmOptions(**values)
        except (ProfileError, TypeError, ValueError) as exc:
            raise SystemExit(f"--values {label}: {exc}") from None


@contextlib.contextmanager
def applied(kind: str, values: dict):
    """While the block runs: the knob overrides in force (yields None), or the GemmOptions of the setting."""
    if kind == "knob":
        with knobs.override(values):
            yield None
    else:
        yield humming.GemmOptions(**values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--knob", help="a tuning knob (humming.core.tuning.knobs.KNOBS), several joined by '+'")
    what.add_argument("--option", help="a humming.GemmOptions field (fast_accum, w4a8_widen, act_widen), several "
                                       "joined by '+'")
    ap.add_argument("--values", required=True, help="comma-separated settings, JSON values; 'default' for the default")
    ap.add_argument("--scheme", default="w4a8-fp8", help="a scheme name; NAME:channel for its per-channel form")
    ap.add_argument("--ms", default="512,1024,4096")
    ap.add_argument("--shapes", default="8192x8192,28672x8192,4096x14336")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--rounds", type=int, default=8, help="rounds over all settings in balanced orders (rounded up to a whole design)")
    ap.add_argument("--reps", type=int, default=5, help="timed graph replays per visit (their median is one sample)")
    args = ap.parse_args()
    kind = "knob" if args.knob else "option"
    what = args.knob or args.option
    settings = settings_of(what.split("+"), args.values)
    check_settings(kind, settings)
    base_name, _, form = args.scheme.partition(":")
    scheme = humming.schemes.get(base_name)
    if form == "channel":
        scheme = scheme.with_(granularity="channel", group_size=None)
    elif form:
        raise SystemExit(f"--scheme {args.scheme}: only NAME:channel is understood")
    rows = []
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        qws = [humming.quantize(torch.randn(n, k, device="cuda") * 0.05, scheme)
               for _ in range(copies_for(n * k // 2))]
        ws = [torch.randn(n, k, device="cuda", dtype=torch.float16) for _ in range(copies_for(n * k * 2))]
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            ref = humming.reference_gemm(x, qws[0], out_dtype=torch.float32).double()
            row = {"n": n, "k": k, "m": m}
            # one graph per setting (the kernels are fixed at capture), then rounds that visit every graph in
            # balanced orders: the GPU's clock follows its recent load, so a fixed order favours whichever setting
            # runs first, a fixed predecessor one setting too
            timers = {"cublas": graph_timer([lambda w=w, x=x: torch.matmul(x, w.t()) for w in ws], args.reps)}
            for label, values in settings:
                forget_plans(qws)
                with applied(kind, values) as opts:
                    out = humming.gemm(x, qws[0], options=opts).double()
                    row[f"{label}_err"] = float((out - ref).norm() / ref.norm())
                    timers[label] = graph_timer([lambda qw=qw, x=x, o=opts: humming.gemm(x, qw, options=o)
                                                 for qw in qws], args.reps)
                    row[f"{label}_plan"] = humming.plan(scheme, m, n, k, options=opts).summary()
                    lay = api._registry[api.prepared(qws[0], x.dtype, x.device, options=opts)]
                    row[f"{label}_ran"] = [lay.launches[m].plan.kernel_name] if m in lay.launches else []
            for name, samples in zip(timers, rotated_samples(list(timers.values()), args.rounds)):
                key = "cublas_us" if name == "cublas" else f"{name}_us"
                row[key] = statistics.median(samples)
                row[key.replace("_us", "_rounds_us")] = samples
            del timers
            forget_plans(qws)
            rows.append(row)
            cells = ", ".join(f"{what}={v}: {row[f'{v}_us']:.1f} us ({row['cublas_us'] / row[f'{v}_us']:.2f}x, "
                              f"{min(row[f'{v}_rounds_us']):.1f}-{max(row[f'{v}_rounds_us']):.1f}, "
                              f"err {row[f'{v}_err']:.1e})" for v, _ in settings)
            print(f"{args.scheme} {n}x{k} M={m}: cuBLAS fp16 {row['cublas_us']:.1f} us; {cells}", flush=True)
        del qws, ws
        torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    name = f"ab_{what.lower().replace('+', '_').replace('.', '_')}_{args.scheme.replace(':', '_')}.json"
    with open(os.path.join(args.out, name), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), kind: what, "values": args.values, "rows": rows}, f,
                  indent=1)
    print("wrote", os.path.join(args.out, name))


if __name__ == "__main__":
    main()
