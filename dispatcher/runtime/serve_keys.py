"""The agent and approver key pair `parkgate serve` prints: kept across starts of
one data directory, so `keys list` does not fill with a pair per start."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parkgate.store import Repository

#: The key pair a start printed, kept (0600, in the private data directory) so
#: the next start of the same data directory prints the same pair instead of
#: minting one per start; `serve --new-keys` mints a pair and revokes this one.
KEYS_FILE = "serve-keys.json"


def _kept_keys(data_dir: Path) -> dict[str, str] | None:
    try:
        kept = json.loads((data_dir / KEYS_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or not all(
            isinstance(kept.get(k), str) for k in ("name", "agent_key", "approver_key")):
        return None
    return {k: kept[k] for k in ("name", "agent_key", "approver_key")}


def _keep_keys(data_dir: Path, name: str, key: str, approver_key: str) -> None:
    path = data_dir / KEYS_FILE
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps({"name": name, "agent_key": key, "approver_key": approver_key}))
    tmp.chmod(0o600)
    tmp.replace(path)


async def start_keys(
    repo: Repository, key_name: str | None, data_dir: Path | None = None, *,
    new_keys: bool = False,
) -> tuple[str, str, str]:
    """The agent and approver keys a start prints: (name, agent key, approver key).

    The pair the last start of `data_dir` printed, while both are still active
    (and `key_name`, if given, is its name); else a new pair, kept for the
    next start. `new_keys` mints a new pair and revokes the kept one. Default
    names are short (`serve-3f9a`, `serve-3f9a-approver`): they show in
    `keys list`, the audit and every decision; a taken suffix draws another."""
    from parkgate.store import ApiKeyNameTakenError
    from parkgate.store.errors import ApiKeyNotFoundError

    kept = _kept_keys(data_dir) if data_dir is not None else None
    if kept is not None:
        records = [await repo.verify_api_key(kept[k]) for k in ("agent_key", "approver_key")]
        if new_keys:
            for record in records:
                if record is not None:
                    try:
                        await repo.revoke_api_key(record.id)
                    except ApiKeyNotFoundError:
                        pass  # revoked meanwhile
        elif all(records) and key_name in (None, kept["name"]):
            return kept["name"], kept["agent_key"], kept["approver_key"]
    for attempt in range(8):
        name = key_name or f"serve-{secrets.token_hex(2)}"
        try:
            key, _record = await repo.create_api_key(name, roles=["agent"])
        except ApiKeyNameTakenError:
            if key_name is not None or attempt == 7:
                raise
            continue
        approver_key, _record = await repo.create_api_key(
            f"{name}-approver", roles=["approver", "auditor"])
        if data_dir is not None:
            _keep_keys(data_dir, name, key, approver_key)
        return name, key, approver_key
    raise AssertionError("unreachable")
