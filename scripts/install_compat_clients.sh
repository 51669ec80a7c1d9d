#!/usr/bin/env bash
# Install older E2B SDK releases beside the venv so the sandbox host's compat
# tests can run against them (tests/compat/test_old_clients.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
target=.venv/e2b245
if ! PYTHONPATH="$target" "$PY" -c 'import e2b, importlib.metadata as m; assert m.version("e2b").startswith("2.45")' 2>/dev/null; then
  "$PY" -m pip install --quiet --no-warn-conflicts --target "$target" 'e2b==2.45.*'
fi
echo "e2b 2.45 in $target"
