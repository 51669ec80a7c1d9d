"""``agentbus chat [SID] [--data-dir D | --url U --token T]``: a terminal client.

Creates a session (or attaches to ``SID``), prints its transcript as it
streams, sends typed lines as prompts, answers approvals, and resumes after any
drop. With a data dir it mints a token the way ``agentbus token`` does and finds
the gateway where ``agentbus up`` puts it (``AGENTBUS_HTTP``, else its default).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

import aiohttp

from services.chat.console import HELP, Console
from services.chat.view import View
from services.common.settings import SettingsError, load_settings
from services.gateway.tokens import TokenError, issue, load_secret
from services.launcher.settings import LauncherSettings


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentbus chat", description=__doc__)
    p.add_argument("sid", nargs="?", help="attach to this session (else create one)")
    p.add_argument("--url", help="gateway base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--token", help="device token (else minted from the data dir)")
    p.add_argument("--data-dir", help="data dir of `agentbus up` (holds the secret)")
    p.add_argument("--device", default="local", help="device id when minting")
    p.add_argument("--title", default="chat", help="title of a new session")
    return p


def resolve(args: argparse.Namespace) -> tuple[str, str]:
    """(base URL, token) from the flags, the data dir and the environment."""
    url = args.url
    if url is None:
        launcher = load_settings(LauncherSettings, os.environ)
        url = f"http://{launcher.http}"
    token = args.token
    if token is None:
        data_dir = args.data_dir or os.environ.get("AGENTBUS_DATA_DIR", ".agentbus")
        secret_env = os.environ.get("AGENTBUS_DEVICE_SECRET")
        if not secret_env and not (Path(data_dir) / "device_secret").exists():
            raise TokenError(f"no --token and no device secret in {data_dir}")
        token = issue(load_secret(Path(data_dir), secret_env), args.device)
    return url.rstrip("/"), token


async def run(base: str, token: str, sid: str | None, title: str) -> int:
    """Attach (or create), then chat until /quit; the exit status."""
    view = View()
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        if sid is None:
            async with http.post(f"{base}/v1/sessions", json={"title": title}) as r:
                if r.status != 201:
                    view.line(
                        f"! could not create a session: {r.status} {await r.text()}"
                    )
                    return 1
                sid = str((await r.json())["session_id"])
        else:
            async with http.get(f"{base}/v1/sessions/{sid}") as r:
                if r.status != 200:
                    view.line(f"! session {sid}: {r.status} {await r.text()}")
                    return 1
        view.line(f"session {sid} at {base}\n{HELP}")
        return await Console(http, base, sid, view).run()


def main(argv: list[str]) -> int:
    """Parse flags and chat."""
    args = _parser().parse_args(argv)
    try:
        base, token = resolve(args)
    except (SettingsError, TokenError) as exc:
        print(f"agentbus chat: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run(base, token, args.sid, args.title))
    except aiohttp.ClientError as exc:
        print(f"agentbus chat: cannot reach {base}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
