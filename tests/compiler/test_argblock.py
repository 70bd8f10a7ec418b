"""The launch parameter block: cuLaunchKernel reads an array of pointers to each parameter's value."""
import ctypes

from humming.core.runtime import ArgBlock


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
