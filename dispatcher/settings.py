"""One Settings class: YAML file (`~/.parkgate/server.yaml` or --config) + PARKGATE_* env.

Environment variables win over the YAML file, which wins over defaults.
Nested values use `__` in env names (PARKGATE_TEMPORAL__ADDRESS is not used;
fields are flat on purpose so each has one obvious env name).
"""

from __future__ import annotations

import json
import os
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)


def default_data_dir() -> Path:
    return Path(os.environ.get("PARKGATE_DATA_DIR") or "~/.parkgate").expanduser()


def _config_file() -> Path | None:
    explicit = os.environ.get("PARKGATE_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    candidate = default_data_dir() / "server.yaml"
    return candidate if candidate.exists() else None


class Webhook(BaseModel):
    """A notification target for parked calls."""

    url: str
    kind: str = "generic"  # "generic" JSON or "slack"
    headers: dict[str, str] = Field(default_factory=dict)


class Settings(BaseSettings):
    """All parkgate configuration in one place."""

    model_config = SettingsConfigDict(env_prefix="PARKGATE_", extra="forbid")

    data_dir: Path = Field(default_factory=default_data_dir)
    #: SQLAlchemy async URL; empty means SQLite under data_dir.
    database_url: str = ""
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    temporal_task_queue: str = "parkgate"
    temporal_api_key: str | None = None
    temporal_tls: bool = False
    temporal_tls_cert_path: Path | None = None
    temporal_tls_key_path: Path | None = None
    temporal_tls_ca_path: Path | None = None
    #: Base URL put in approval links (what a phone can reach).
    public_base_url: str = "http://127.0.0.1:8420"
    api_host: str = "127.0.0.1"
    api_port: int = 8420
    #: Secret for signing approval links; generated under data_dir when unset.
    link_secret: str | None = None
    workspace_roots: list[Path] = Field(default_factory=lambda: [Path.home()])
    #: Confirmation policy in the spec's YAML shape (the `tool_confirmation` mapping).
    tool_confirmation: dict[str, Any] = Field(default_factory=dict)
    session_concurrency: int = Field(default=4, ge=1, le=64)
    default_timeout_seconds: float = 60.0
    execute_timeout_seconds: float = 600.0
    cancel_grace_seconds: float = 30.0
    #: Approval expiry; 0 means never.
    approval_expiry_seconds: float = 24 * 3600.0
    approval_expiry_by_class: dict[str, float] = Field(default_factory=dict)
    webhooks: list[Webhook] = Field(default_factory=list)
    max_cached_workflows: int = Field(default=500, ge=0)
    #: Heartbeat timeout of the at-most-once execute activity: how long a dead
    #: worker goes unnoticed before the call ends "outcome unknown".
    execute_heartbeat_timeout_seconds: float = Field(default=20.0, gt=0)
    max_input_bytes: int = 1024 * 1024
    max_request_bytes: int = 2 * 1024 * 1024
    audit_pages_enabled: bool = True

    @field_validator("workspace_roots", mode="after")
    @classmethod
    def _expand_roots(cls, value: list[Path]) -> list[Path]:
        return [Path(p).expanduser().resolve() for p in value]

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = _config_file()
        if path is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)

    # ------------------------------------------------------------------
    def to_env(self) -> dict[str, str]:
        """These settings as PARKGATE_* variables, for a child process (worker, API).

        Complex values are JSON, which is how pydantic-settings reads them back;
        unset optional values are left out.
        """
        env: dict[str, str] = {}
        for name, value in self.model_dump(mode="json").items():
            if value is None:
                continue
            text = value if isinstance(value, str) else json.dumps(value)
            env[f"PARKGATE_{name.upper()}"] = text
        return env

    @property
    def effective_database_url(self) -> str:
        """The configured URL, or SQLite under the data directory."""
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{self.data_dir / 'parkgate.db'}"

    def signing_secret(self) -> str:
        """The link-signing secret; created once under data_dir when unset."""
        if self.link_secret:
            return self.link_secret
        path = self.data_dir / "link-secret"
        if path.exists():
            return path.read_text().strip()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        secret = secrets.token_urlsafe(48)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secret)
        return secret


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings (cached; tests build their own Settings objects)."""
    return Settings()
