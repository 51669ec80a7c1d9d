"""The ``HOST:PORT`` listen address every HTTP service takes (gateway, sandbox host)."""

from __future__ import annotations

DEFAULT_HOST = "127.0.0.1"


def split_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` → (host, port); an empty host means ``127.0.0.1``."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listen address {listen!r}: expected HOST:PORT")
    return host or DEFAULT_HOST, int(port)
