"""Keep approval-link tokens out of logs.

An approval token is a bearer credential for one decision, so access logs
(uvicorn's and ours) must never contain it. `redact` rewrites
`/approve/<token>` to `/approve/[redacted]`; `TokenRedactingFilter` applies it
to every log record of the loggers it is installed on.
"""

from __future__ import annotations

import logging
import re
from typing import Any

_TOKEN_PATH = re.compile(r"(/approve/)[^/?#\s\"']+")

#: Loggers whose records can carry request paths.
REDACTED_LOGGERS = ("uvicorn.access", "uvicorn.error", "uvicorn", "parkgate.api", "httpx")


def redact(text: str) -> str:
    """Replace approval tokens in any string."""
    return _TOKEN_PATH.sub(r"\1[redacted]", text)


def _redact_arg(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, int | float | bool) or value is None:
        return value
    text = str(value)  # e.g. httpx.URL objects in client request logs
    return redact(text) if "/approve/" in text else value


class TokenRedactingFilter(logging.Filter):
    """Rewrites the message and string args of each record; never drops records."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redact_arg(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _redact_arg(v) for k, v in record.args.items()}
        return True


_FILTER = TokenRedactingFilter()


def install_log_redaction() -> None:
    """Attach the filter to the request-logging loggers and their handlers (idempotent)."""
    for name in REDACTED_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
        for handler in logger.handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's default logging config with the redaction filter on every handler.

    Pass as `uvicorn.Config(..., log_config=uvicorn_log_config())` so the
    filter is in place before the first request is logged.
    """
    from uvicorn.config import LOGGING_CONFIG

    config: dict[str, Any] = {
        **LOGGING_CONFIG,
        "filters": {"redact_tokens": {"()": "parkgate.runtime.logredact.TokenRedactingFilter"}},
    }
    handlers = {}
    for name, handler in LOGGING_CONFIG["handlers"].items():
        handlers[name] = {**handler, "filters": ["redact_tokens"]}
    config["handlers"] = handlers
    return config
