"""The allowlisted environment a tool's process gets."""

from __future__ import annotations

from parkgate.sandbox.toolenv import tool_environment

SERVER_ENV = {
    "PATH": "/opt/bin:/usr/bin",
    "LANG": "en_US.UTF-8",
    "HOME": "/root",
    "PARKGATE_LINK_SECRET": "link-secret-value",
    "PARKGATE_TEMPORAL_API_KEY": "temporal-key-value",
    "TEMPORAL_API_KEY": "raw-temporal-key",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "EDITOR": "vi",
    "GOPATH": "/go",
}


def test_only_the_allowlist_passes() -> None:
    env = tool_environment("/ws", source=SERVER_ENV)
    assert env == {"PATH": "/opt/bin:/usr/bin", "LANG": "en_US.UTF-8", "HOME": "/ws",
                   "PWD": "/ws"}


def test_a_setting_adds_names_but_never_secret_ones() -> None:
    env = tool_environment(
        "/ws",
        ["GOPATH", "PARKGATE_LINK_SECRET", "parkgate_temporal_api_key", "TEMPORAL_API_KEY",
         "AWS_SECRET_ACCESS_KEY", "HOME"],
        source=SERVER_ENV,
    )
    assert env["GOPATH"] == "/go" and env["HOME"] == "/ws"
    assert not any("value" in v or v in ("aws", "raw-temporal-key") for v in env.values())
    assert set(env) == {"PATH", "LANG", "HOME", "PWD", "GOPATH"}


def test_defaults_when_the_server_has_no_path() -> None:
    env = tool_environment("/ws", source={})
    assert env["PATH"] and env["LANG"] == "C.UTF-8"
