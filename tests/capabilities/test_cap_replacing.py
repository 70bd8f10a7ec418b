"""A profile named like a visible one (a built-in or an earlier HUMMING_PROFILE_PATH directory's) replaces it
only when its file says `replaces: NAME`; `profile validate` reports same-name siblings and same-name files."""
from __future__ import annotations

from pathlib import Path

import pytest

from humming.capabilities import Registry
from humming.capabilities.yamlio import builtin_profile_dir
from humming.cli import profile as profile_cli
from humming.errors import ProfileError

H200 = "name: nvidia-h200\nextends: nvidia-hopper\nmatch: {names: [H200]}\nlimits: {sms: 7}\n"
BUILTIN_H200 = builtin_profile_dir() / "nvidia" / "h200.yaml"


def _write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_path_profile_named_like_a_builtin_is_refused(tmp_path: Path):
    _write(tmp_path, "h200.yaml", H200)
    with pytest.raises(ProfileError, match=r"h200.yaml: name: profile 'nvidia-h200' is already defined by "
                                           r"device_profiles/nvidia/h200.yaml; .* add 'replaces: nvidia-h200'"):
        Registry(extra_dirs=[tmp_path])


def test_replaces_lets_a_path_profile_take_the_builtins_place(tmp_path: Path):
    path = _write(tmp_path, "h200.yaml", "replaces: nvidia-h200\n" + H200)
    caps = Registry(extra_dirs=[tmp_path]).get("nvidia-h200")
    assert caps.limits.sms == 7 and caps.source == str(path)


def test_a_later_directory_replaces_an_earlier_one_only_when_it_says_so(tmp_path: Path):
    _write(tmp_path / "a", "acme.yaml", "name: acme-one\nextends: nvidia-ampere\n")
    _write(tmp_path / "b", "acme.yaml", "name: acme-one\nextends: nvidia-ampere\nlimits: {sms: 3}\n")
    with pytest.raises(ProfileError, match=r"b/acme.yaml: name: profile 'acme-one' is already defined by .*a/acme"):
        Registry(extra_dirs=[tmp_path / "a", tmp_path / "b"])
    _write(tmp_path / "b", "acme.yaml", "name: acme-one\nreplaces: acme-one\nextends: nvidia-ampere\n"
                                        "limits: {sms: 3}\n")
    assert Registry(extra_dirs=[tmp_path / "a", tmp_path / "b"]).get("acme-one").limits.sms == 3


def test_replaces_must_name_the_profile_itself(tmp_path: Path):
    _write(tmp_path, "h200.yaml", "replaces: nvidia-h100\n" + H200)
    with pytest.raises(ProfileError, match=r"h200.yaml: replaces: names 'nvidia-h100', but this profile is "
                                           r"'nvidia-h200'"):
        Registry(extra_dirs=[tmp_path])


def test_replaces_with_nothing_to_replace_is_refused(tmp_path: Path):
    _write(tmp_path, "new.yaml", "name: acme-new\nreplaces: acme-new\nextends: nvidia-ampere\n")
    with pytest.raises(ProfileError, match=r"new.yaml: replaces: there is no other profile 'acme-new' to replace"):
        Registry(extra_dirs=[tmp_path])


def test_a_directory_below_another_on_the_path_is_read_once(tmp_path: Path):
    _write(tmp_path / "sub", "acme.yaml", "name: acme-sub\nextends: nvidia-ampere\n")
    assert "acme-sub" in Registry(extra_dirs=[tmp_path, tmp_path / "sub"]).names()


def test_validate_refuses_a_file_named_like_a_builtin(tmp_path: Path, capsys: pytest.CaptureFixture):
    path = _write(tmp_path, "h200.yaml", H200)
    assert profile_cli._validate([str(path)]) == 1
    assert "add 'replaces: nvidia-h200'" in capsys.readouterr().out
    path.write_text("replaces: nvidia-h200\n" + H200, encoding="utf-8")
    assert profile_cli._validate([str(path)]) == 0


def test_validate_reports_a_same_name_sibling(tmp_path: Path, capsys: pytest.CaptureFixture):
    one = _write(tmp_path, "one.yaml", "name: acme-twin\nextends: nvidia-ampere\n")
    _write(tmp_path, "two.yaml", "name: acme-twin\nextends: nvidia-ampere\nlimits: {sms: 2}\n")
    assert profile_cli._validate([str(one)]) == 1
    out = capsys.readouterr().out
    assert "one.yaml: name: duplicate profile name 'acme-twin': also in" in out and "two.yaml" in out


def test_validate_reports_same_name_files_given_together(tmp_path: Path, capsys: pytest.CaptureFixture):
    one = _write(tmp_path / "a", "x.yaml", "name: acme-pair\nextends: nvidia-ampere\n")
    two = _write(tmp_path / "b", "y.yaml", "name: acme-pair\nextends: nvidia-ampere\n")
    assert profile_cli._validate([str(one), str(two)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL  {two}: name: profile 'acme-pair' is also defined by {one}" in out
    assert profile_cli._validate([str(one), str(one)]) == 0  # the same file twice is not a clash


def test_validate_of_the_builtin_itself_is_fine(capsys: pytest.CaptureFixture):
    assert profile_cli._validate([str(BUILTIN_H200)]) == 0


def test_validate_of_an_identical_copy_of_a_builtin_is_fine(tmp_path: Path):
    copy = _write(tmp_path, "h200.yaml", BUILTIN_H200.read_text(encoding="utf-8"))
    assert profile_cli._validate([str(copy)]) == 0
