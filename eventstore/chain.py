"""The per-session hash chain: ``prev`` is the digest of the previous stored event."""

from __future__ import annotations

import hashlib


def digest(raw: bytes) -> str:
    """Digest of one stored event over its exact bytes (unknown types verify too)."""
    return "sha256:" + hashlib.sha256(raw).hexdigest()
