#!/usr/bin/env bash
# The whole test suite: install, lint, type-check, test. The README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null
# Strict editable mode: the installed `parkgate.*` names map onto the source
# folders through a link tree, which mypy and import-linter can read (the
# default import-hook mode hides the package from static tools).
.venv/bin/python -m pip install --quiet -e '.[dev]' --config-settings editable_mode=strict

# System tools the suite uses, from Debian's packages when missing (root only):
# headless Chromium for the browser tests (never downloaded by Playwright) and
# docker-compose, which checks docker-compose.yml without a Docker engine;
# npm (with Node.js), with which tests/fixtures/agent_clis.py installs the
# pinned Codex, Gemini and opencode CLIs into a cache once (docs/TESTING.md).
missing=()
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
{ docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1; } \
    || missing+=(docker-compose)
if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]} for the tests..."
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null) \
        || echo "warning: could not install ${missing[*]}; tests that need them will fail under CI" >&2
fi

# Workflow code is re-imported for every workflow instance in the sandbox;
# bytecode on disk saves that compile even where PYTHONDONTWRITEBYTECODE is set.
.venv/bin/python -m compileall -q "$(.venv/bin/python -c 'import os, parkgate; print(os.path.dirname(parkgate.__file__))')" >/dev/null

echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy
echo "== import-linter (.importlinter: layers point down)"
.venv/bin/lint-imports --no-cache
# With arguments: one pytest over exactly those (`bash scripts/test.sh tests/api -x`).
if [ "$#" -gt 0 ]; then
    echo "== pytest $*"
    exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
fi

# The whole suite in two lanes that run at the same time (docs/TESTING.md):
# 1. everything but the fault and hostile suites, on PARKGATE_TEST_WORKERS
#    pytest-xdist workers (each with its own dev server, time-skipping server
#    and throwaway databases), longest tests first (tests/fixtures/ordering.py);
# 2. tests/faults and tests/hostile in one process beside it: their scenarios
#    run whole stacks of subprocesses one after another, never two at once.
# Most of the suite waits (on timers, restarts, subprocesses), so the lanes
# share two cores well. PARKGATE_TEST_LANES=1 runs lane 2 after lane 1 instead.
# The exit code is the first failing lane's (5, "no tests collected", only
# when neither lane ran a test).
workers="${PARKGATE_TEST_WORKERS:-2}"
serial=(tests/faults tests/hostile)
lane1=(.venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" --dist load
       --maxschedchunk 2 --durations=${PARKGATE_TEST_DURATIONS:-15} "${serial[@]/#/--ignore=}")
lane2=(.venv/bin/python -m pytest -q -p no:cacheprovider --durations=${PARKGATE_TEST_DURATIONS:-10} "${serial[@]}")
status=()
started=$SECONDS
if [ "${PARKGATE_TEST_LANES:-2}" = "1" ]; then
    echo "== pytest, lane 1 of 2: all but ${serial[*]}, on $workers workers"
    stage=0; "${lane1[@]}" || stage=$?; status+=("$stage")
    echo "== pytest, lane 2 of 2: ${serial[*]}"
    stage=0; "${lane2[@]}" || stage=$?; status+=("$stage")
else
    lane2_log="$(mktemp)"
    echo "== pytest, lane 2 (${serial[*]}) starts in the background; its output follows lane 1's"
    "${lane2[@]}" >"$lane2_log" 2>&1 &
    lane2_pid=$!
    trap 'kill "$lane2_pid" 2>/dev/null || true; rm -f "$lane2_log"' EXIT
    echo "== pytest, lane 1: all but ${serial[*]}, on $workers workers"
    stage=0; "${lane1[@]}" || stage=$?; status+=("$stage")
    echo "== pytest, lane 2: ${serial[*]} (after $((SECONDS - started)) s; following until it ends)"
    tail -n +1 --pid="$lane2_pid" -f "$lane2_log"
    stage=0; wait "$lane2_pid" || stage=$?; status+=("$stage")
fi
echo "== pytest took $((SECONDS - started)) s"

rc=5
for s in "${status[@]}"; do
    if [ "$s" -ne 0 ] && [ "$s" -ne 5 ]; then
        exit "$s"
    fi
    [ "$s" -eq 0 ] && rc=0
done
exit "$rc"
