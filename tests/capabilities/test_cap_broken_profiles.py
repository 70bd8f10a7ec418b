"""Every file in broken_profiles/ must fail validation with the error its `# expect:` line names."""
from __future__ import annotations

from pathlib import Path

import pytest

from humming.capabilities import Registry, load_profile_file
from humming.errors import ProfileError

CORPUS = Path(__file__).parent / "broken_profiles"
FILES = sorted(CORPUS.glob("*.yaml"))


def expected(path: Path) -> str:
    first = path.read_bytes().split(b"\n")[0].decode("utf-8")  # the rest may be deliberately not UTF-8
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: <error text>'"
    return first[len("# expect: "):].strip()


def test_corpus_is_large():
    assert len(FILES) >= 40


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_broken_profile_fails_with_the_right_message(path: Path):
    with pytest.raises(ProfileError) as info:
        load_profile_file(path)
    message = str(info.value)
    assert path.name in message, f"the error must name the file: {message}"
    assert expected(path) in message, f"expected {expected(path)!r} in {message!r}"


def _write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def test_duplicate_names_in_one_directory(tmp_path: Path):
    body = "name: acme-dup\nextends: nvidia-ampere\n"
    _write(tmp_path, "one.yaml", body)
    _write(tmp_path, "two.yaml", body)
    with pytest.raises(ProfileError, match=r"two.yaml: name: duplicate profile name 'acme-dup' \(also in .*one.yaml\)"):
        Registry(extra_dirs=[tmp_path])


def test_broken_profile_on_the_path_is_reported_by_the_registry(tmp_path: Path):
    _write(tmp_path, "bad.yaml", "name: acme-bad\nextends: nvidia-ampere\nlimits: {sms: -3}\n")
    with pytest.raises(ProfileError, match=r"bad.yaml: limits.sms: -3 is below the minimum"):
        Registry(extra_dirs=[tmp_path])


def test_broken_target_rules_are_reported(tmp_path: Path):
    _write(tmp_path, "_targets.yaml", "targets:\n  sm_85:\n    compute_capability: [8, 5]\n    min_nvrtc: '12.8'\n"
                                      "    binary_compat: major\n    instructions: [no_such_set]\n")
    with pytest.raises(ProfileError, match=r"_targets.yaml: targets.sm_85.instructions\[0\]: unknown instruction set"):
        Registry(extra_dirs=[tmp_path])


def test_unsafe_yaml_is_refused(tmp_path: Path):
    path = _write(tmp_path, "evil.yaml", "name: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ProfileError, match="invalid YAML"):
        load_profile_file(path)
