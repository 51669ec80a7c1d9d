"""``agentbus sandboxhost [--listen HOST:PORT] [--data-dir D]`` and ``… env``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from services.common.lifecycle import serve_until_signalled
from services.common.logs import configure_logging
from services.common.settings import SettingsError, env_name, load_settings
from services.sandboxhost.errors import SandboxHostError
from services.sandboxhost.service import KEY_FILE, LISTEN_FILE, run
from services.sandboxhost.settings import SandboxHostSettings, check_choices


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentbus sandboxhost", description=__doc__)
    p.add_argument("command", nargs="?", choices=["serve", "env"], default="serve")
    p.add_argument("--listen", help="HOST:PORT (default 127.0.0.1:49982)")
    p.add_argument(
        "--data-dir", help="state directory (default ./.agentbus/sandboxhost)"
    )
    p.add_argument("--isolation", choices=["auto", "bwrap", "none"])
    return p


def print_env(settings: SandboxHostSettings) -> int:
    """Print the E2B_* lines that point any E2B client at the running host."""
    data_dir = Path(settings.sandboxhost_data_dir)
    try:
        url = (data_dir / LISTEN_FILE).read_text().strip()
    except FileNotFoundError:
        print(f"no sandbox host has run with data dir {data_dir}", file=sys.stderr)
        return 1
    key = settings.sandboxhost_api_key
    if not key:
        try:
            key = (data_dir / KEY_FILE).read_text().strip()
        except FileNotFoundError:
            print(
                f"no API key in {data_dir}: set AGENTBUS_SANDBOXHOST_API_KEY",
                file=sys.stderr,
            )
            return 1
    print(f"E2B_API_URL={url}")
    print(f"E2B_SANDBOX_URL={url}")
    print(f"E2B_API_KEY={key}")
    return 0


def main(argv: list[str]) -> int:
    """Entry point of ``agentbus sandboxhost``."""
    args = _parser().parse_args(argv)
    overrides = {
        "sandboxhost_listen": args.listen,
        "sandboxhost_data_dir": args.data_dir,
        "sandboxhost_isolation": args.isolation,
    }
    try:
        settings = load_settings(SandboxHostSettings, os.environ, overrides)
    except SettingsError as exc:
        print(f"agentbus sandboxhost: {exc}", file=sys.stderr)
        return 2
    bad = check_choices(settings)
    if bad is not None:
        print(f"agentbus sandboxhost: {env_name(bad[0])}: {bad[1]}", file=sys.stderr)
        return 2
    if args.command == "env":
        return print_env(settings)
    configure_logging("sandboxhost", settings.sandboxhost_log_level)
    try:
        serve_until_signalled(run, settings)
    except SandboxHostError as exc:
        print(f"agentbus sandboxhost: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
