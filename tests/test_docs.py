"""Every relative link of the README and the docs pages resolves to a file of the repository, and the README
stays short (its detail lives in docs/)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
MAX_README_LINES = 150


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_relative_link_resolves():
    broken = []
    for page in pages():
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue  # a web address or an anchor on the same page
            if not (page.parent / target.split("#", 1)[0]).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_the_readme_is_short_and_keeps_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= MAX_README_LINES
    assert "pip install -e . && luigi --module pipeline FullRun" in readme
    assert "pip install -e '.[test]' && ruff check . && pytest -q" in readme
    assert readme.count("](docs/") >= 10, "the README points to the docs pages"
