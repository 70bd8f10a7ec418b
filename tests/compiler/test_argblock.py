"""The launch parameter block: cuLaunchKernel reads an array of pointers to each parameter's value."""
import ctypes

from humming.core.runtime.kernel import ArgBlock


def test_param_array_points_at_the_current_values():
    block = ArgBlock("ppif", [0x1000, 0, 7, 1.5])
    block.set(1, 0xDEADBEEF00)
    block.set(2, -3)
    array = (ctypes.c_void_p * 4).from_address(block.address)
    assert ctypes.c_void_p.from_address(array[0]).value == 0x1000
    assert ctypes.c_void_p.from_address(array[1]).value == 0xDEADBEEF00
    assert ctypes.c_int.from_address(array[2]).value == -3
    assert ctypes.c_float.from_address(array[3]).value == 1.5
    block.set(1, None)  # a missing optional tensor is a null pointer
    assert ctypes.c_void_p.from_address(array[1]).value is None
    assert block.values() == [0x1000, None, -3, 1.5]


def test_launch_rewrites_weight_pointers_only_when_other_tensors_come(monkeypatch):
    """A LaunchSpec (humming.core.runtime.launch) keeps the weight-side pointers of the last call and compares tensor
    objects by identity; the parameter block the driver reads must still hold the pointers of *this* call's tensors
    every time, through the hot path of a prepared weight (Layer.run) and LaunchSpec.launch itself."""
    import types

    import torch

    import humming
    from humming.core.runtime import launch as rt
    from humming.core.runtime.layer import Layer

    p = humming.plan("w4a16", 4, 128, 256, profile="nvidia-a100")
    seen = []

    class RecordingKernel:  # stands in for the loaded CUBIN: records what the driver would read at each launch
        built = 0

        def launcher(self, device, grid, threads, block, pdl=False, cluster=None):
            RecordingKernel.built += 1  # once per launch spec: the hot path reuses it
            return lambda stream: seen.append(list(block.values()))

    monkeypatch.setattr(rt, "current_stream", lambda device: 0)
    monkeypatch.setattr(rt, "workspaces", {})
    monkeypatch.setattr(rt, "retired_workspaces", [])
    w = [torch.zeros(8) for _ in range(5)]  # B S Z CS BIAS
    packed = types.SimpleNamespace(perm=None, qweight=w[0], scales=w[1], zeros=w[2], channel_scale=w[3], bias=w[4])
    spec = rt.LaunchSpec(p, "x", packed, RecordingKernel(), torch.device("cpu", 0), 1.0)
    ws, cnt = spec.keep
    assert spec.args.values()[7:14] == [ws.data_ptr(), cnt.data_ptr(), 4, 128, 256, 256 // p.grid[2], 1.0]
    layer = Layer.__new__(Layer)  # a prepared weight whose launch for M=4 is that spec
    layer.n, layer.k, layer.launches = 128, 256, {4: spec}
    ptr = lambda t: None if t is None else t.data_ptr()  # noqa: E731

    def check(x, out, weights, gscale=None):
        got = seen[-1]
        assert got[:7] == [ptr(x), *map(ptr, weights), ptr(out)]
        assert got[14] == ptr(gscale) and got[7:9] == [ws.data_ptr(), cnt.data_ptr()]

    def run(x, bias=None, gscale=None):
        out = layer.run(x, bias, gscale)
        assert out.shape == (4, 128) and out.dtype == x.dtype
        check(x, out, [*w[:4], w[4] if bias is None else bias], gscale)

    run(torch.zeros(4, 256))
    run(torch.zeros(4, 256))  # same weights: cached pointers still right, new x and out
    other_bias = torch.zeros(8)
    run(torch.zeros(4, 256), bias=other_bias)  # a per-call bias replaces slot 5
    x, out, gscale = torch.zeros(4, 256), torch.zeros(4, 128), torch.ones(1)
    spec.launch(x, out, (w[0], None, None, w[3], None), gscale)  # None -> null pointers
    check(x, out, [w[0], None, None, w[3], None], gscale)
    run(torch.zeros(4, 256), gscale=torch.ones(1))  # the weight's own tensors again
    assert len(seen) == 5 and RecordingKernel.built == 1
