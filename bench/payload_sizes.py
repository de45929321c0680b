"""How many bytes a call's activity inputs put in Temporal history: the rows
older workflows shipped (`run_row`, `final`, `update`) against the ids and
facts they send now (`CallRef`, issue 16), for one `write_file` whose content
is 0.5, 2 and 8 KB. JSON as the converter writes it, before encryption.

Run: `python -m bench.payload_sizes`.
"""

from __future__ import annotations

import asyncio
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from parkgate.calls.records import CallRef, CallStatus, CallUpdate
from parkgate.durable.payloads import (
    ApprovalRequest,
    ClassifyInput,
    ExecuteInput,
    prepared_fields,
)
from parkgate.models import Session, ToolUseBlock
from parkgate.runtime.worker import build_pipeline
from parkgate.settings import Settings
from parkgate.verdicts import NeedsApproval

SIZES = (512, 2048, 8192)


def _bytes(payload: BaseModel) -> int:
    return len(payload.model_dump_json())


async def _rows(content_bytes: int, root: Path) -> list[tuple[str, int, int]]:
    workspace = root / "ws"
    workspace.mkdir(exist_ok=True)
    settings = Settings(data_dir=root / "data", workspace_roots=[workspace],
                        link_secret="bench-payload-sizes")
    pipeline = build_pipeline(settings)
    session = Session(session_id="sess-0123456789", turn_id="turn-1",
                      workspace_path=str(workspace))
    call = ToolUseBlock(id="toolu_01ABCDEFGHIJKLMN", name="write_file",
                        input={"path": "src/module.py", "content": "x" * content_bytes})
    verdict = await pipeline.classify(call, session)
    assert isinstance(verdict, NeedsApproval), verdict
    now = datetime.now(UTC)
    ref = CallRef(session_id=session.session_id, tool_use_id=call.id, turn_id=session.turn_id,
                  tool_name=call.name, workflow_id=f"call/{session.session_id}/{call.id}",
                  run_id="0193a7c2-5d1e-7cc4-9b1f-2d3e4f5a6b7c", created_at=now)
    row = CallUpdate.model_validate({**ref.model_dump(), "input": call.input,
                                     "verdict": "needs_approval",
                                     **prepared_fields(verdict.prepared)})
    request = {"info": verdict.info, "session": session, "call": call, "requested_at": now,
               "expires_at": None, "workflow_id": ref.workflow_id, "run_id": ref.run_id}
    prepared, approved = verdict.prepared, verdict.prepared.input_hash
    pairs = [
        ("classify",
         ClassifyInput(call=call, session=session,
                       run_row=row.model_copy(update={"status": CallStatus.QUEUED})),
         ClassifyInput(call=call, session=session, ref=ref)),
        ("create_approval",
         ApprovalRequest(**request, update=row.model_copy(update={"status": CallStatus.PARKED})),
         ApprovalRequest(**request, ref=ref)),
        ("execute",
         ExecuteInput(prepared=prepared, approved_hash=approved, final=row),
         ExecuteInput(prepared=prepared, approved_hash=approved, ref=ref,
                      request_id=verdict.info.request_id)),
    ]
    return [(name, _bytes(old), _bytes(new)) for name, old, new in pairs]


def main() -> None:
    print("| input content | activity input | rows (before), bytes | ids + facts, bytes |")
    print("|---:|---|---:|---:|")
    for size in SIZES:
        with tempfile.TemporaryDirectory() as tmp:
            for name, old, new in asyncio.run(_rows(size, Path(tmp))):
                print(f"| {size:,} B | {name} | {old:,} | {new:,} |")


if __name__ == "__main__":
    main()
