"""Process limits a busy service needs: open descriptors for 10k SSE clients.

Each SSE client holds one socket; the usual soft limit (1024) stops a gateway
near a thousand clients while the hard limit is often far higher. A process may
raise its soft limit up to the hard one; root may also raise the hard one.
Children inherit the result, so the launcher raising it covers every service.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

# Enough for 10k SSE clients plus NATS, files and sandboxes, with headroom.
WANTED_NOFILE = 65536


def raise_nofile(wanted: int = WANTED_NOFILE) -> tuple[int, int]:
    """Raise RLIMIT_NOFILE's soft limit toward ``wanted``; the (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return soft, hard
    if hard != resource.RLIM_INFINITY and hard < wanted:
        try:  # root (CAP_SYS_RESOURCE) may raise the hard limit too
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
            return wanted, wanted
        except (OSError, ValueError):
            wanted = hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (OSError, ValueError) as exc:
        log.warning("could not raise the open-file limit to %d: %s", wanted, exc)
    return resource.getrlimit(resource.RLIMIT_NOFILE)
