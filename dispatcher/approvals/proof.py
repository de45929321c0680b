"""Proof that parkgate's API sent a message to a workflow (HMAC-SHA256).

Anyone who reaches the Temporal frontend can send a workflow an update or a
signal. The workflow must act only on the ones parkgate's API (or an operator
CLI holding the same secret) made, so every such message carries a `Proof`:
an HMAC-SHA256 over a canonical encoding of

    the message kind ("decide", "cancel", "claim", "outcome", ...),
    the workflow id it is sent to, and
    every field of the message but the proof itself,

under a key only the API and the workers hold. The keys are derived (HKDF,
below) from the payload keys every API and worker already share, one proof
key per payload key id: a proof names its key id, so keys rotate with the
payload keys (sign with the current one, verify with any configured one).

Two halves:

- the sender (API side): `prove(message, kind, workflow_id, keys)` returns the
  message with its `proof` set; `keys` is the `ProofKeys` of the client
  (`parkgate.durable.client_plugin.proof_keys_of(client)`);
- the workflow (validator or signal handler): `problem(message, kind,
  workflow_id)` says why a message is not proven (None when it is), with the
  keys the worker installed here when it was built (`install`, called by the
  Temporal plugin for every worker and replayer). Workflows do no I/O: this
  module is passed through the sandbox, so they read the installed keys.

Pure (standard library and pydantic): the sandbox passes it through.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, Field

from parkgate import jcs

#: The field of a proven message that holds its proof (excluded from the MAC).
PROOF_FIELD = "proof"
#: Version of the canonical encoding (part of what is signed): 2 is RFC 8785
#: (parkgate.jcs, the one canonical JSON). Proofs are made in it.
ENCODING_VERSION = 2
#: Versions a proof is checked in, newest first: 1 (json.dumps, ASCII escapes)
#: is what an API of an earlier release signs and what recorded histories hold,
#: so those messages stay proven (and histories replay) after the upgrade.
CHECKED_VERSIONS = (2, 1)

#: Message kinds (what a proof is for: a decide proof is no cancel proof).
KIND_DECIDE = "decide"
KIND_CANCEL = "cancel"
KIND_CLAIM = "claim"
KIND_OUTCOME = "outcome"
#: A claim carried by a call's start (CallInput.claim), taken at its release.
KIND_CLAIM_AT_RELEASE = "claim-at-release"

_SALT = b"parkgate message proof salt v1"
_INFO = b"parkgate message proof v1"


class Proof(BaseModel):
    """Who vouches for a message: the key id and the HMAC-SHA256 (hex)."""

    key_id: str = Field(max_length=200)
    mac: str = Field(max_length=128)


M = TypeVar("M", bound=BaseModel)


def derive_key(secret: bytes, key_id: str) -> bytes:
    """The proof key of one shared secret (HKDF-SHA256, RFC 5869, 32 bytes).

    Derived, so the payload key itself never signs anything and a proof key
    reveals nothing of the payload key; bound to `key_id`, so two ids never
    share a proof key even over one secret.
    """
    prk = hmac.new(_SALT, secret, hashlib.sha256).digest()
    info = _INFO + b"\x00" + key_id.encode("utf-8")
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()


def canonical(
    kind: str, workflow_id: str, message: BaseModel, version: int = ENCODING_VERSION
) -> bytes:
    """The bytes a proof covers: kind, workflow id and every field but the proof.

    Fields at their default are left out, so a sender one field newer than
    the worker (a new optional field left unset) proves the same bytes; any
    field set to another value changes them. `version` 1 is the encoding of
    earlier releases (checked, never made).
    """
    # Through pydantic's own JSON, as the message travels: what the worker
    # parses back (NaN as null, say) encodes to the same bytes.
    fields = json.loads(message.model_dump_json(exclude={PROOF_FIELD}, exclude_defaults=True))
    doc = {"v": version, "kind": kind, "workflow_id": workflow_id, "message": fields}
    if version == 1:
        return jcs.legacy_text(doc, ascii_only=True).encode("ascii")
    return jcs.canonical_bytes(doc)


def _mac(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


class ProofKeys:
    """Proof keys by id and the id that signs (`current`).

    `from_secrets` derives them from shared secrets (the payload keys).
    """

    def __init__(self, keys: Mapping[str, bytes], current: str) -> None:
        if current not in keys:
            raise ValueError(f"proof key id {current!r} is not among the keys")
        self.keys = dict(keys)
        self.current = current

    @classmethod
    def from_secrets(cls, secrets: Mapping[str, bytes], current: str) -> ProofKeys:
        """Proof keys derived from shared secrets of the same ids."""
        return cls({kid: derive_key(raw, kid) for kid, raw in secrets.items()}, current)

    def sign(self, kind: str, workflow_id: str, message: BaseModel) -> Proof:
        """The proof of `message` sent as `kind` to `workflow_id` (current key)."""
        data = canonical(kind, workflow_id, message)
        return Proof(key_id=self.current, mac=_mac(self.keys[self.current], data))

    def check(self, kind: str, workflow_id: str, message: BaseModel) -> str | None:
        """Why `message` is not proven for `kind` and `workflow_id`; None when it is."""
        return _check(message, kind, workflow_id, {k: [v] for k, v in self.keys.items()})


def prove(message: M, kind: str, workflow_id: str, keys: ProofKeys) -> M:
    """`message` with its proof set (the API side, just before sending)."""
    if PROOF_FIELD not in type(message).model_fields:
        raise TypeError(f"{type(message).__name__} has no {PROOF_FIELD!r} field")
    proof = keys.sign(kind, workflow_id, message)
    return message.model_copy(update={PROOF_FIELD: proof})


def _check(
    message: BaseModel, kind: str, workflow_id: str, keys: Mapping[str, list[bytes]]
) -> str | None:
    proof = getattr(message, PROOF_FIELD, None)
    if not isinstance(proof, Proof):
        return "it carries no proof that parkgate's API sent it"
    candidates = keys.get(proof.key_id)
    if not candidates:
        return f"its proof names an unknown key id {proof.key_id!r}"
    for version in CHECKED_VERSIONS:
        data = canonical(kind, workflow_id, message, version)
        for key in candidates:
            if hmac.compare_digest(_mac(key, data), proof.mac):
                return None
    return "its proof does not match its fields (forged or altered)"


# ------------------------------------------------------- the worker's keys
# Set by the process that builds workers and replayers (before any workflow
# runs), read by workflows. Keys are only ever added: a history that replays
# here keeps verifying (remove a key by restarting the process without it).
_installed: dict[str, list[bytes]] = {}
_lock = threading.Lock()


def install(keys: ProofKeys) -> None:
    """Make `keys` verify proofs in this process's workflows (idempotent)."""
    with _lock:
        for kid, key in keys.keys.items():
            known = _installed.setdefault(kid, [])
            if key not in known:
                known.append(key)


def installed_ids() -> list[str]:
    """The key ids workflows in this process verify with."""
    return sorted(_installed)


def problem(message: BaseModel, kind: str, workflow_id: str) -> str | None:
    """Why `message` is not proven (None when it is), with the installed keys.

    What a workflow calls in an update validator or a signal handler: pure and
    deterministic for a given set of installed keys.
    """
    return _check(message, kind, workflow_id, _installed)


def fields_of(message: BaseModel) -> dict[str, Any]:
    """The message's fields without its proof (what a workflow may record)."""
    return message.model_dump(exclude={PROOF_FIELD})
