"""A profile path that is not a regular file (a FIFO, a device, a directory) is refused with a ProfileError naming
it, at once: reading a FIFO would wait for a writer forever. Every case runs with a deadline so that a regression
fails instead of hanging the suite."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from humming.capabilities import Registry, load_profile_file
from humming.errors import ProfileError

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
DEADLINE_S = 20
PROFILE = "name: acme-special\nextends: nvidia-ampere\n"


def _within_deadline(fn):
    """fn()'s exception (or None), failing the test if fn does not return within DEADLINE_S."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(DEADLINE_S)
    assert outcome, f"still blocked after {DEADLINE_S} s"
    return outcome[0]


def _fifo(directory: Path, name: str) -> Path:
    path = directory / name
    os.mkfifo(path)
    return path


def test_a_fifo_given_to_load_profile_file_is_refused(tmp_path: Path):
    path = _fifo(tmp_path, "pipe.yaml")
    exc = _within_deadline(lambda: load_profile_file(path))
    assert isinstance(exc, ProfileError) and "pipe.yaml: a FIFO (named pipe), not a profile file" in str(exc)


def test_a_fifo_in_a_profile_path_directory_is_refused_not_skipped(tmp_path: Path):
    (tmp_path / "good.yaml").write_text(PROFILE, encoding="utf-8")
    _fifo(tmp_path, "pipe.yaml")
    exc = _within_deadline(lambda: Registry(extra_dirs=[tmp_path]))
    assert isinstance(exc, ProfileError) and "pipe.yaml: a FIFO" in str(exc)


def test_a_fifo_named_like_the_target_rules_is_refused(tmp_path: Path):
    _fifo(tmp_path, "_targets.yaml")
    exc = _within_deadline(lambda: Registry(extra_dirs=[tmp_path]))
    assert isinstance(exc, ProfileError) and "_targets.yaml: a FIFO" in str(exc)


def test_a_fifo_sibling_does_not_block_validating_its_neighbour(tmp_path: Path):
    path = tmp_path / "good.yaml"
    path.write_text(PROFILE, encoding="utf-8")
    _fifo(tmp_path, "pipe.yaml")
    result: list = []
    assert _within_deadline(lambda: result.append(load_profile_file(path))) is None
    assert result[0].name == "acme-special"


def test_a_directory_is_refused(tmp_path: Path):
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    with pytest.raises(ProfileError, match=r"folder.yaml: a directory, not a profile file"):
        load_profile_file(folder)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
def test_a_device_file_is_refused(device: str):
    with pytest.raises(ProfileError, match=rf"{device}: a character device, not a profile file"):
        load_profile_file(device)


def test_profile_validate_refuses_a_fifo_a_directory_and_a_device(tmp_path: Path):
    pipe = _fifo(tmp_path, "pipe.yaml")
    done = subprocess.run([sys.executable, "-m", "humming", "profile", "validate", str(pipe), str(tmp_path),
                           os.devnull], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HUMMING_SKIP_DETECT": "1"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "a FIFO (named pipe)" in done.stdout and "a directory" in done.stdout
    assert "a character device" in done.stdout and "Traceback" not in done.stderr
