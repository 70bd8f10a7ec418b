"""Port by profile, run for real: the worked example of docs/porting.md (a made-up accelerator defined only by
YAML in a temporary HUMMING_PROFILE_PATH) is planned, compiled and run on this GPU against the reference. The
kernel is spelled for the example's target (sm_80, mma.sync m16n8k16) and compiled for the live GPU: an
emulation of that device on NVIDIA hardware."""
import re
from pathlib import Path

import pytest
import torch
import yaml

import humming
from humming.capabilities import reload_profiles

from .conftest import rel_error

pytestmark = pytest.mark.gpu

DOC = Path(__file__).resolve().parents[2] / "docs" / "porting.md"


@pytest.fixture
def example_profile(tmp_path, monkeypatch):
    body = re.search(r"<!-- worked-example-profile -->\s*```yaml\n(.*?)```", DOC.read_text(), flags=re.S).group(1)
    name = yaml.safe_load(body)["name"]
    (tmp_path / f"{name}.yaml").write_text(body)
    monkeypatch.setenv("HUMMING_PROFILE_PATH", str(tmp_path))
    reload_profiles()
    yield name
    monkeypatch.delenv("HUMMING_PROFILE_PATH")
    reload_profiles()


@pytest.mark.parametrize("scheme,dtype", [("w4a16", torch.float16), ("w8a16-zp", torch.bfloat16),
                                          ("w4a16-fp4", torch.float16)])
def test_yaml_only_device_runs_here(example_profile, scheme, dtype):
    n, k = 1024, 2048
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, scheme)
    for m in (1, 16, 64, 200):
        p = humming.plan(scheme, m, n, k, profile=example_profile, act="f16" if dtype == torch.float16 else "bf16")
        assert p.profile == example_profile and p.family == "mma_sync"
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw, profile=example_profile)
        torch.cuda.synchronize()
        assert not torch.isnan(out).any(), "output not fully written (NaN poison left)"
        err = rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32))
        assert err <= (1e-3 if dtype == torch.float16 else 5e-3), f"{scheme} M={m}: relative error {err:.2e}"
