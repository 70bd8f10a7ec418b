"""The two-warpgroup register-A form's default plan (no tuned entry): stream-K over one persistent block per SM
where its rules say it pays, one more (fitted) token tile where that fills the rounds of SMs better."""
from __future__ import annotations

import math
from dataclasses import replace

from humming.core.families.register_a.layout import BC
from humming.core.families.register_a.planner import WIDE_BT_UNIT, WIDE_MIN_BT, fit_on, plan_wna16_wgmma_rs
from humming.core.plan import Plan
from humming.core.tuning import knobs
from humming.errors import ShapeError, UnsupportedOnDevice

STREAMK_KNOB = "register_a.streamk"  # false: the two-warpgroup form's default plans never take stream-K
WAVE_MIN_M_KNOB = "register_a.wave_min_m"  # below register_a.min_m, from this M: the form where its tiles fill a wave

# Below register_a.min_m the small form runs by default; from register_a.wave_min_m the two-warpgroup form takes the
# layers whose 256-token tiles alone number at least one per SM (up to M 256: N >= 128 x SMs). Its plans there are the
# H200's tuned winners of the 129-256 and 257-512 buckets on 28672x8192 (256 x 128 tiles, stream-K over 132 blocks:
# 175.6 us at M=256 against the small form's 473.4 when measured), and on the H100 the small form ran 28672x8192 M=256
# in 235 us against cuBLAS fp16's 209. Narrower layers keep the small form, whose split-K fills the SMs
# (H100: 4096x14336 M=256 53.4 us against cuBLAS's 58.5).


# The default plan takes stream-K (one persistent block per SM) where the 256-token tiles give each SM at least
# STREAMK_MIN_TILES_PER_SM tiles, or fill the last round of tiles badly (at least STREAMK_MIN_SPLIT_TILES_PER_SM
# tiles per SM, the rounds of whole tiles filled below STREAMK_MAX_FILL). Measured on the H200 (scripts/ab_knobs.py in rotated rounds, W4A16 g128, us, without -> with stream-K): tiles per SM (fill) 5.1-27 on
# 28672x8192 M 768-8192: 583 -> 504, 754 -> 708, 1523 -> 1447, 3145 -> 2944, 6081 -> 5804; 3.9-15.5 on 8192x8192
# M 2048-8192: 439 -> 428, 901 -> 880, 1767 -> 1713; 3.9-7.8 on 4096x14336 M 4096-8192: 778 -> 745, 1557 -> 1474;
# badly filled rounds: 8192x8192 M768 (1.45 a SM, 73%) 196 -> 155, 4096x14336 M768 (0.73, 73%) 153 -> 139. Slower
# where whole tiles fill the rounds: 8192x8192 M1024 (1.94, 97%) 209 -> 214, 4096x14336 M1024 (0.97, 97%) 178 -> 191;
# even at 4096x14336 M2048 (1.94, 97%) 380 -> 372.
STREAMK_MIN_TILES_PER_SM = 3.0


STREAMK_MIN_SPLIT_TILES_PER_SM = 0.7  # fewer tiles than this per SM: not measured (stream-K would split every tile)


STREAMK_MAX_FILL = 0.85


STREAMK_BT = 256


# stream-K with 128-token tiles where 256-token tiles would carry mostly padding rows: M just above a multiple of 256
# (M / (M rounded up to 256) below STREAMK_NARROW_BELOW). Measured on the H200 (python -m humming tune
# --only streamk, us, 256 -> 128 tokens): M=513 (67% of 768 rows used) 8192x8192 175.0 -> 160.2, 28672x8192 606.8 ->
# 551.7, 4096x14336 141.9 -> 139.8; M=600 (78%) 144.7 -> 150.7, 468.1 -> 484.9, 132.2 -> 131.0; M=1100 (86%) 253.2 ->
# 259.7, 853.1 -> 954.9, 230.7 -> 228.0
STREAMK_NARROW_BELOW = 0.7


ROUNDS_KNOB = "register_a.rounds_rules"  # false: neither rule below


# Where whole tiles fill their last round of SMs badly (the stream-K split condition above), two rules of the
# two-warpgroup form: (1) a tuned entry without stream-K or tail, measured at an M whose tiles filled the SMs, runs
# this M with stream-K over 256-token tiles (fitted) instead (tuning.tuned_plan); (2) the default plan from M 513 takes
# one more token tile, fitted smaller, where those tiles fill their rounds to ROUNDS_MIN_FILL, instead of stream-K.
# Measured on the H200 (W4A16 g128, scripts/ab_knobs.py, us): (1) 4096x14336, the 257-512 entry (128-token
# tiles) / stream-K over 256-token tiles: M=270 (96 tiles, 73% of one round) 83.1 / 68.6, M=300 84.7 / 71.0, M=380
# 93.1 / 82.0; at M 450 / 512 (128 tiles, 97%) the entry 96.1 / 100.3 against 101.8 / 110.2. (2) 8192x8192, stream-K
# over 3 tiles of 208 / 4 plain tiles of 160: M=600 148.8 / 132.0, M=640 162.8 / 135.3
ROUNDS_MIN_FILL = 0.9


def fills_a_wave(caps, layout, m: int) -> bool:
    """True where, below register_a.min_m, the two-warpgroup form takes M (the rule above): M >= the knob
    register_a.wave_min_m and at least one 256-token tile per SM."""
    lowest = knobs.value(WAVE_MIN_M_KNOB, caps)
    sms = caps.limits.sms or 0
    return lowest is not None and m >= lowest and sms > 0 and math.ceil(m / STREAMK_BT) * (layout.n // BC) >= sms


def rounds_rules_on(caps=None) -> bool:
    return bool(knobs.value(ROUNDS_KNOB, caps))


def rounds_badly_filled(tiles: int, sms: int) -> bool:
    """``tiles`` whole tiles on ``sms`` SMs at one block per SM fill their last round badly: the stream-K split
    condition (STREAMK_MIN_SPLIT_TILES_PER_SM..STREAMK_MIN_TILES_PER_SM a SM, rounds under STREAMK_MAX_FILL full)."""
    if not sms:
        return False
    per_sm = tiles / sms
    return STREAMK_MIN_SPLIT_TILES_PER_SM <= per_sm < STREAMK_MIN_TILES_PER_SM and per_sm / math.ceil(per_sm) < STREAMK_MAX_FILL


def finer_token_tile(caps, layout, m: int) -> tuple[int, str]:
    """Rule (2): (token tile, why) of one more token tile than 256-token tiles need, fitted to M, where the 256-token
    tiles fill their rounds badly and these fill them to ROUNDS_MIN_FILL; (0, "") otherwise."""
    sms = caps.limits.sms or 0
    channel_tiles = layout.n // BC
    count = math.ceil(m / STREAMK_BT)
    if not rounds_rules_on(caps) or not rounds_badly_filled(count * channel_tiles, sms):
        return 0, ""
    bt = WIDE_BT_UNIT * math.ceil(math.ceil(m / (count + 1)) / WIDE_BT_UNIT)
    tiles = math.ceil(m / bt) * channel_tiles
    fill = tiles / (math.ceil(tiles / sms) * sms)
    if bt < WIDE_MIN_BT or fill < ROUNDS_MIN_FILL:
        return 0, ""
    return bt, (f"{math.ceil(m / bt)} token tiles of {bt} ({tiles} tiles: rounds {fill:.0%} full) instead of stream-K over "
                f"{count} of {STREAMK_BT} ({count * channel_tiles} tiles fill their rounds badly; {ROUNDS_KNOB} false: off)")


def streamk_default(caps, layout, m: int) -> tuple[int, int, str]:
    """(persistent blocks, token tile, why) of the two-warpgroup form's default plan at M: one block per SM where the
    rule above says stream-K pays, else (0, 0, why not)."""
    sms = caps.limits.sms or 0
    if not sms:
        return 0, 0, "stream-K not planned: the profile declares no SM count"
    if not knobs.value(STREAMK_KNOB, caps):
        return 0, 0, f"stream-K off ({STREAMK_KNOB} false)"
    tiles = math.ceil(m / STREAMK_BT) * (layout.n // BC)
    per_sm = tiles / sms
    fill = per_sm / math.ceil(per_sm)
    words = f"{tiles} tiles of {STREAMK_BT} tokens on {sms} SMs: {per_sm:.2f} a SM, rounds of whole tiles {fill:.0%} full"
    if per_sm >= STREAMK_MIN_TILES_PER_SM:
        why = f"stream-K by default ({words}; from {STREAMK_MIN_TILES_PER_SM:g} a SM persistent blocks pay)"
    elif per_sm >= STREAMK_MIN_SPLIT_TILES_PER_SM and fill < STREAMK_MAX_FILL:
        why = f"stream-K by default ({words}: the split left-over tiles fill the last round)"
    else:
        return 0, 0, f"no stream-K ({words})"
    used = m / (math.ceil(m / STREAMK_BT) * STREAMK_BT)
    if used < STREAMK_NARROW_BELOW and not fit_on(caps):  # fitted, the 256-token tiles hold few padding rows
        return sms, 128, why + f"; tiles of 128 tokens: {used:.0%} of the 256-token tiles' rows would be tokens"
    return sms, STREAMK_BT, why


def prefill_default(caps, layout, m: int, act: str, scheme: str = "") -> Plan:
    """The two-warpgroup form's plan by its rules (no tuning entry): stream-K where streamk_default says so and the
    profile takes it, else the plain form."""
    finer, finer_why = finer_token_tile(caps, layout, m)
    if finer:
        p = plan_wna16_wgmma_rs(caps, layout, m, act, scheme=scheme, bt=finer, small=False)
        return replace(p, reasons=p.reasons + (finer_why,))
    blocks, bt, why = streamk_default(caps, layout, m)
    if blocks:
        try:
            p = plan_wna16_wgmma_rs(caps, layout, m, act, scheme=scheme, bt=bt, small=False, streamk=blocks)
            return replace(p, reasons=p.reasons + (why + f" ({STREAMK_KNOB} false: off)",))
        except (ShapeError, UnsupportedOnDevice) as exc:
            why = f"no stream-K: {exc}"
    p = plan_wna16_wgmma_rs(caps, layout, m, act, scheme=scheme, small=False)
    return replace(p, reasons=p.reasons + (why,))
