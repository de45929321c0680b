"""`parkgate cancel` names the OS user (cli:<user>) and its optional
`--reason` in the cancelled call's record; a hostile reason is one line of
error and cancels nothing. Real Temporal dev server, PostgreSQL, a worker."""

from __future__ import annotations

import asyncio
import getpass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from parkgate.cli import app
from parkgate.runtime.devserver import DevServer
from parkgate.settings import get_settings
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig
from tests.fixtures.temporal import dev_client

runner = CliRunner()


async def cli(*args: str) -> tuple[int, str, str]:
    """One in-process `parkgate` run (its own event loop, in a thread)."""
    get_settings.cache_clear()
    result = await asyncio.to_thread(runner.invoke, app, list(args))
    return result.exit_code, result.stdout, result.stderr


async def parked(api: ApiRig, sid: str, call_id: str) -> None:
    await api.submit(sid, "write_file", {"path": f"{call_id}.txt", "content": "x"},
                     call_id=call_id)
    await api.wait_parked(sid, call_id)


async def result_text(api: ApiRig, sid: str, call_id: str) -> str:
    r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/{call_id}", params={"wait": 30})
    body: dict[str, Any] = r.json()
    assert body["status"] == "cancelled", body
    return str(body["result"]["content"][0]["text"])


async def test_parkgate_cancel_records_the_os_user_and_the_reason(
    cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, dev_server: DevServer,
    pg_repo: Repository, pg_url: str, tmp_path: Path,
) -> None:
    dev_temporal = await dev_client(dev_server)
    monkeypatch.setenv("PARKGATE_TEMPORAL_ADDRESS", dev_server.address)
    monkeypatch.setenv("PARKGATE_DATABASE_URL", pg_url)
    user = getpass.getuser()
    async with api_rig(dev_temporal, pg_repo, tmp_path) as api:
        sid = await api.register()
        for call_id in ("toolu_one", "toolu_s0", "toolu_s1"):
            await parked(api, sid, call_id)

        for bad in ("nul\x00here", "x" * 501, "bidi \u202e", "not utf-8 \udcff"):
            code, out, err = await cli("cancel", sid, "toolu_one", "--reason", bad)
            assert code == 2, (bad, out, err)
            assert err.startswith("parkgate: error: --reason refused: "), err
            assert err.count("\n") == 1, err
        still = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_one")
        assert still.json()["status"] == "parked"

        code, out, err = await cli("cancel", sid, "toolu_one", "--reason", "wrong file")
        assert code == 0, (out, err)
        said = await result_text(api, sid, "toolu_one")
        assert said == f"The call was cancelled before it ran (by cli:{user} via parkgate " \
            "cancel: wrong file).", said
        [failed] = [e for e in await api.repo.call_events(sid, "toolu_one")
                    if e.type == "tool.failed"]
        assert failed.data == {"cancelled_by": f"cli:{user}", "via": "parkgate cancel",
                               "reason": "wrong file"}

        code, out, err = await cli("calls", "show", sid, "toolu_one")
        assert code == 0, (out, err)
        assert f"cancelled_by=cli:{user}" in out and "reason=wrong file" in out, out

        # The whole session, no reason: the user and the channel still named.
        code, out, err = await cli("cancel", sid)
        assert code == 0 and "cancelled 2 parked calls" in out, (out, err)
        for call_id in ("toolu_s0", "toolu_s1"):
            said = await result_text(api, sid, call_id)
            assert said.endswith(f"(by cli:{user} via parkgate cancel)."), said
        report = await api.repo.verify_chain(sid)
        assert report.ok and report.problems == [], report
