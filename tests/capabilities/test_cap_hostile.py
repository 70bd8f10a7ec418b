"""Hostile or broken profile files are refused quickly with a ProfileError naming the file, and messages
show bounded excerpts of values (the per-file cases with fixed messages are in broken_profiles/)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from humming.capabilities import Registry, load_profile_file
from humming.capabilities.excerpt import MAX_EXCERPT, excerpt
from humming.capabilities.loader import MAX_NODES, expanded_size, load_bounded
from humming.capabilities.yamlio import MAX_FILE_BYTES
from humming.cli import profile as profile_cli
from humming.errors import ProfileError

HEAD = "name: acme-hostile\nextends: nvidia-ampere\n"


def _write(directory: Path, name: str, data: str | bytes) -> Path:
    path = directory / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


def _bomb(levels: int = 9, width: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_oversized_file_is_refused_without_reading_it_all(tmp_path: Path):
    path = _write(tmp_path, "big.yaml", HEAD + "notes: [" + "x, " * (MAX_FILE_BYTES // 3) + "x]\n")
    with pytest.raises(ProfileError, match=rf"big.yaml: larger than {MAX_FILE_BYTES} bytes"):
        load_profile_file(path)


def test_not_utf8_is_a_named_error_from_the_registry(tmp_path: Path):
    _write(tmp_path, "latin1.yaml", HEAD.encode() + b"display_name: caf\xe9\n")
    with pytest.raises(ProfileError, match=r"latin1.yaml: line 3: not UTF-8 text \(byte 0xe9"):
        Registry(extra_dirs=[tmp_path])


@pytest.mark.parametrize("where", ["notes: &top [1]\n", "vendor_extensions: {x: {data: {y: 1}}}\n"])
def test_alias_bomb_is_refused_quickly_wherever_it_is(tmp_path: Path, where: str):
    text = HEAD + _bomb().replace("a0: &a0", "display_name: &a0", 1)
    path = _write(tmp_path, "bomb.yaml", text + where)
    start = time.perf_counter()
    with pytest.raises(ProfileError, match=rf"bomb.yaml: line \d+: this value expands to more than {MAX_NODES}"):
        load_profile_file(path)
    assert time.perf_counter() - start < 2.0


def test_alias_bomb_under_extension_data_fails_validate_not_info(tmp_path: Path, capsys: pytest.CaptureFixture):
    body = "  " + _bomb().replace("\n", "\n        ").rstrip()
    text = HEAD + "vendor_extensions:\n  x:\n    data:\n      " + body.strip() + "\n"
    path = _write(tmp_path, "bomb.yaml", text)
    start = time.perf_counter()
    assert profile_cli._validate([str(path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "bomb.yaml" in out and len(out) < 1000
    assert time.perf_counter() - start < 2.0


def test_moderate_sharing_through_aliases_still_loads():
    data = load_bounded("a: &a [1, 2, 3]\nb: *a\nc: {<<: &m {x: 1}, y: 2}\nd: {<<: *m}\n")
    assert data == {"a": [1, 2, 3], "b": [1, 2, 3], "c": {"x": 1, "y": 2}, "d": {"x": 1}}


def test_expanded_size_counts_each_use_of_an_anchor():
    import yaml

    node = yaml.compose("a: &a [1, 2]\nb: [*a, *a]\n", Loader=yaml.SafeLoader)
    # mapping + 2 keys + a (3 nodes) + b (1 + 2 * 3)
    assert expanded_size(node) == 1 + 2 + 3 + 7


@pytest.mark.parametrize("text", ["[" * 50_000 + "]" * 50_000, "a: " + "{b: " * 2000 + "1" + "}" * 2000,
                                  "a:\n" + "".join("  " * i + "- \n" for i in range(1, 200))])
def test_deep_nesting_is_a_named_error_not_a_recursion_error(tmp_path: Path, text: str):
    path = _write(tmp_path, "deep.yaml", text)
    with pytest.raises(ProfileError, match=r"deep.yaml: line \d+: nested deeper than"):
        load_profile_file(path)


def test_alias_cycle_is_refused():
    with pytest.raises(ProfileError, match="a cycle"):
        load_bounded("a: &a {b: *a}\n")


def test_messages_show_a_bounded_excerpt_of_a_large_value(tmp_path: Path):
    path = _write(tmp_path, "wide.yaml", HEAD + "notes: [[" + ", ".join(["word"] * 5_000) + "]]\n")
    with pytest.raises(ProfileError) as info:
        load_profile_file(path)
    message = str(info.value)
    assert "wide.yaml: notes[0]: expected a string, got list" in message
    assert len(message) < len(str(path)) + 100 + MAX_EXCERPT


def test_messages_show_a_bounded_excerpt_of_a_long_key(tmp_path: Path):
    path = _write(tmp_path, "key.yaml", HEAD + "? " + "k" * 100_000 + "\n: 1\n")
    with pytest.raises(ProfileError, match="unknown key") as info:
        load_profile_file(path)
    assert len(str(info.value)) < len(str(path)) + 600


def test_excerpt_is_bounded_for_recursive_deep_and_huge_values():
    loop: list = [1]
    loop.append(loop)
    deep: list = [0]
    for _ in range(10_000):
        deep = [deep] * 3
    for value in (loop, deep, "x" * 10**6, 10**5000, [10**5000], {"k" * 1000: "v" * 1000}):
        assert len(excerpt(value)) <= MAX_EXCERPT
