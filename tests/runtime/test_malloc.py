"""The arena cap: applied once on glibc, never over an operator's MALLOC_ARENA_MAX."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = "from parkgate.runtime.malloc import limit_arenas; print(limit_arenas())"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_applied_in_a_fresh_process_unless_the_operator_set_it() -> None:
    def run(**env: str) -> str:
        import os

        clean = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
        return subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env},
                              capture_output=True, text=True, check=True).stdout.strip()

    assert run() == "True"
    assert run(MALLOC_ARENA_MAX="4") == "False"

