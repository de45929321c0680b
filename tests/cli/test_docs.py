"""The operations guide documents every setting, and the README starts with the two commands."""

from __future__ import annotations

from pathlib import Path

from parkgate.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_is_documented() -> None:
    text = (ROOT / "docs" / "OPERATIONS.md").read_text()
    missing = [name for name in Settings.model_fields if f"`{name}`" not in text]
    assert missing == [], f"add these settings to docs/OPERATIONS.md: {missing}"


def test_readme_starts_with_the_two_commands() -> None:
    first = [line.strip() for line in (ROOT / "README.md").read_text().splitlines()[:2]]
    assert first == [
        "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/parkgate serve",
        "bash scripts/test.sh",
    ]
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
