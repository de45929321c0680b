"""Keep the data directory private: 0700, every file in it 0600.

It holds the link secret, the payload key, the API-key hashes and Temporal's
history (temporal.db). `secure_data_dir` runs at start-up (and again once the
embedded Temporal server has created its files): it creates the directory
0700 when missing and tightens anything wider, logging one warning per path
it had to fix so an operator learns that it was exposed.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("parkgate.datadir")

DIR_MODE = 0o700
FILE_MODE = 0o600


def _tighten(path: Path, wanted: int, report: bool) -> bool:
    """chmod `path` to `wanted` when group/other bits are set; True when changed."""
    mode = stat.S_IMODE(path.lstat().st_mode)
    if mode & 0o077 == 0:
        return False
    path.chmod(wanted | (mode & 0o700 if wanted == DIR_MODE else 0))
    log.log(
        logging.WARNING if report else logging.DEBUG,
        "%s was readable by others (mode %o); changed to %o",
        path, mode, stat.S_IMODE(path.lstat().st_mode),
    )
    return True


def secure_data_dir(data_dir: Path, *, report: bool = True) -> list[Path]:
    """Create/tighten `data_dir` (0700) and everything under it (dirs 0700, files 0600).

    Symlinks are left alone (their targets may not be ours). Returns the paths
    fixed. `report=False` for a pass over files this process just created:
    tightening those is routine, not news for the operator.
    """
    data_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    fixed: list[Path] = []
    if _tighten(data_dir, DIR_MODE, report):
        fixed.append(data_dir)
    for root, dirs, files in os.walk(data_dir):
        for name in dirs:
            path = Path(root) / name
            if not path.is_symlink() and _tighten(path, DIR_MODE, report):
                fixed.append(path)
        for name in files:
            path = Path(root) / name
            if not path.is_symlink() and path.is_file() and _tighten(path, FILE_MODE, report):
                fixed.append(path)
    return fixed
