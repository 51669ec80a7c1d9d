"""``agentbus token DEVICE_ID [--data-dir D] [--ttl SECONDS]``: print a device token."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from services.gateway.tokens import DEFAULT_TTL_S, TokenError, issue, load_secret


def main(argv: list[str]) -> int:
    """Print a token signed with the same secret the gateway uses."""
    parser = argparse.ArgumentParser(prog="agentbus token")
    parser.add_argument("device_id")
    parser.add_argument(
        "--data-dir", default=os.environ.get("AGENTBUS_DATA_DIR", ".agentbus")
    )
    parser.add_argument("--ttl", type=int, default=DEFAULT_TTL_S, help="seconds")
    args = parser.parse_args(argv)
    secret = load_secret(Path(args.data_dir), os.environ.get("AGENTBUS_DEVICE_SECRET"))
    try:
        print(issue(secret, args.device_id, args.ttl))
    except TokenError as exc:
        print(f"agentbus token: {exc}", file=sys.stderr)
        return 2
    return 0
