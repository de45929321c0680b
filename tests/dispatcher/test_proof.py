"""parkgate.approvals.proof: a message proven for one workflow and kind verifies there only,
and any change to any field breaks its proof."""

from __future__ import annotations

import os

import pytest
from pydantic import BaseModel

from parkgate.approvals import proof
from parkgate.approvals.decisions import DecideInput
from parkgate.approvals.proof import Proof, ProofKeys
from parkgate.rules.remember_spec import RememberSpec

WF = "call/s1/toolu_1"
KEYS = ProofKeys.from_secrets({"k1": os.urandom(32)}, "k1")


def decision(**fields: object) -> DecideInput:
    return DecideInput.model_validate({"request_id": "req-1", "decision": "allow",
                                       "decided_by": "alice", "via": "api", **fields})


def test_a_proven_message_verifies_for_its_workflow_and_kind_only() -> None:
    sent = proof.prove(decision(), proof.KIND_DECIDE, WF, KEYS)
    assert sent.proof is not None and sent.proof.key_id == "k1"
    assert KEYS.check(proof.KIND_DECIDE, WF, sent) is None
    assert "does not match" in (KEYS.check(proof.KIND_DECIDE, "call/s1/other", sent) or "")
    assert "does not match" in (KEYS.check(proof.KIND_CANCEL, WF, sent) or "")


@pytest.mark.parametrize("change", [
    {"decided_by": "mallory"}, {"via": "slack"}, {"principal_id": "key:admin"},
    {"approver": "bob"}, {"decision": "deny"}, {"self_approved": True},
    {"remember": RememberSpec(scope="workspace", ttl_seconds=3600, command_prefix="python3")},
    {"reason": "looks fine"}, {"request_id": "req-2"},
])
def test_changing_any_field_breaks_the_proof(change: dict[str, object]) -> None:
    sent = proof.prove(decision(), proof.KIND_DECIDE, WF, KEYS)
    altered = sent.model_copy(update=change)
    assert KEYS.check(proof.KIND_DECIDE, WF, altered) is not None


def test_no_proof_an_unknown_key_or_another_secret_is_refused() -> None:
    assert "no proof" in (KEYS.check(proof.KIND_DECIDE, WF, decision()) or "")
    forged = decision(proof=Proof(key_id="k1", mac="00" * 32))
    assert "does not match" in (KEYS.check(proof.KIND_DECIDE, WF, forged) or "")
    other = ProofKeys.from_secrets({"k1": os.urandom(32)}, "k1")
    by_other = proof.prove(decision(), proof.KIND_DECIDE, WF, other)
    assert KEYS.check(proof.KIND_DECIDE, WF, by_other) is not None
    unknown = ProofKeys.from_secrets({"k9": os.urandom(32)}, "k9")
    by_unknown = proof.prove(decision(), proof.KIND_DECIDE, WF, unknown)
    assert "unknown key id 'k9'" in (KEYS.check(proof.KIND_DECIDE, WF, by_unknown) or "")


def test_rotation_old_keys_verify_the_new_key_signs() -> None:
    s1, s2 = os.urandom(32), os.urandom(32)
    old = ProofKeys.from_secrets({"k1": s1}, "k1")
    rotated = ProofKeys.from_secrets({"k1": s1, "k2": s2}, "k2")
    before = proof.prove(decision(), proof.KIND_DECIDE, WF, old)
    after = proof.prove(decision(), proof.KIND_DECIDE, WF, rotated)
    assert after.proof is not None and after.proof.key_id == "k2"
    assert rotated.check(proof.KIND_DECIDE, WF, before) is None
    assert rotated.check(proof.KIND_DECIDE, WF, after) is None


def test_the_proof_survives_the_wire() -> None:
    """What the worker parses (JSON) verifies like what the API signed."""
    sent = proof.prove(decision(edited_input={"path": "a.txt", "n": 1.5, "x": [1, None],
                                              "odd": float("nan"), "u": "é\u2028"}),
                       proof.KIND_DECIDE, WF, KEYS)
    received = DecideInput.model_validate_json(sent.model_dump_json())
    assert KEYS.check(proof.KIND_DECIDE, WF, received) is None


def test_installed_keys_verify_in_workflows() -> None:
    keys = ProofKeys.from_secrets({"installed-1": os.urandom(32)}, "installed-1")
    sent = proof.prove(decision(), proof.KIND_DECIDE, WF, keys)
    assert proof.problem(sent, proof.KIND_DECIDE, WF) is not None
    proof.install(keys)
    assert "installed-1" in proof.installed_ids()
    assert proof.problem(sent, proof.KIND_DECIDE, WF) is None


def test_a_message_without_a_proof_field_cannot_be_proven() -> None:
    class Bare(BaseModel):
        x: int = 1

    with pytest.raises(TypeError, match="no 'proof' field"):
        proof.prove(Bare(), proof.KIND_CLAIM, WF, KEYS)


#: A decide message as an API of the release before RFC 8785 proved it (encoding
#: v1, json.dumps with ASCII escapes; key: 32 bytes of "k"), made with that
#: release's code: non-ASCII fields spell differently in v2.
OLD_MESSAGE = {"request_id": "req-1", "decision": "allow", "decided_by": "Zoë", "via": "api",
               "reason": "ok ☕ 😀"}
OLD_MAC = "27bb1e2a53da8cf8330a6c4e72a153774f6e20624001901951f23ee7d0628a65"


def test_a_proof_made_before_rfc8785_still_verifies() -> None:
    keys = ProofKeys.from_secrets({"k1": b"k" * 32}, "k1")
    old = decision(**OLD_MESSAGE).model_copy(update={"proof": Proof(key_id="k1", mac=OLD_MAC)})
    assert keys.check(proof.KIND_DECIDE, WF, old) is None
    altered = old.model_copy(update={"reason": "ok"})
    assert "does not match" in (keys.check(proof.KIND_DECIDE, WF, altered) or "")
    # New proofs cover the RFC 8785 bytes (v2), not the old ones.
    fresh = proof.prove(decision(**OLD_MESSAGE), proof.KIND_DECIDE, WF, keys)
    assert fresh.proof is not None and fresh.proof.mac != OLD_MAC
    assert keys.check(proof.KIND_DECIDE, WF, fresh) is None


def test_proofs_cover_the_canonical_json() -> None:
    from parkgate import jcs

    msg = decision(reason="ok ☕")
    data = proof.canonical(proof.KIND_DECIDE, WF, msg)
    assert data == jcs.canonical_bytes(
        {"v": 2, "kind": "decide", "workflow_id": WF,
         "message": {"request_id": "req-1", "decision": "allow", "decided_by": "alice",
                     "via": "api", "reason": "ok ☕"}})
