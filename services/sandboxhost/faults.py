"""Fault injection for other services' tests (off by default, admin API only)."""

from __future__ import annotations

import asyncio

import msgspec

from services.sandboxhost.errors import ControlError


class FaultUpdate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Body of ``POST /admin/faults``; absent fields leave the current value."""

    fail_resumes: int | None = None
    resume_status: int | None = None
    delay_ms: dict[str, int] | None = None
    swap: dict[str, str] | None = None
    # Lets held restore boots go (AGENTBUS_SANDBOXHOST_RESTORE_HOLD, tests only).
    release_restore: bool = False
    clear: bool = False


class Faults(msgspec.Struct, kw_only=True):
    """Current fault settings.

    ``fail_resumes``: the next N resumes (connect/resume of a paused sandbox)
    fail with ``resume_status``. ``delay_ms``: operation name → added latency
    (``create``, ``connect``, ``resume``, ``pause``, ``kill``, ``get``, ``list``,
    ``timeout``, ``envd``). ``swap``: sandbox id → id whose envd content is
    served instead (the identity-mismatch case).
    """

    fail_resumes: int = 0
    resume_status: int = 500
    delay_ms: dict[str, int] = msgspec.field(default_factory=dict)
    swap: dict[str, str] = msgspec.field(default_factory=dict)

    def apply(self, update: FaultUpdate) -> None:
        """Merge an update (``clear`` resets everything first)."""
        if update.clear:
            self.fail_resumes, self.resume_status = 0, 500
            self.delay_ms, self.swap = {}, {}
        if update.fail_resumes is not None:
            self.fail_resumes = max(update.fail_resumes, 0)
        if update.resume_status is not None:
            self.resume_status = update.resume_status
        if update.delay_ms is not None:
            self.delay_ms.update(update.delay_ms)
            self.delay_ms = {k: v for k, v in self.delay_ms.items() if v > 0}
        if update.swap is not None:
            self.swap.update(update.swap)
            self.swap = {k: v for k, v in self.swap.items() if v}

    async def delay(self, op: str) -> None:
        """Sleep the injected latency of an operation, if any."""
        ms = self.delay_ms.get(op, 0)
        if ms > 0:
            await asyncio.sleep(ms / 1000)

    def check_resume(self, sandbox_id: str) -> None:
        """Consume one injected resume failure, if any is armed."""
        if self.fail_resumes > 0:
            self.fail_resumes -= 1
            raise ControlError(
                self.resume_status, f"resume of {sandbox_id} failed (injected fault)"
            )
