"""The README's settings table is humming.settings' table, and the README stays a short user document."""
from pathlib import Path

from humming import settings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_lists_every_setting_as_the_code_does():
    start = README.index("<!-- settings table: generated from humming.settings.SETTINGS -->")
    end = README.index("<!-- end of settings table -->")
    table = README[start:end].split("\n", 1)[1].strip()
    assert table == settings.markdown_table(), "update the README's table from humming.settings.markdown_table()"


def test_readme_is_at_most_200_lines():
    assert len(README.splitlines()) <= 200
