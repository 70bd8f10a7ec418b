"""Every HUMMING_* setting goes through one parser (humming.settings): a value it cannot read is a SettingsError that
names the variable, the value and what it takes, whoever reads it; values it can read give their typed value."""
from __future__ import annotations

import pytest

from humming import settings
from humming.errors import HummingError, SettingsError

BAD = {
    "flag": ["maybe", "2", "yes please", "tru"],
    "count": ["lots", "-1", "1.5", "0x10", "256k"],
    "nvrtc": ["banana", "12.x", "v12", "12.9.1", "-12"],
    "choice": ["sometimes", "decode,all"],
    "shell": ['"-O3', "-DX='1"],
}
GOOD = {
    "flag": [("1", True), ("TRUE", True), ("on", True), ("0", False), ("No", False), ("off", False)],
    "count": [("0", 0), ("256", 256)],
    "nvrtc": [("auto", None), ("12", (12, None)), ("12.9", (12, 9))],
    "choice": [("decode", "decode"), ("ALL", "all"), ("off", "off")],
    "shell": [("-O3 '-DX=a b'", ["-O3", "-DX=a b"])],
}


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for s in settings.SETTINGS:
        monkeypatch.delenv(s.name, raising=False)


def _of(kind: str) -> list[settings.Setting]:
    return [s for s in settings.SETTINGS if s.kind == kind]


def test_every_setting_has_a_kind_the_parser_reads():
    kinds = {s.kind for s in settings.SETTINGS}
    assert kinds <= {"text", "flag", "count", "nvrtc", "choice", "shell"}
    for kind in BAD:
        assert _of(kind), kind  # (each kind the table tests is used by some setting)


@pytest.mark.parametrize("kind", sorted(BAD))
def test_unreadable_values_are_named_errors(monkeypatch, kind):
    for s in _of(kind):
        for bad in BAD[kind]:
            monkeypatch.setenv(s.name, bad)
            for read in (settings.raw, settings.value):
                with pytest.raises(SettingsError) as e:
                    read(s.name)
                assert f"{s.name}={bad!r}" in str(e.value) and "unset it" in str(e.value)
                assert isinstance(e.value, (HummingError, ValueError))


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_readable_values(monkeypatch, kind):
    for s in _of(kind):
        for text, want in GOOD[kind]:
            monkeypatch.setenv(s.name, f"  {text} ")
            assert settings.value(s.name) == want
            assert settings.raw(s.name) == text


def test_defaults_read_as_their_kind():
    for s in settings.SETTINGS:
        settings.value(s.name)  # (a default the parser cannot read would raise here)
    assert settings.value("HUMMING_CACHE") is True and settings.value("HUMMING_LINEINFO") is False
    assert settings.integer("HUMMING_CACHE_MEMORY", 256) == 256
    assert settings.value("HUMMING_NVRTC") is None and settings.value("HUMMING_PRECOMPILE") == "decode"


def test_flag_and_integer_refuse_instead_of_falling_back(monkeypatch):
    monkeypatch.setenv("HUMMING_TUNE", "maybe")
    with pytest.raises(SettingsError, match="HUMMING_TUNE='maybe'"):
        settings.flag("HUMMING_TUNE")
    monkeypatch.setenv("HUMMING_CACHE_MEMORY", "lots")
    with pytest.raises(SettingsError, match="HUMMING_CACHE_MEMORY='lots'"):
        settings.integer("HUMMING_CACHE_MEMORY", 256)
    monkeypatch.setenv("HUMMING_CACHE_MEMORY", "64")
    assert settings.integer("HUMMING_CACHE_MEMORY", 256) == 64


def test_readers_outside_settings_get_the_error(monkeypatch):
    """Modules that read a setting's text and interpret it themselves still go through the parser."""
    from humming.core.compile import cache, nvrtc
    from humming.core.runtime.precompile import precompile_mode

    monkeypatch.setenv("HUMMING_PRECOMPILE", "sometimes")
    with pytest.raises(SettingsError, match="HUMMING_PRECOMPILE"):
        precompile_mode()
    monkeypatch.setenv("HUMMING_NVRTC", "banana")
    with pytest.raises(SettingsError, match="HUMMING_NVRTC='banana'"):
        nvrtc.select_toolchain("sm_80")
    monkeypatch.setenv("HUMMING_CACHE", "maybe")
    with pytest.raises(SettingsError, match="HUMMING_CACHE='maybe'"):
        cache.cache_enabled()


def test_unknown_name_is_a_key_error():
    with pytest.raises(KeyError, match="not a humming setting"):
        settings.raw("HUMMING_NOPE")
