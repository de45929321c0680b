"""The data directory is made private at start-up, with a warning when it was not."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from parkgate.datadir import secure_data_dir


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_wide_modes_are_tightened_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    for name in ("parkgate.db", "temporal.db", "link-secret"):
        (data / name).write_text("x")
        (data / name).chmod(0o644)
    (data / "logs").mkdir()
    (data / "logs").chmod(0o755)
    (data / "logs" / "temporal.log").write_text("x")
    (data / "logs" / "temporal.log").chmod(0o664)
    with caplog.at_level(logging.WARNING, logger="parkgate.datadir"):
        fixed = secure_data_dir(data)
    assert mode(data) == 0o700 and mode(data / "logs") == 0o700
    for path in (data / "parkgate.db", data / "temporal.db", data / "link-secret",
                 data / "logs" / "temporal.log"):
        assert mode(path) == 0o600, path
    assert len(fixed) == 6
    assert "parkgate.db was readable by others (mode 644); changed to 600" in caplog.text


def test_private_dir_is_left_alone_silently(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "fresh"
    with caplog.at_level(logging.WARNING, logger="parkgate.datadir"):
        assert secure_data_dir(data) == []
        (data / "f").write_text("x")
        (data / "f").chmod(0o600)
        assert secure_data_dir(data) == []
    assert mode(data) == 0o700 and caplog.text == ""


def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    target.write_text("x")
    target.chmod(0o644)
    (data / "link").symlink_to(target)
    secure_data_dir(data)
    assert mode(target) == 0o644
