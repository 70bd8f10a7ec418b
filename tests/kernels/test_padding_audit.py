"""CPU: scripts/padding_audit.py lists the token-tile padding of the planned kernels (the M ranges of each tile, the M
under the asked share of tokens): the fitted tiles of the small form (M 65-128) and of the two-warpgroup form (from M
129) hold at least 80% tokens on 8192x8192 up to M 300."""
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "padding_audit.py")


def test_padding_audit_lists_tiles_and_padded_m():
    out = subprocess.run([sys.executable, SCRIPT, "--shapes", "8192x8192", "--ms", "65-300", "--below", "0.8"],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    assert "w4a16 8192x8192:" in out and "token tile 80 x 64 channels: M 65-80" in out, out
    assert "token tile 96 x 64 channels: M 81-96" in out, out
    assert "token tile 144 x 128 channels: M 257-288" in out, out  # two 256-token tiles fitted to M
    listed = [int(line.split("M=")[1].split(":")[0]) for line in out.splitlines() if line.strip().startswith("M=")]
    assert not listed and "0 of 236 M under 80% tokens" in out, out
