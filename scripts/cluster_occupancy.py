"""Occupancy of the kernels a humming.gemm call launches (GPU): blocks per SM, and for thread-block cluster launches
how many clusters of that shape the device can hold at once (cuOccupancyMaxActiveClusters) against what the grid
asks for. Run it under the environment whose plans you want to see (HUMMING_TUNE_FILE, HUMMING_CLUSTER_SPLITS, ...).

    HUMMING_CLUSTER_SPLITS=4 python scripts/cluster_occupancy.py --scheme w4a16 --ms 1,16 --shapes 8192x8192
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import humming  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from ab_env import prepared_handles  # noqa: E402


def occupancy(spec, device: int) -> dict:
    """Blocks per SM of the spec's kernel, and the most clusters of its shape resident at once (None: no cluster)."""
    from cuda.bindings import driver

    fn = spec.kernel._function(device)
    smem = spec.kernel.smem_bytes
    err, blocks = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, spec.threads, smem)
    row = {"kernel": spec.kernel.name, "grid": list(spec.grid), "threads": spec.threads, "smem": smem,
           "blocks_per_sm": blocks if err == driver.CUresult.CUDA_SUCCESS else f"error {err}"}
    if spec.cluster:
        cfg = driver.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = spec.grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = spec.threads, 1, 1
        cfg.sharedMemBytes = smem
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = spec.cluster
        cfg.attrs = [attr]
        cfg.numAttrs = 1
        err, clusters = driver.cuOccupancyMaxActiveClusters(fn, cfg)
        size = spec.cluster[0] * spec.cluster[1] * spec.cluster[2]
        grid = spec.grid[0] * spec.grid[1] * spec.grid[2]
        row.update(cluster=list(spec.cluster), clusters_in_grid=grid // size,
                   max_active_clusters=clusters if err == driver.CUresult.CUDA_SUCCESS else f"error {err}")
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scheme", default="w4a16")
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--shapes", default="8192x8192")
    args = ap.parse_args()
    device = torch.cuda.current_device()
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, args.scheme)
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            humming.gemm(x, qw)
            torch.cuda.synchronize()
            specs = [prep.launches[m] for prep in prepared_handles(qw) if m in prep.launches]  # (the handle of M)
            if not specs:
                raise SystemExit(f"{shape} M={m}: no prepared handle launched this M")
            spec = specs[-1]
            print(f"{shape} M={m}: {spec.plan.summary()}\n    {occupancy(spec, device)}", flush=True)


if __name__ == "__main__":
    main()
