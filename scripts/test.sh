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
# docker-compose, which checks docker-compose.yml without a Docker engine.
missing=()
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

# The whole suite in two stages (docs/TESTING.md):
# 1. everything but the fault and hostile suites, on PARKGATE_TEST_WORKERS
#    pytest-xdist workers (each with its own dev server, time-skipping server
#    and throwaway databases);
# 2. tests/faults and tests/hostile alone, in one process: they run whole
#    stacks of subprocesses and must not compete with other tests for 2 cores.
# Both stages always run; the exit code is the first failing stage's (5, "no
# tests collected", only when neither stage ran a test).
workers="${PARKGATE_TEST_WORKERS:-2}"
serial=(tests/faults tests/hostile)
status=()
echo "== pytest, stage 1 of 2: all but ${serial[*]}, on $workers workers"
stage=0
.venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" --dist load \
    --durations=15 "${serial[@]/#/--ignore=}" || stage=$?
status+=("$stage")
echo "== pytest, stage 2 of 2: ${serial[*]}, alone"
stage=0
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=10 "${serial[@]}" || stage=$?
status+=("$stage")

rc=5
for s in "${status[@]}"; do
    if [ "$s" -ne 0 ] && [ "$s" -ne 5 ]; then
        exit "$s"
    fi
    [ "$s" -eq 0 ] && rc=0
done
exit "$rc"
