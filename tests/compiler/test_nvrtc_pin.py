"""A pinned NVRTC (HUMMING_NVRTC_PATH) that cannot be loaded is a SettingsError listing every item tried and why it
failed -- a missing path, an empty directory, a file that is not a library, a broken or non-NVRTC .so -- never a
silent fallback to the wheel's NVRTC. Needs no GPU: libraries are loaded, not run."""
from __future__ import annotations

import _ctypes
import os
import shutil

import pytest

from humming.core.compile import nvrtc
from humming.errors import HummingError, SettingsError

ENV = "HUMMING_NVRTC_PATH"


def _refused(monkeypatch, value: str, *expected: str) -> str:
    monkeypatch.setenv(ENV, value)
    with pytest.raises(SettingsError) as e:
        nvrtc.select_toolchain("sm_80")
    msg = str(e.value)
    assert isinstance(e.value, HummingError)
    assert f"{ENV}={value!r} pins NVRTC" in msg and "way out" in msg and "unset it" in msg
    for text in expected:
        assert text in msg, msg
    assert nvrtc.pin_problems()  # (diagnostics see the same reasons)
    nvrtc.available_toolchains()  # (listing what loads does not raise)
    return msg


def test_missing_directory(monkeypatch, tmp_path):
    missing = str(tmp_path / "no-such-dir")
    _refused(monkeypatch, missing, f"{missing}: does not exist")


def test_empty_directory(monkeypatch, tmp_path):
    _refused(monkeypatch, str(tmp_path), f"{tmp_path}: a directory with no libnvrtc.so* file in it")


def test_directory_without_nvrtc_but_other_files(monkeypatch, tmp_path):
    (tmp_path / "libcudart.so.12").write_bytes(b"not it")
    _refused(monkeypatch, str(tmp_path), "no libnvrtc.so* file")


def test_text_file(monkeypatch, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    _refused(monkeypatch, str(notes), str(notes))


def test_garbage_named_like_the_library_in_a_directory(monkeypatch, tmp_path):
    lib = tmp_path / "libnvrtc.so.12"
    lib.write_bytes(b"\x7fELF" + b"\0" * 60)
    _refused(monkeypatch, str(tmp_path), str(lib))


def test_a_library_that_is_not_nvrtc(monkeypatch, tmp_path):
    fake = tmp_path / "libnvrtc.so.12"
    shutil.copy(_ctypes.__file__, fake)  # a real shared object without NVRTC's entry points
    _refused(monkeypatch, str(fake), str(fake), "nvrtcVersion")


def test_a_truncated_nvrtc(monkeypatch, tmp_path):
    real = next((t.path for t in nvrtc.available_toolchains()), None)
    if real is None:
        pytest.skip("needs an installed NVRTC to truncate")
    broken = tmp_path / "libnvrtc.so.13"
    broken.write_bytes(open(real, "rb").read(8192))
    msg = _refused(monkeypatch, str(broken), str(broken))
    assert real in msg or not nvrtc.available_toolchains()  # names a library that does load


def test_one_bad_item_beside_a_good_one_is_still_refused(monkeypatch, tmp_path):
    good = next((t for t in nvrtc.available_toolchains()), None)
    if good is None:
        pytest.skip("needs an installed NVRTC")
    missing = str(tmp_path / "gone")
    msg = _refused(monkeypatch, os.pathsep.join([good.path, missing]), f"{missing}: does not exist")
    assert f"  - {good.path}" not in msg  # (only the failing item is listed as failing)


def test_a_good_pin_is_honoured(monkeypatch):
    found = nvrtc.available_toolchains()
    if not found:
        pytest.skip("needs an installed NVRTC")
    oldest = found[-1]
    monkeypatch.setenv(ENV, os.path.dirname(oldest.path))
    assert nvrtc.select_toolchain("sm_80").version == oldest.version
    assert nvrtc.pin_problems() == []
