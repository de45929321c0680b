"""The revision scripts' head and the database's stamp, read without Alembic.

Every process that opens the store (the API, each worker) checks at start
that the database is exactly at the code's head revision. Alembic's script
directory (~11 MB of imports per process, docs/PERFORMANCE.md "Scale on one
machine") is needed only to explain a mismatch, so
parkgate.store.migrate.check_schema_on first compares the `alembic_version`
rows, read with SQLAlchemy, with the head found by parsing the scripts'
`revision` / `down_revision` assignments (not importing them). Scripts this
reader does not understand give no head, and the check goes to Alembic.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

VERSION_TABLE = "alembic_version"


def migrations_dir() -> Path:
    """Where the Alembic scripts are (the `migrations` package).

    Found, not imported: the scripts import the store's models, so importing
    them here would make store and migrations import each other.
    """
    spec = importlib.util.find_spec("parkgate.migrations")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).resolve().parent


def _assigned(path: Path) -> tuple[str, tuple[str, ...]] | None:
    """A script's (revision, down revisions), when both are plain literals."""
    values: dict[str, object] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target: ast.expr
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in ("revision", "down_revision"):
            try:
                values[target.id] = ast.literal_eval(value)
            except ValueError:
                return None
    rev, down = values.get("revision"), values.get("down_revision")
    if not isinstance(rev, str):
        return None
    if down is None:
        return rev, ()
    if isinstance(down, str):
        return rev, (down,)
    if isinstance(down, tuple | list) and all(isinstance(d, str) for d in down):
        return rev, tuple(down)
    return None


@cache
def script_head() -> str | None:
    """The one head of the revision scripts, or None when they cannot be read plainly."""
    revisions: dict[str, tuple[str, ...]] = {}
    for path in sorted((migrations_dir() / "versions").glob("*.py")):
        if path.name.startswith("_"):
            continue
        found = _assigned(path)
        if found is None or found[0] in revisions:
            return None
        revisions[found[0]] = found[1]
    pointed_at = {d for downs in revisions.values() for d in downs}
    if not revisions or not pointed_at <= set(revisions):
        return None
    heads = [rev for rev in revisions if rev not in pointed_at]
    return heads[0] if len(heads) == 1 else None


def stamped_revisions(conn: Connection) -> list[str] | None:
    """The database's `alembic_version` rows (None when it has no such table)."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    return [str(r[0]) for r in conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))]
