"""Settings of the local sandbox host (``AGENTBUS_SANDBOXHOST_*``)."""

from __future__ import annotations

import msgspec


class SandboxHostSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Configuration of ``agentbus sandboxhost``; dev defaults for all but the key."""

    sandboxhost_listen: str = "127.0.0.1:49982"
    sandboxhost_data_dir: str = "./.agentbus/sandboxhost"
    # Empty: read <data dir>/api_key, or generate it there on first start.
    sandboxhost_api_key: str = ""
    # "auto" uses bubblewrap when it works, else runs unisolated (loudly).
    sandboxhost_isolation: str = "auto"
    sandboxhost_bwrap: str = "/usr/bin/bwrap"
    # Python inside the sandbox's root view that runs the per-sandbox supervisor.
    sandboxhost_python: str = "/usr/bin/python3"
    # Host uid/gid the sandbox runs as when the host is root (never 0).
    sandboxhost_uid: int = 61000
    sandboxhost_gid: int = 61000
    # Default of every sandbox's own network namespace: "internet" (egress via
    # slirp4netns, no host or private addresses) or "none" (loopback only).
    sandboxhost_network: str = "internet"
    # "auto" uses cgroups where they can be created; "off" forces the fallback
    # (SIGSTOP/SIGCONT pause, rlimits).
    sandboxhost_cgroups: str = "auto"
    sandboxhost_cpu: float = 2.0
    sandboxhost_memory_mb: int = 2048
    sandboxhost_pids: int = 512
    # Per-sandbox disk quota (a loop-mounted ext4 image; needs root). 0: none.
    sandbox_disk_mb: int = 4096
    # Built template layers, shared by the hosts of this user and keyed by
    # recipe hash. Empty: $XDG_CACHE_HOME (or ~/.cache)/agentbus/templates.
    sandboxhost_template_cache: str = ""
    # Templates built in the background when the host starts (comma-separated).
    sandboxhost_prebuild: str = "default"
    # How long a create waits for its template's build before a 503.
    sandboxhost_template_wait_s: float = 45.0
    sandboxhost_default_timeout: int = 300
    sandboxhost_max_timeout: int = 86400
    sandboxhost_log_level: str = "INFO"
    # After a restart the host listens at once and boots the sandboxes that were
    # running in the background, this many at a time (services/sandboxhost/restore.py).
    sandboxhost_restore_concurrency: int = 4
    # How long a request for a sandbox still restoring waits before a 503.
    sandboxhost_restore_wait_s: float = 30.0
    # Test hook: restore boots wait for POST /admin/faults {"release_restore": true}.
    sandboxhost_restore_hold: bool = False


CHOICES = {
    "sandboxhost_isolation": ("auto", "bwrap", "none"),
    "sandboxhost_network": ("internet", "none"),
    "sandboxhost_cgroups": ("auto", "off"),
}


def check_choices(settings: SandboxHostSettings) -> tuple[str, str] | None:
    """(field, problem) of the first field outside its allowed values, if any."""
    for field, allowed in CHOICES.items():
        value = getattr(settings, field)
        if value not in allowed:
            return field, f"must be one of {', '.join(allowed)}, not {value!r}"
    if ":" not in settings.sandboxhost_listen:
        return "sandboxhost_listen", "must be HOST:PORT"
    return None
