"""Save histories from a kept fault scenario as replay fixtures.

    python -m tests.faults.harness.histories KEPT_DIR WORKFLOW_ID [WORKFLOW_ID...]

KEPT_DIR is a scenario directory kept with PARKGATE_FAULTS_KEEP=1 (it holds
`temporal.db`). A dev server is started on that state file, each workflow's
history is fetched and written to tests/faults/histories/crash-<tool_use_id>.json
with machine paths inside payloads replaced by neutral ones.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from parkgate.durable.codec import EncryptionCodec
from tests.faults.harness.temporal import DevServer
from tests.fixtures.temporal import TEST_CONVERTER, TEST_PLUGIN

OUT = Path(__file__).resolve().parents[1] / "histories"
PROJECT_ROOT = str(Path(__file__).resolve().parents[3])
_SCENARIO_ROOT = re.compile(r"/[^\"\s]*?/parkgate-(?:faults|hostile)-[A-Za-z0-9_]+/stack\d*")


def _decrypt_in_place(node: dict[str, Any]) -> None:
    """Turn an encrypted payload (the stack uses the test key) back into plain
    form, so paths can be neutralised; replays decode plain payloads as-is."""
    meta = node.get("metadata")
    if not isinstance(meta, dict) or not isinstance(node.get("data"), str):
        return
    codec = TEST_CONVERTER.payload_codec
    if not isinstance(codec, EncryptionCodec):
        return
    # Lenient: plaintext (core's own local-activity marker data) stays as is;
    # the strict codec would turn it into a refused payload.
    codec = codec.lenient()
    payload = Payload(
        metadata={k: base64.b64decode(v) for k, v in meta.items()},
        data=base64.b64decode(node["data"]),
    )
    plain = codec.decrypt(payload)
    if plain is not payload:
        node["metadata"] = {k: base64.b64encode(v).decode() for k, v in plain.metadata.items()}
        node["data"] = base64.b64encode(plain.data).decode()


def neutralise(history_json: str, project_root: str) -> str:
    """Decrypt payloads, then replace scenario and checkout paths inside them."""

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            _decrypt_in_place(node)
            for key, value in node.items():
                if key == "data" and isinstance(value, str):
                    try:
                        raw = base64.b64decode(value, validate=True).decode("utf-8")
                    except (binascii.Error, UnicodeDecodeError):
                        continue
                    new = _SCENARIO_ROOT.sub("/srv/parkgate", raw).replace(project_root, "/srv/src")
                    if new != raw:
                        node[key] = base64.b64encode(new.encode()).decode()
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    data = json.loads(history_json)
    walk(data)
    return json.dumps(data, indent=1)


async def export(kept: Path, workflow_ids: list[str]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        server = DevServer(kept, log_dir=Path(scratch))
        await server.start()
        try:
            client = await Client.connect(server.address, plugins=[TEST_PLUGIN])
            OUT.mkdir(exist_ok=True)
            for wid in workflow_ids:
                history = await client.get_workflow_handle(wid).fetch_history()
                target = OUT / f"crash-{wid.rsplit('/', 1)[-1]}.json"
                target.write_text(neutralise(history.to_json(), PROJECT_ROOT))
                print(f"saved {target.name} ({len(history.events)} events)")
        finally:
            await server.stop()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    asyncio.run(export(Path(sys.argv[1]), sys.argv[2:]))
