"""Issue 40 (5): `parkgate serve` prints the same agent/approver key pair at
every start of a data directory instead of minting a pair per start;
`--new-keys` mints a new pair and revokes the kept one."""

from __future__ import annotations

import stat
from pathlib import Path

from parkgate.runtime.serve_keys import KEYS_FILE, start_keys
from parkgate.store.repository import Repository


async def _active(repo: Repository) -> list[str]:
    return [k.name for k in await repo.list_api_keys(include_revoked=False)]


async def test_restarts_reuse_the_pair_and_new_keys_replaces_it(
    sqlite_repo: Repository, tmp_path: Path
) -> None:
    first = await start_keys(sqlite_repo, None, tmp_path)
    assert stat.S_IMODE((tmp_path / KEYS_FILE).stat().st_mode) == 0o600
    for _ in range(3):  # three more starts: the same pair, no new keys
        assert await start_keys(sqlite_repo, None, tmp_path) == first
    name, agent, approver = first
    assert sorted(await _active(sqlite_repo)) == [name, f"{name}-approver"]
    assert (await sqlite_repo.verify_api_key(agent)) is not None

    renewed = await start_keys(sqlite_repo, None, tmp_path, new_keys=True)
    assert renewed[1:] != first[1:]
    assert await sqlite_repo.verify_api_key(agent) is None  # the old pair is revoked
    assert await sqlite_repo.verify_api_key(approver) is None
    assert sorted(await _active(sqlite_repo)) == [renewed[0], f"{renewed[0]}-approver"]
    assert await start_keys(sqlite_repo, None, tmp_path) == renewed

    # A kept key revoked by hand: the next start mints a pair instead of printing it.
    await sqlite_repo.revoke_api_key(f"{renewed[0]}-approver")
    replaced = await start_keys(sqlite_repo, None, tmp_path)
    assert replaced[0] != renewed[0] and await sqlite_repo.verify_api_key(replaced[2])
    # --key-name names the pair: the kept one is reused only under its own name.
    assert await start_keys(sqlite_repo, replaced[0], tmp_path) == replaced
    named = await start_keys(sqlite_repo, "laptop", tmp_path)
    assert named[0] == "laptop" and await start_keys(sqlite_repo, None, tmp_path) == named
