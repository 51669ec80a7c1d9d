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

# The JavaScript SDK (npm `e2b`), project-local, for tests/compat/test_e2b_js.py.
js=.venv/e2b-js
if command -v npm >/dev/null 2>&1 && [ ! -f "$js/node_modules/e2b/package.json" ]; then
  mkdir -p "$js"
  [ -f "$js/package.json" ] || echo '{"private": true}' > "$js/package.json"
  (cd "$js" && npm install --no-audit --no-fund --silent 'e2b@^2')
fi
[ -f "$js/node_modules/e2b/package.json" ] && echo "e2b (JS) in $js"
true
