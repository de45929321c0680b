#!/usr/bin/env bash
# The whole test suite: install, lint, type-check, test. The README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null
.venv/bin/python -m pip install --quiet -e '.[dev]'

# Headless Chromium for the browser tests (Debian's package; never downloaded by Playwright).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium for browser tests..."
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
        || echo "warning: could not install chromium; browser tests will fail under CI" >&2
fi

# Workflow code is re-imported for every workflow instance in the sandbox;
# bytecode on disk saves that compile even where PYTHONDONTWRITEBYTECODE is set.
.venv/bin/python -m compileall -q dispatcher workflows activities >/dev/null

echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy
echo "== pytest"
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
