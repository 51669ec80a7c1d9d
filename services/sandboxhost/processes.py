"""Processes of one sandbox as envd exposes them: start, stream, input, signals."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import os
import signal
import struct
import termios
from collections import OrderedDict
from typing import Any

from services.sandboxhost.errors import EnvdRpcError
from services.sandboxhost.link import SupervisorLink

Event = dict[str, Any]
# Output still arriving after the exit (a background child holding the pipe)
# is waited for this long before the end event goes out.
DRAIN_GRACE = 0.1
RETAINED = 256
SIGNAL_NAMES = {
    1: "hangup",
    2: "interrupt",
    3: "quit",
    6: "aborted",
    9: "killed",
    11: "segmentation fault",
    13: "broken pipe",
    15: "terminated",
}


def end_event(status: int) -> Event:
    """The envd ``end`` event for a wait status (Go ProcessState wording)."""
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
        end: Event = {"exited": True, "status": f"exit status {code}"}
        if code:
            end["exitCode"] = code
            end["error"] = end["status"]
        return end
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 9
    text = "signal: " + SIGNAL_NAMES.get(sig, f"signal {sig}")
    return {"exitCode": -1, "status": text, "error": text}


class SandboxProcess:
    """One process started through envd, with its output fan-out."""

    def __init__(self, pid: int, config: Event, tag: str | None, pty: bool) -> None:
        self.pid = pid
        self.config = config
        self.tag = tag
        self.pty = pty
        self.input_fd: int | None = None
        self.subscribers: set[asyncio.Queue[Event | None]] = set()
        self.status: int | None = None
        self.end: Event | None = None
        self.done = asyncio.Event()
        self.open_outputs: set[int] = set()
        self.timer: asyncio.TimerHandle | None = None
        # Set when the request's deadline killed it: its end is a timeout.
        self.expired = False
        self.write_lock = asyncio.Lock()

    def info(self) -> Event:
        """ProcessInfo for List."""
        out: Event = {"config": self.config, "pid": self.pid}
        if self.tag is not None:
            out["tag"] = self.tag
        return out

    def subscribe(self) -> asyncio.Queue[Event | None]:
        """A queue of events from now on (``None`` after the end event)."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        if self.end is not None:
            queue.put_nowait({"end": self.end})
            queue.put_nowait(None)
        else:
            self.subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Event | None]) -> None:
        """Stop delivering to a queue (its client went away)."""
        self.subscribers.discard(queue)

    def publish(self, event: Event) -> None:
        """Send an event to every subscriber; output nobody watches is dropped."""
        for queue in self.subscribers:
            queue.put_nowait(event)

    def finish(self) -> None:
        """Emit the end event once the process exited and its output drained."""
        if self.end is not None or self.status is None:
            return
        self.end = end_event(self.status)
        if self.timer is not None:
            self.timer.cancel()
        self.publish({"end": self.end})
        for queue in self.subscribers:
            queue.put_nowait(None)
        self.subscribers.clear()
        if self.input_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.input_fd)
            self.input_fd = None
        self.done.set()


class ProcessTable:
    """All envd processes of one sandbox, keyed by their pid in the sandbox."""

    def __init__(self) -> None:
        self.running: dict[int, SandboxProcess] = {}
        self.retained: OrderedDict[int, SandboxProcess] = OrderedDict()
        # Exits that arrive before the spawn reply was handled (same read batch).
        self._early: OrderedDict[int, int] = OrderedDict()
        self._loop = asyncio.get_running_loop()

    async def start(
        self,
        link: SupervisorLink,
        request: Event,
        env: dict[str, str],
        timeout: float,  # noqa: ASYNC109 - the request's process deadline
        root: bool = False,
    ) -> SandboxProcess:
        """Spawn a process via the supervisor and start reading its output."""
        config = request.get("process") or {}
        if not config.get("cmd"):
            raise EnvdRpcError("invalid_argument", "process.cmd is required")
        pty = request.get("pty")
        stdin = pty is not None or request.get("stdin", True) is not False
        mine, theirs = self._stdio(pty, stdin)
        spawn = {"cmd": config["cmd"], "args": config.get("args", []), "env": env}
        spawn.update(cwd=config.get("cwd"), pty=pty is not None, root=root)
        try:
            reply, _ = await link.call("spawn", theirs, **spawn)
        except BaseException:
            for fd in mine:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        proc = SandboxProcess(
            int(reply["pid"]), config, request.get("tag"), pty is not None
        )
        self._attach(proc, mine, stdin)
        self.running[proc.pid] = proc
        if proc.pid in self._early:
            self.on_exit(proc.pid, self._early.pop(proc.pid))
        if timeout > 0:
            proc.timer = self._loop.call_later(timeout, self._expire, link, proc)
        return proc

    def _stdio(self, pty: Event | None, stdin: bool) -> tuple[list[int], list[int]]:
        """(host ends, sandbox ends) of the new process's stdio."""
        if pty is not None:
            master, slave = os.openpty()
            size = pty.get("size") or {}
            set_winsize(master, int(size.get("rows", 24)), int(size.get("cols", 80)))
            return [master], [slave]
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        if not stdin:
            return [out_r, err_r], [out_w, err_w]
        in_r, in_w = os.pipe2(os.O_CLOEXEC)
        return [out_r, err_r, in_w], [in_r, out_w, err_w]

    def _attach(self, proc: SandboxProcess, mine: list[int], stdin: bool) -> None:
        if proc.pty:
            proc.input_fd = os.dup(mine[0])
            self._read(proc, mine[0], "pty")
            return
        self._read(proc, mine[0], "stdout")
        self._read(proc, mine[1], "stderr")
        if stdin:
            os.set_blocking(mine[2], False)
            proc.input_fd = mine[2]

    def _read(self, proc: SandboxProcess, fd: int, kind: str) -> None:
        os.set_blocking(fd, False)
        proc.open_outputs.add(fd)
        size = 16384 if kind == "pty" else 32768

        def readable() -> None:
            try:
                data = os.read(fd, size)
            except BlockingIOError:
                return
            except OSError:  # EIO: the pty's last slave closed
                data = b""
            if data:
                proc.publish({"data": {kind: base64.b64encode(data).decode()}})
                return
            self._close_output(proc, fd)

        self._loop.add_reader(fd, readable)

    def _close_output(self, proc: SandboxProcess, fd: int) -> None:
        if fd not in proc.open_outputs:
            return
        proc.open_outputs.discard(fd)
        self._loop.remove_reader(fd)
        os.close(fd)
        if not proc.open_outputs:
            self._finish(proc)

    def on_exit(self, pid: int, status: int) -> None:
        """The supervisor reported an exit: end the stream once output drained."""
        proc = self.running.get(pid)
        if proc is None:
            self._early[pid] = status
            while len(self._early) > RETAINED:
                self._early.popitem(last=False)
            return
        proc.status = status
        if not proc.open_outputs:
            self._finish(proc)
            return
        self._loop.call_later(DRAIN_GRACE, self._force_finish, proc)

    def _force_finish(self, proc: SandboxProcess) -> None:
        for fd in list(proc.open_outputs):
            self._close_output(proc, fd)

    def _finish(self, proc: SandboxProcess) -> None:
        if proc.status is None:
            return
        proc.finish()
        self.running.pop(proc.pid, None)
        self.retained[proc.pid] = proc
        while len(self.retained) > RETAINED:
            self.retained.popitem(last=False)

    def _expire(self, link: SupervisorLink, proc: SandboxProcess) -> None:
        """The request's deadline passed: kill the process group (envd semantics)."""
        if proc.end is None:
            proc.expired = True
            task = self._loop.create_task(self._quiet_kill(link, proc.pid))
            task.add_done_callback(lambda _: None)

    async def _quiet_kill(self, link: SupervisorLink, pid: int) -> None:
        with contextlib.suppress(EnvdRpcError):
            await link.call("signal", pid=pid, sig=signal.SIGKILL)

    def find(self, selector: Event, *, retained: bool = False) -> SandboxProcess:
        """The process a ProcessSelector names (pid or tag)."""
        if "pid" in selector:
            pid = int(selector["pid"])
            proc = self.running.get(pid) or (
                self.retained.get(pid) if retained else None
            )
            if proc is not None:
                return proc
            raise EnvdRpcError("not_found", f"process with pid {pid} not found")
        tag = selector.get("tag")
        for proc in self.running.values():
            if tag is not None and proc.tag == tag:
                return proc
        raise EnvdRpcError("not_found", f"process with tag {tag} not found")

    async def write(self, proc: SandboxProcess, data: bytes) -> None:
        """Write to a process's stdin or pty, in order."""
        async with proc.write_lock:
            fd = proc.input_fd
            if fd is None:
                raise EnvdRpcError("internal", "stdin is not enabled or already closed")
            view = memoryview(data)
            while view:
                try:
                    written = os.write(fd, view)
                except BlockingIOError:
                    await asyncio.sleep(0.005)
                    continue
                except OSError as exc:
                    raise EnvdRpcError(
                        "internal", f"write stdin: {exc.strerror}"
                    ) from exc
                view = view[written:]

    def close_stdin(self, proc: SandboxProcess) -> None:
        """Close a pipe stdin (PTYs take Ctrl+D instead)."""
        if proc.pty:
            raise EnvdRpcError(
                "unknown",
                "cannot close stdin for PTY process — send Ctrl+D (0x04) instead",
            )
        if proc.input_fd is None:
            raise EnvdRpcError("unknown", "stdin is not enabled or already closed")
        os.close(proc.input_fd)
        proc.input_fd = None

    def close_all(self) -> None:
        """Forget every process (the sandbox stopped); streams get no end event."""
        for proc in list(self.running.values()):
            for fd in list(proc.open_outputs):
                self._loop.remove_reader(fd)
                os.close(fd)
            proc.open_outputs.clear()
            for queue in proc.subscribers:
                queue.put_nowait(None)
            proc.subscribers.clear()
            if proc.input_fd is not None:
                os.close(proc.input_fd)
                proc.input_fd = None
            if proc.timer is not None:
                proc.timer.cancel()
        self.running.clear()


def set_winsize(fd: int, rows: int, cols: int) -> None:
    """Resize a pty (the kernel sends SIGWINCH to its foreground group)."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
