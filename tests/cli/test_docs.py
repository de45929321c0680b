"""The operations guide documents every setting, and the README starts with the two commands."""

from __future__ import annotations

from pathlib import Path

from parkgate.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_is_documented() -> None:
    text = (ROOT / "docs" / "OPERATIONS.md").read_text()
    missing = [name for name in Settings.model_fields if f"`{name}`" not in text]
    assert missing == [], f"add these settings to docs/OPERATIONS.md: {missing}"


def test_readme_starts_with_what_it_is_then_the_two_commands() -> None:
    """Title, a paragraph, then serve and (under Development) the test command,
    all on the first screen; CI runs exactly the README's test command."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[0] == "# parkgate" and lines[2].startswith("parkgate is a durable")
    screen = [line.strip() for line in lines[:40]]
    serve = screen.index(
        "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/parkgate serve")
    development = screen.index("## Development")
    test = screen.index("bash scripts/test.sh")
    assert serve < development < test
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
