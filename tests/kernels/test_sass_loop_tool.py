"""scripts/sass_loop.py finds the innermost loop around the tensor-core instructions in cuobjdump's SASS text and
counts its instructions (predicates dropped), and the highest vector register named (a synthetic listing)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import sass_loop  # noqa: E402

SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   S2R R2, SR_TID.X ;
        /*0020*/                   IADD3 R3, R2, 0x1, RZ ;
        /*0030*/                   LDS.128 R4, [R3] ;
        /*0040*/                   PRMT R8, R4, R5, R6 ;
        /*0050*/                   QGMMA.64x64x32.F32.E4M3.E4M3 R24, R8, gdesc[UR4], RZ, !UPT ;
        /*0060*/                   FFMA R40, R24, R9, R40 ;
        /*0070*/              @!P0 BRA 0x40 ;
        /*0080*/                   ISETP.GE.AND P1, PT, R3, R2, PT ;
        /*0090*/              @!P1 BRA 0x20 ;
        /*00a0*/                   EXIT ;
"""


def test_innermost_loop_around_the_mma():
    body, top = sass_loop.main_loop(SASS)
    assert [t.split()[0] for t in body] == ["PRMT", "QGMMA.64x64x32.F32.E4M3.E4M3", "FFMA", "BRA"]
    assert top == 40


def test_no_mma_is_an_error():
    with pytest.raises(SystemExit, match="tensor-core"):
        sass_loop.main_loop(SASS.replace("QGMMA", "NOP"))
