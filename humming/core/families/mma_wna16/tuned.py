"""The WnA16 plans humming.gemm runs on the mma.sync layout's weights: a measured tuning entry of M's bucket
(``humming.core.tuning.entries``) forced onto the planner, else the rules (the stream / tile kernels, the register-A
small form from M 9 where the live GPU runs the profile's wgmma), and the register-A two-warpgroup (prefill) form
from its threshold, with the rules that move a tuned entry to stream-K or to a fitted token tile."""
from __future__ import annotations

import dataclasses
import logging
import math

from humming.core.families.mma_wna16.planner import STREAM_MAX_M, plan_wna16
from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
from humming.core.families.register_a import layout as rs_layout
from humming.core.families.register_a import prefill as rs_prefill
from humming.core.families.register_a.tiles import RegisterATiles
from humming.core.plan import Plan, Tiles
from humming.core.tuning import knobs
from humming.core.tuning.entries import layout_key, lookup, m_bucket, measured_reason
from humming.devices.current import runs_here
from humming.errors import ShapeError, UnsupportedOnDevice

log = logging.getLogger("humming.tuning")


def tuned_plan(caps, layout, m: int, act: str, scheme: str = "") -> Plan | None:
    """The planner's plan with the measured configuration of M's bucket forced, or None on a miss or when the
    stored configuration is not valid here any more (a changed profile, planner or hand-edited file)."""
    entry = lookup(caps, layout, layout.n, layout.k, m, scheme)
    if entry is None:
        return None
    try:
        tiles, splits, path = _forced(entry)
        if path == "stream" and m > STREAM_MAX_M:
            raise ShapeError(f"the stream path takes M <= {STREAM_MAX_M}")
        if path == RS_PATH and tiles.bn > 64:  # the two-warpgroup form below its default M (same weights)
            _two_warpgroup_padding_check(m, tiles.bm)
            bt = two_warpgroup_token_tile(m, tiles.bm, caps)
            plan = _rs_prefill_plan(caps, layout, m, act, scheme, bt, tiles.tail, tiles.streamk, lowest=1)
            plan = _streamk_where_rounds_fill_badly(caps, layout, m, act, scheme, plan, int(entry.get("m") or 0),
                                                    tiles.bm)
        elif path == RS_PATH:
            plan = _rs_small_plan(caps, layout, m, act, scheme, splits, tiles.stages, tiles.bm, tiles.fold,
                                  True if tiles.bulk else None,  # bulk=0 (or an entry older than it): the default
                                  tiles.cluster, tiles.occupancy, tiles.prefetch)
        else:
            plan = plan_wna16(caps, layout, m, act, scheme=scheme, tiles=tiles, splits=splits, path=path)
    except (ShapeError, UnsupportedOnDevice, KeyError, TypeError, ValueError) as exc:
        log.info("humming tuning: stored config for %s bucket %s from %s ignored: %s",
                 layout_key(layout), m_bucket(m), entry.get("origin"), exc)
        return None
    return dataclasses.replace(plan, reasons=plan.reasons + (measured_reason(entry, m_bucket(m)),))


def two_warpgroup_token_tile(m: int, bt: int, caps=None) -> int:
    """The token tile a two-warpgroup entry runs M with: its own (the planner then fits it to M), or, with the fitting
    off (the knob wgmma.fit_token_tile false), 128 instead of 256 where 128-token tiles hold fewer rows and 256-token ones would
    be under register_a.prefill.STREAMK_NARROW_BELOW tokens (the rule of its default plans from M 513 then). Measured on the H200 (W4A16 g128, scripts/ab_knobs.py, us, the 257-512
    entries with 256 / 128): 8192x8192 M=270 135.5 / 106.0, M=300 127.6 / 102.1, M=380 90.5 / 101.6, M=400 91.7 /
    111.0; 28672x8192 M=270 498.5 / 329.4, M=300 455.8 / 317.8, M=380 343.1 / 340.1, M=400 346.7 / 454.1."""
    from humming.core.families.register_a import planner as rs

    if rs.fit_on(caps):  # the planner fits the entry's tile to M (rs.fitted_token_tile): few padding rows either way
        return bt
    rows = bt * math.ceil(m / bt)
    if bt == 256 and 128 * math.ceil(m / 128) < rows and m / rows < rs_prefill.STREAMK_NARROW_BELOW:
        return 128
    return bt


def _streamk_where_rounds_fill_badly(caps, layout, m: int, act: str, scheme: str, plan: Plan,
                                     measured_m: int, entry_bt: int) -> Plan:
    """Rule (1) of the knob register_a.rounds_rules: a two-warpgroup entry without stream-K or tail whose whole tiles fill
    the last round of SMs badly at this M, where its tiles (``entry_bt`` tokens) did not at the M it was measured at
    (``measured_m``), runs stream-K over 256-token tiles (fitted to M) instead."""

    t, sms = plan.tiles, caps.limits.sms or 0
    channel_tiles = layout.n // rs_layout.BC
    if t.tail or t.streamk or not rs_prefill.rounds_rules_on(caps) or not rs_prefill.rounds_badly_filled(plan.grid[0] * plan.grid[1], sms):
        return plan
    if not measured_m or rs_prefill.rounds_badly_filled(math.ceil(measured_m / entry_bt) * channel_tiles, sms):
        return plan  # chosen where its tiles filled the rounds as badly: the measurement stands
    try:
        sk = _rs_prefill_plan(caps, layout, m, act, scheme, rs_prefill.STREAMK_BT, streamk=sms, lowest=1)
    except (ShapeError, UnsupportedOnDevice):
        return plan
    why = (f"stream-K over {sms} blocks with {sk.tiles.bm}-token tiles instead of the entry's {entry_bt}-token tiles: "
           f"{plan.grid[0] * plan.grid[1]} tiles of {t.bm} tokens would fill the last round of {sms} SMs badly at "
           f"M={m}, unlike at M={measured_m} where it was measured ({rs_prefill.ROUNDS_KNOB} false: the entry as stored)")
    return dataclasses.replace(sk, reasons=sk.reasons + (why,))


def _two_warpgroup_padding_check(m: int, bt: int) -> None:
    """A two-warpgroup entry (measured at M=128 for bucket 65-128) runs an M below 128 only where its one token tile
    of ``bt`` rows is at least three quarters tokens; below that the small form with a token tile fitted to M is
    faster. Measured on the H200 (28672x8192 W4A16 g128, scripts/ab_knobs.py, us, entry / small form):
    M=65 144.8 / 107.2, M=80 116.4 / 89.8, M=96 108.5 / 97.9, M=112 107.1 / 135.6, M=127 106.1 / 139.6."""
    from humming.core.families.register_a import planner as rs

    if m < rs.MIN_M and 4 * (bt * math.ceil(m / bt) - m) >= bt:
        raise ShapeError(f"the two-warpgroup entry's {bt}-token tile would be {bt - m % bt} rows of padding at M={m} "
                         "(a quarter or more): the small form's fitted tile runs it")


RS_PATH = "wgmma-rs"  # the register-A wgmma kernel; its small-M form (M 9-64) is a tuning candidate


_RS_SPLITS = (1, 2, 4, 8, 16)


_RS_STAGES = (4, 6, 8)


_RS_OCCUPANCY = (6, 7, 8)  # blocks per SM of the small form's occupancy option among the tuner's candidates


def _require_register_a_here(caps, m: int, lowest: int, form: str) -> None:
    """ShapeError / UnsupportedOnDevice unless the register-A form ``form`` may run M here: M >= ``lowest``, the
    wgmma kernels switched on, and the live GPU of the profile's target (a forced profile keeps the mma.sync kernels)."""
    from humming.core.families.register_a import planner as rs

    if m < lowest:
        raise ShapeError(f"the {form} register-A form takes M >= {lowest}, not {m}")
    if rs.min_m(caps) is None or not knobs.value("wgmma_wna16.enabled", caps):
        raise UnsupportedOnDevice("the register-A wgmma kernel is switched off (tuning knobs register_a.min_m: null "
                                  "or wgmma_wna16.enabled: false)")
    if not runs_here(caps):
        raise UnsupportedOnDevice(f"the live GPU is not {caps.name}'s own target (wgmma kernels run only there)")


def _rs_prefill_plan(caps, layout, m: int, act: str, scheme: str, bt: int, tail: int = 0, streamk: int = 0,
                     lowest: int | None = None) -> Plan:
    """The two-warpgroup register-A plan (128 channels per block, its producer warpgroup where declared) at an M
    below its default threshold, with a token tile of ``bt`` (and ``tail`` tiles split in K quarters, or ``streamk``
    persistent blocks): a tuning candidate from M 128 (``lowest``, default rs.MIN_M: a stored entry runs anywhere in
    its bucket), run on the same prepared weights as the small form."""
    from humming.core.families.register_a import planner as rs

    _require_register_a_here(caps, m, rs.MIN_M if lowest is None else lowest, "two-warpgroup")
    why = rs_layout.layout_refusal(layout) or rs_layout.default_refusal(layout)
    if why:
        raise UnsupportedOnDevice(f"the two-warpgroup register-A form does not take this layout: {why}")
    return rs.plan_wna16_wgmma_rs(caps, layout, m, act, scheme=scheme, bt=bt, small=False, tail=tail, streamk=streamk)


def _rs_small_plan(caps, layout, m: int, act: str, scheme: str, splits: int | None, stages: int | None,
                   bt: int | None = None, fold: int = 0, tma: bool | None = None, cluster: int = 0,
                   occupancy: int = 0, prefetch: int = 0) -> Plan:
    """The small-M register-A wgmma plan (runs on the mma.sync handle's prepared weights), or UnsupportedOnDevice /
    ShapeError: it needs M 9-64, a layout it decodes, the wgmma kernels enabled and the live GPU of the profile's
    target (a profile forced onto another GPU keeps the mma.sync kernels)."""
    from humming.core.families.register_a import planner as rs

    _require_register_a_here(caps, m, rs.SMALL_MIN_M, "small-M")
    return rs.plan_wna16_wgmma_rs(caps, layout, m, act, scheme=scheme, bt=bt, splits=splits, stages=stages, fold=fold,
                                  small=True, tma=tma, cluster=cluster, occupancy=occupancy, prefetch=prefetch)


def register_a_prefill_plan(caps, layout, m: int, act: str, scheme: str = "") -> Plan:
    """The plan of the handle that runs the two-warpgroup register-A form from its default M (the register_a family): a tuned
    entry of M's bucket that is that form (``bn`` = 128, e.g. with stream-K) on a hit, else the planner's rules.
    Entries of other kernels in the bucket (e.g. a tile kernel stored below the form's threshold) are not taken. The
    launch options (programmatic dependent launch) applied, as the handle launches it."""
    from humming.core.plan import launch_options

    tuned = tuned_plan(caps, layout, m, act, scheme)
    if tuned is not None and tuned.path == RS_PATH and tuned.tiles.bn == rs_layout.BC:
        return launch_options(caps, tuned)
    return launch_options(caps, rs_prefill.prefill_default(caps, layout, m, act, scheme))


def runs_register_a_prefill(caps, layout, m: int) -> bool:
    """True where humming.gemm runs M on the two-warpgroup register-A form (the register_a family):
    M from the form's threshold (register_a.min_m; below it, wide layers from register_a.wave_min_m:
    register_a.prefill.fills_a_wave), the wgmma kernels on, a declared wgmma k16 form for the activations and
    cp.async, the live GPU of the profile's target, a layout it takes."""
    from humming.core.common.wgmma import wgmma_k16_form
    from humming.core.families.register_a import planner as rs

    lowest = rs.min_m(caps)
    if lowest is not None and m < lowest and rs_prefill.fills_a_wave(caps, layout, m):
        lowest = m  # a wide layer below min_m (register_a.wave_min_m)
    if lowest is None or m < lowest or not caps.memory.cp_async or wgmma_k16_form(caps, layout.decode.act) is None:
        return False
    try:
        _require_register_a_here(caps, m, lowest, "two-warpgroup")
    except (ShapeError, UnsupportedOnDevice):
        return False
    return not rs_layout.layout_refusal(layout) and (rs.forced(caps) or not rs_layout.default_refusal(layout))


def runtime_plan(caps, layout, m: int, act: str, scheme: str = "") -> Plan:
    """The plan humming.gemm runs for M with the tuning files as they are (the register-A prefill handle's or
    choose_plan's); the launch options applied."""
    if runs_register_a_prefill(caps, layout, m):
        return register_a_prefill_plan(caps, layout, m, act, scheme)
    return choose_plan(caps, layout, m, act, scheme)


def choose_plan(caps, layout, m: int, act: str, scheme: str = "") -> Plan:
    """What the runtime should run for M: the tuned plan on a hit, else the planner's rules (the small-M register-A
    wgmma form where it applies and the live GPU runs the profile's wgmma, else plan_wna16)."""
    from humming.core.plan import launch_options

    tuned = tuned_plan(caps, layout, m, act, scheme)
    if tuned is not None:
        return launch_options(caps, tuned)
    from humming.core.families.register_a import planner as rs

    if m >= rs.SMALL_MIN_M and knobs.value("wgmma_wna16.enabled", caps):
        if runs_here(caps):
            p = rs.small_default(caps, layout, m, act, scheme)
            if p is not None:
                return launch_options(caps, p)
    return launch_options(caps, plan_wna16(caps, layout, m, act, scheme=scheme))


def _forced(entry: dict) -> tuple[Tiles, int, str]:
    """(tiles, splits, path) of a tuned entry; its tiles as the family of its path has them."""
    path = entry["path"] if entry["path"] in ("stream", RS_PATH) else "tile"
    cls = RegisterATiles if path == RS_PATH else MmaWnA16Tiles
    tiles = cls.from_fields(entry["tiles"], where=f"tuned entry {entry.get('key', '')}".rstrip())
    return tiles, int(entry["splits"]), path
