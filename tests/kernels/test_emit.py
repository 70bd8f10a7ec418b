"""The structured emitter (humming.core.common.emit): slots filled once, checked against the template."""
import pytest

from humming.core.common.emit import Template, lines


def test_fill_defaults_and_indentation():
    t = Template("__global__ void k() {\n  ${body}\n  ${sync}();\n}\n", sync="__syncthreads")
    out = t.fill(body="int a = 1;\nint b = a;")
    assert out == "__global__ void k() {\n  int a = 1;\n  int b = a;\n  __syncthreads();\n}\n"
    assert t.fill(body="", sync="consumer_sync").endswith("  consumer_sync();\n}\n")
    assert t.with_defaults(sync="bar_sync").fill(body=None) == "__global__ void k() {\n  \n  bar_sync();\n}\n"


def test_inline_slot_keeps_value_lines_as_written():
    assert Template("x = ${a} + 1;").fill(a="f(\n1)") == "x = f(\n1) + 1;"


def test_errors_name_the_slot():
    t = Template("${a} ${b}")
    with pytest.raises(ValueError, match="unfilled: b"):
        t.fill(a="1")
    with pytest.raises(ValueError, match="no slot c"):
        t.fill(a="1", b="2", c="3")
    with pytest.raises(ValueError, match="does not have: z"):
        Template("${a}", z="1")


def test_lines_skips_empty_parts():
    assert lines("a;", "", None, "b;\n") == "a;\nb;\n"
