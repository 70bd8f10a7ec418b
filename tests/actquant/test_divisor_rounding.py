"""The activation quantizers divide a row (or group) by one scale with a reciprocal and one FMA correction
(``aq_divide_fast`` in humming.core.actquant.generator) instead of a division per element. Markstein's theorem says the result
is the IEEE quotient while the divisor and its reciprocal are normal; checked here with exact rational arithmetic on
the kernels' own sequence (r = RN(1/d), q = RN(x r), e = RN(x - q d) exact, RN(q + e r)), including divisors with
all-ones significands and the scales the per-token FP8 quantizer makes (amax / 448)."""
import math
import random
from fractions import Fraction as F

from humming.core.actquant.generator import AQ_DIVISOR


def rn32(v: F) -> F:
    """v rounded to the nearest binary32 (ties to even); normal range."""
    if v == 0:
        return F(0)
    sign, v = (-1 if v < 0 else 1), abs(v)
    e = math.floor(math.log2(v.numerator) - math.log2(v.denominator))
    while F(2) ** e > v:
        e -= 1
    while F(2) ** (e + 1) <= v:
        e += 1
    return sign * round(v / F(2) ** (e - 23)) * F(2) ** (e - 23)


def test_kernel_text_is_the_checked_sequence():
    assert "const float q = mul_rn(x, v.r);" in AQ_DIVISOR
    assert "const float e = -fma_rn(q, v.d, -x);" in AQ_DIVISOR and "return fma_rn(e, v.r, q);" in AQ_DIVISOR
    assert "v.r = v.fast ? rcp_rn(d) : 0.0f;" in AQ_DIVISOR and "e >= 2u && e <= 253u" in AQ_DIVISOR


def test_signed_zero_keeps_its_sign():
    """x = -0: q = -0 and e = -(q d + 0) = -0 (with e = fma(-q, d, x) it would be +0 and q + e r = +0: the GPU run of
    2026-12-01 caught that as code 0x00 instead of 0x80); IEEE: -0 + -0 = -0, +0 + -0 = +0."""
    import numpy as np
    for x in (np.float32(-0.0), np.float32(0.0)):
        d = np.float32(3.0e-10)
        r = np.float32(1) / d
        q = x * r
        e = -(q * d + (-x))
        got = e * r + q
        assert np.signbit(got) == np.signbit(x)


def test_reciprocal_and_one_correction_round_as_division():
    rnd = random.Random(3)
    for i in range(4000):
        kind = i % 4
        if kind == 0:
            d = rn32(F(rnd.uniform(1e-9, 1e3)))
        elif kind == 1:  # all-ones significands
            d = F(2**24 - 1) * F(2) ** rnd.randint(-60, 10)
        elif kind == 2:
            d = F(rnd.randint(2**23, 2**24 - 1)) * F(2) ** rnd.randint(-40, 0)
        else:  # per-token FP8 scales of f16 rows
            d = rn32(F(rnd.randint(1, 65504)) / 448)
        if kind == 3:
            x = F(rnd.randint(1, 2**11)) * F(2) ** rnd.randint(-24, 5)
        else:
            x = F(rnd.randint(2**23, 2**24 - 1)) * F(2) ** rnd.randint(-30, 10)
        x *= rnd.choice((1, -1))
        r = rn32(1 / d)
        q = rn32(x * r)
        e = rn32(x - q * d)
        assert rn32(q + e * r) == rn32(x / d), (x, d)
