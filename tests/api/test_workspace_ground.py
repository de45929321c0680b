"""Issue 28 (4): projects own their ground.

The repro: project B's agent registered a session on the directory project
A's session used and read A's files with READ auto. Now a workspace path
belongs to the project that registered it first (or to projects an admin of
that project grants it to), overlapping paths included; `workspace_roots` can
be set per project.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig

SECRET = "alpha-secret-9d21"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def register(api: ApiRig, key: str, sid: str, path: Path | str) -> httpx.Response:
    return await api.http.post("/v1/sessions", headers=bearer(key),
                               json={"session_id": sid, "workspace_path": str(path)})


async def read(api: ApiRig, key: str, sid: str, call_id: str, path: str) -> httpx.Response:
    return await api.http.post(
        f"/v1/sessions/{sid}/turns/t1/tool-calls", headers=bearer(key), params={"wait": 20},
        json={"id": call_id, "name": "read_file", "input": {"path": path}})


def refused(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 403, r.text
    error: dict[str, Any] = r.json()["error"]
    assert error["code"] == "workspace_taken"
    assert "registered it first" in error["message"]
    assert "alpha" not in r.text  # never the other project's name
    return error


async def test_another_project_cannot_register_on_or_around_a_workspace(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, workspace_roots=[tmp_path]) as api:
        repo = api.repo
        alpha, _ = await repo.create_api_key("alpha-agent", project="alpha", roles=["agent"])
        alpha_admin, _ = await repo.create_api_key("alpha-admin", project="alpha",
                                                   roles=["admin", "auditor"])
        beta, _ = await repo.create_api_key("beta-agent", project="beta", roles=["agent"])
        beta_admin, _ = await repo.create_api_key("beta-admin", project="beta",
                                                  roles=["admin"])
        home = tmp_path / "first-ws"
        (home / "shared").mkdir(parents=True)
        (home / "secret.txt").write_text(SECRET)
        (home / "shared" / "notes.txt").write_text("shared notes")
        (tmp_path / "link-to-first").symlink_to(home)
        assert (await register(api, alpha, "s-alpha", home)).status_code == 201
        ok = await read(api, alpha, "s-alpha", "toolu_a", "secret.txt")
        assert ok.status_code == 200 and SECRET in ok.text

        # The repro and its variants: the same directory, inside it, around it,
        # through a symlink. Each is refused; nothing is registered or run.
        for sid, path in (("s-same", home), ("s-inside", home / "shared"),
                          ("s-around", tmp_path), ("s-link", tmp_path / "link-to-first")):
            error = refused(await register(api, beta, sid, path))
            assert error["details"]["workspace_path"] == str(path.resolve())
            assert await repo.get_session(sid) is None
            r = await read(api, beta, sid, "toolu_b", "secret.txt")
            assert r.status_code == 404, r.text
        assert [(h.path, h.project, h.kind) for h in await repo.workspace_holdings()] == [
            (str(home), "alpha", "owner")]
        # Re-registering alpha's own session still answers 200 (nothing changes).
        assert (await register(api, alpha, "s-alpha", home)).status_code == 200

        # beta's admin cannot grant itself alpha's ground; alpha's admin shares a part.
        grants = "/v1/workspaces/grants"
        body = {"path": str(home / "shared"), "project": "beta"}
        mine = await api.http.post(grants, headers=bearer(beta_admin), json=body)
        assert mine.status_code == 403 and "only the project that owns" in mine.text
        assert (await api.http.post(grants, headers=bearer(beta), json=body)).status_code == 403
        given = await api.http.post(grants, headers=bearer(alpha_admin), json=body)
        assert given.status_code == 201, given.text
        assert given.json()["kind"] == "grant" and given.json()["created_by"] == (
            "admin:alpha-admin")
        again = await api.http.post(grants, headers=bearer(alpha_admin), json=body)
        assert again.status_code == 200
        assert (await register(api, beta, "s-shared", home / "shared")).status_code == 201
        r = await read(api, beta, "s-shared", "toolu_s", "notes.txt")
        assert r.status_code == 200 and "shared notes" in r.text
        r = await read(api, beta, "s-shared", "toolu_esc", "../secret.txt")
        assert r.json()["result"]["is_error"] and SECRET not in r.text
        refused(await register(api, beta, "s-same", home))  # the grant is only the part

        # Listings: each admin sees its project's holdings and its grants to others.
        listed = (await api.http.get("/v1/workspaces", headers=bearer(alpha_admin))).json()
        assert [(i["path"], i["project"], i["kind"]) for i in listed["items"]] == [
            (str(home), "alpha", "owner"), (str(home / "shared"), "beta", "grant")]
        theirs = (await api.http.get("/v1/workspaces", headers=bearer(beta_admin))).json()
        assert [(i["path"], i["kind"]) for i in theirs["items"]] == [
            (str(home / "shared"), "grant")]
        assert (await api.http.get("/v1/workspaces", headers=bearer(beta))).status_code == 403

        # Taking the grant back: new sessions there are refused again.
        params = {"path": str(home / "shared"), "project": "beta"}
        assert (await api.http.delete(grants, headers=bearer(beta_admin),
                                      params=params)).status_code == 403
        taken = await api.http.delete(grants, headers=bearer(alpha_admin), params=params)
        assert taken.status_code == 200, taken.text
        gone = await api.http.delete(grants, headers=bearer(alpha_admin), params=params)
        assert gone.status_code == 404
        refused(await register(api, beta, "s-shared-2", home / "shared"))

        # A workspace of its own is beta's: alpha gets the same answer there.
        own = tmp_path / "second-ws"
        own.mkdir()
        assert (await register(api, beta, "s-beta", own)).status_code == 201
        r = await register(api, alpha, "s-alpha-2", own)
        assert r.status_code == 403 and "beta" not in r.text


async def test_two_projects_racing_for_one_path_one_wins(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, workspace_roots=[tmp_path]) as api:
        keys = [(await api.repo.create_api_key(f"racer-{i}", project=f"p{i}",
                                               roles=["agent"]))[0] for i in range(6)]
        ws = tmp_path / "contested" / "inner"
        ws.mkdir(parents=True)
        targets = [ws if i % 2 else ws.parent for i in range(6)]  # the path and its parent
        answers = await asyncio.gather(*(register(api, k, f"s-race-{i}", t)
                                         for i, (k, t) in enumerate(zip(keys, targets,
                                                                        strict=True))))
        codes = sorted(r.status_code for r in answers)
        assert codes == [201, 403, 403, 403, 403, 403], [r.text for r in answers]
        assert len(await api.repo.workspace_holdings()) == 1


async def test_workspace_roots_per_project(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    pay_root = tmp_path / "payments"
    (pay_root / "ws").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, workspace_roots=[tmp_path],
                       project_workspace_roots={"payments": [str(pay_root)]}) as api:
        pay, _ = await api.repo.create_api_key("pay-agent", project="payments", roles=["agent"])
        r = await register(api, pay, "s-pay-out", tmp_path / "elsewhere")
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "workspace_not_allowed"
        assert r.json()["error"]["details"]["workspace_roots"] == [str(pay_root.resolve())]
        assert (await register(api, pay, "s-pay-in", pay_root / "ws")).status_code == 201
        # Projects not listed keep `workspace_roots`.
        assert (await register(api, api.key, "s-default", tmp_path / "elsewhere")).status_code \
            == 201


async def test_grant_routes_answer_bad_input_with_422(api: ApiRig) -> None:
    admin, _ = await api.repo.create_api_key("ground-admin", roles=["admin"])
    grants = "/v1/workspaces/grants"
    for path in ('"relative/dir"', '"/w/\\ud800"', '"/w/\\u0000"', '""'):
        r = await api.http.post(
            grants, headers={**bearer(admin), "Content-Type": "application/json"},
            content=f'{{"path": {path}, "project": "beta"}}'.encode())
        assert r.status_code == 422, (path, r.text)
    r = await api.http.post(grants, headers=bearer(admin),
                            json={"path": "/w", "project": "no spaces"})
    assert r.status_code == 422
    r = await api.http.delete(grants, headers=bearer(admin),
                              params={"path": "relative", "project": "beta"})
    assert r.status_code == 422
    # An unclaimed path is nobody's to share through the API (the CLI may reserve it).
    r = await api.http.post(grants, headers=bearer(admin),
                            json={"path": "/nowhere/at/all", "project": "beta"})
    assert r.status_code == 403
    assert await api.repo.workspace_holdings(project="beta") == []
