"""The embedded nats-server's configuration: per-service users and permissions.

Every service connects with its own generated password; the sandbox host has no
NATS user at all. So code inside a sandbox, even with host networking, holds no
credential to connect with (design §6).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
from pathlib import Path

import bcrypt

SERVICES = ("gateway", "pool", "broker", "projector", "notifier", "admin")
# The roles compose/ runs (its nats.conf names a password variable for each).
COMPOSE_ROLES = ("gateway", "pool", "broker", "projector", "notifier")

# What each role may publish and subscribe to: allow-lists, nothing else.
# {p} is the bus prefix, {P} its upper-case form (stream and bucket names).
# Only the gateway, the pool and the broker may publish into the log; every
# service gets its KV buckets ($KV.<bucket>.>) and the object store ($O.…) by
# name; every log writer the id→seq index of caller-given event ids
# ($KV.<P>_eventids). Requesters receive replies on _INBOX.>; responders
# publish to it.
_JS_CLIENT = ["$JS.API.>", "$JS.ACK.>", "$JS.FC.>"]
_LOG = "{p}.log.>"
_STREAM_READ = (
    "$JS.API.STREAM.INFO.*",
    "$JS.API.STREAM.MSG.GET.*",
    "$JS.API.DIRECT.GET.*",
    "$JS.API.DIRECT.GET.*.>",
)
_STREAM_DECLARE = ("$JS.API.STREAM.CREATE.*", "$JS.API.STREAM.UPDATE.*")
PUBLISH: dict[str, list[str]] = {
    "gateway": [
        _LOG,
        *_JS_CLIENT,
        "$KV.{P}_sessions.>",
        "$KV.{P}_idem.>",
        "$KV.{P}_eventids.>",
        "$KV.{P}_summaries.>",
        "$KV.{P}_webhooks.>",
        "$KV.{P}_streams.>",
        "{p}.broker.files.>",
        "{p}.projector.read",
    ],
    "pool": [
        _LOG,
        *_JS_CLIENT,
        "$KV.{P}_leases.>",
        "$KV.{P}_eventids.>",
        "$KV.{P}_assign.>",
        "$KV.{P}_snapshots.>",
        "{p}.wake.*",
        "{p}.broker.bind",
        "{p}.broker.ctl.>",
        "{p}.projector.read",
    ],
    "broker": [
        _LOG,
        *_JS_CLIENT,
        "$KV.{P}_sandboxes.>",
        "$KV.{P}_eventids.>",
        "$KV.{P}_assign.>",
        "$O.{P}_archives.>",
        "{p}.projector.read",
        "_INBOX.>",
    ],
    # The projector reads the log through its own consumer and answers reads;
    # its JetStream API is limited to reading the log stream (info, consume,
    # get: the writers declare it, so it cannot change the log's config) and
    # to the session index it re-puts and its own lease bucket (declared).
    "projector": [
        "$JS.API.INFO",
        *(
            api.replace("*", stream)
            for stream in ("{P}_LOG", "KV_{P}_sessions", "KV_{P}_projector")
            for api in _STREAM_READ
        ),
        *(
            api.replace("*", stream)
            for stream in ("KV_{P}_sessions", "KV_{P}_projector")
            for api in _STREAM_DECLARE
        ),
        "$JS.API.CONSUMER.*.{P}_LOG",
        "$JS.API.CONSUMER.*.{P}_LOG.>",
        "$JS.API.CONSUMER.*.*.{P}_LOG.>",
        "$JS.ACK.{P}_LOG.>",
        "$JS.FC.{P}_LOG.>",
        "$KV.{P}_sessions.>",
        "$KV.{P}_projector.>",  # the copier lease among replicas
        "{p}.projector.deadletter",
        "_INBOX.>",
    ],
    # Push: its own outbox stream and consumers, the webhook registrations.
    "notifier": [*_JS_CLIENT, "$KV.{P}_webhooks.>", "{p}.webhook.*"],
    "admin": [">"],
}
SUBSCRIBE: dict[str, list[str]] = {
    "gateway": ["_INBOX.>"],
    "pool": ["_INBOX.>"],
    "broker": ["_INBOX.>", "{p}.broker.>"],
    "projector": ["_INBOX.>", "{p}.projector.read"],
    "notifier": ["_INBOX.>"],
    "admin": [">"],
}


def allowed(role: str, prefix: str = "agentbus") -> tuple[list[str], list[str]]:
    """(publish, subscribe) allow-lists of one role for one bus prefix."""
    upper = prefix.upper().replace(".", "_").replace("-", "_")

    def fill(subjects: list[str]) -> list[str]:
        return [s.replace("{p}", prefix).replace("{P}", upper) for s in subjects]

    return fill(PUBLISH[role]), fill(SUBSCRIBE[role])


def load_credentials(nats_dir: Path) -> dict[str, str]:
    """Per-service passwords, generated once into a 0600 file."""
    path = nats_dir / "credentials.json"
    if path.exists():
        creds: dict[str, str] = json.loads(path.read_text())
        if set(creds) >= set(SERVICES):
            return creds
    creds = {name: secrets.token_urlsafe(24) for name in SERVICES}
    nats_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(creds, f)
    return creds


def render_config(creds: dict[str, str], prefix: str = "agentbus") -> str:
    """nats-server config text with one user per service.

    The config holds bcrypt hashes, not the passwords: nats-server verifies a
    ``$2a$`` password by hash (and warns about plaintext ones), so the file
    alone never lets anyone log in as a service.
    """
    return render_users(
        {n: json.dumps(password_hash(creds[n])) for n in SERVICES}, prefix
    )


@functools.lru_cache(maxsize=64)
def password_hash(password: str) -> str:
    """bcrypt at cost 10: ~50 ms per CONNECT, paid by nats-server per service
    connection, never per message. Cached: each node of a cluster renders it."""
    salted = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10))
    return salted.decode().replace("$2b$", "$2a$", 1)  # the prefix nats-server reads


def render_users(passwords: dict[str, str], prefix: str = "agentbus") -> str:
    """The ``authorization`` block for ``passwords`` (config expressions: a quoted
    string, or ``$VARIABLE`` as compose/ uses)."""
    users = []
    for name, password in passwords.items():
        pub, sub = allowed(name, prefix)
        users.append(
            f'    {{ user: "{name}", password: {password},\n'
            f"      permissions: {{ publish: {{ allow: {json.dumps(pub)} }},\n"
            f"                     subscribe: {{ allow: {json.dumps(sub)} }} }} }}"
        )
    return "authorization {\n  users: [\n" + ",\n".join(users) + "\n  ]\n}\n"


def compose_users() -> str:
    """The users block of compose/nats*.conf (passwords from the environment)."""
    return render_users({r: f"${r.upper()}_NATS_PASSWORD" for r in COMPOSE_ROLES})


def write_config(
    nats_dir: Path, creds: dict[str, str], prefix: str = "agentbus"
) -> Path:
    """Write the config (0600: it holds passwords) and return its path."""
    path = nats_dir / "nats.conf"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(render_config(creds, prefix))
    return path
