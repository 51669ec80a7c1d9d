"""Signalling an asyncio child without stealing its exit status.

``asyncio.subprocess.Process.kill()`` goes through ``Popen.send_signal``, which
first polls the pid: a child that has just exited is reaped right there, and
asyncio's child watcher (a thread blocked in ``waitpid`` for it) then finds it
gone, logs "Unknown child process pid …, will report returncode 255" and
reports 255 instead of the real status. Signalling the pid directly leaves
the reaping to the watcher. Until the watcher has reaped it (``returncode``
still None) the pid cannot have been reused: an exited child stays a zombie.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal


def signal_child(
    proc: asyncio.subprocess.Process, sig: signal.Signals = signal.SIGKILL
) -> None:
    """Send ``sig`` to a child that has not been reaped yet; else do nothing."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
