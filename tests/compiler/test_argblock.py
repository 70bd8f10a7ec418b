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
    """api._launch keeps the weight-side pointers of the last call and compares tensor objects by identity; the
    parameter block the driver reads must still hold the pointers of *this* call's tensors every time."""
    import torch

    import humming
    from humming import api
    from humming.core.runtime.kernel import ArgBlock

    p = humming.plan("w4a16", 4, 128, 256, profile="nvidia-a100")
    seen = []

    class RecordingKernel:  # stands in for the loaded CUBIN: records what the driver would read at each launch
        built = 0

        def launcher(self, device, grid, threads, block, pdl=False, cluster=None):
            RecordingKernel.built += 1  # once per launch spec: the hot path reuses it
            return lambda stream: seen.append(list(block.values()))

    values = [0] * 7 + [0x7000, 0x7100, 4, 128, 256, 256, 1.0, 0]
    spec = api._LaunchSpec(p, RecordingKernel(), ArgBlock(api._PARAM_KINDS, values))
    prep = api._Prepared(packed=None, caps=None, plans={4: p}, launches={4: spec})
    with api._lock:
        api._registry.append(prep)
        handle = len(api._registry) - 1
    monkeypatch.setattr(api, "_current_stream", lambda device: 0)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    w = [torch.zeros(8) for _ in range(5)]

    def launch(x, ws, gscale=None):
        out = api._launch(handle, x, *ws, gscale)
        ptr = lambda t: None if t is None else t.data_ptr()  # noqa: E731
        expect = [ptr(x), *map(ptr, ws), ptr(out)]
        got = seen[-1]
        assert got[:7] == expect and got[14] == ptr(gscale) and got[7:9] == [0x7000, 0x7100]

    launch(torch.zeros(4, 256), w)
    launch(torch.zeros(4, 256), w)  # same weights: cached pointers still right, new x and out
    other_bias = torch.zeros(8)
    launch(torch.zeros(4, 256), [*w[:4], other_bias])  # a per-call bias replaces slot 5
    launch(torch.zeros(4, 256), [w[0], None, None, w[3], None], gscale=torch.ones(1))  # None -> null pointers
    launch(torch.zeros(4, 256), w)
    assert len(seen) == 5 and RecordingKernel.built == 1
