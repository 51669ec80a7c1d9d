#!/usr/bin/env bash
# Shared set-up for scripts/up and scripts/test: a .venv with agentbus and its
# tools, and bubblewrap for sandbox isolation when we may install it. Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "agentbus needs Python >= 3.11 (found $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi

stamp=".venv/.agentbus-installed"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "installing agentbus and its dependencies into .venv…" >&2
  log=.venv/install.log
  if ! { .venv/bin/python -m pip install --upgrade pip \
         && .venv/bin/python -m pip install -e '.[dev]'; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "pip install failed; full log in $log" >&2
    exit 1
  fi
  touch "$stamp"
fi

# bubblewrap isolates each sandbox; slirp4netns gives its own network namespace
# a route out, nftables keeps host and private addresses out of reach. Without
# them the sandbox host runs unisolated / without internet (and says so loudly).
# Installed only when we are root and apt-get exists.
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v slirp4netns >/dev/null 2>&1 || missing+=(slirp4netns)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]} (apt-get)…" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null \
      || echo "warning: could not install ${missing[*]}; sandboxes lose isolation or internet" >&2
  else
    echo "warning: ${missing[*]} not found; sandboxes lose isolation or internet" >&2
  fi
fi

# Local sandbox templates (services/sandboxhost/templates.py) fetch Debian
# packages with `apt-get download`, which needs package lists.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
   && ! ls /var/lib/apt/lists/ 2>/dev/null | grep -q '_Packages'; then
  apt-get update -qq >/dev/null \
    || echo "warning: apt-get update failed; templates with apt packages will not build" >&2
fi

# Debian's chromium for the web client's browser tests (playwright drives it by
# executable_path; playwright's own browser download is not reachable).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium (apt-get)…" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null \
      || echo "warning: could not install chromium; the web client's browser tests will skip" >&2
  else
    echo "warning: chromium not found; the web client's browser tests will skip" >&2
  fi
fi
