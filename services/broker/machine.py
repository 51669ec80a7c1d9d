"""The sandbox lifecycle as a pure function: ``step(record, event, now) → Step``.

Nothing here does I/O or reads a clock. The driver (``lifecycle.Lifecycle``)
reads a record, calls :func:`step`, CASes the new record (``None``: no change)
and then carries out the actions: announce the state, call the provider, wait
for a lease held by another replica. A provider call's outcome comes back as
the next event. Every transition, claim, take-over and lease expiry is
therefore testable without a sandbox, a bucket or a clock
(``tests/unit/broker/test_machine.py``).

Claims: a replica moves a record into a transitional state (``creating`` …)
with ``owner`` = itself and ``lease_until`` = now + lease; it renews the lease
while it works (:class:`Renew`). Settling events only apply while the replica
still holds the claim. Once a lease has run out, the next ``BringUp``,
``Delete`` or ``Recover`` takes the claim over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from services.broker.machine_io import (
    Abandon,
    Action,
    Archive,
    Archived,
    ArchiveFailed,
    BringUp,
    Claim,
    Conn,
    Create,
    Created,
    Delete,
    Deleted,
    Distrusted,
    Due,
    Emit,
    Event,
    Gone,
    Kill,
    Lost,
    NoticeShown,
    Pause,
    Paused,
    PauseFailed,
    PauseSandbox,
    Probe,
    Probed,
    Purged,
    Ready,
    Rebuild,
    Recover,
    Refused,
    Renew,
    Resume,
    Resumed,
    SaveAndRemove,
    Saved,
    Step,
    Tick,
    TokenRotated,
    Touch,
    Vanished,
    Wait,
)
from services.broker.records import TRANSITIONAL, SandboxRecord, State

NOTHING = Step(None)
HELD: dict[type[Event], tuple[str, ...]] = {
    Created: ("creating", "rebuilding"),
    Resumed: ("resuming",),
    Rebuild: ("resuming",),
    Paused: ("pausing",),
    PauseFailed: ("pausing",),
    Archived: ("archiving",),
    ArchiveFailed: ("archiving",),
    Deleted: ("deleting",),
    Probed: ("pausing", "archiving"),
    Vanished: tuple(TRANSITIONAL),
    Abandon: tuple(TRANSITIONAL),
}


def replace(rec: SandboxRecord, **changes: object) -> SandboxRecord:
    """A copy of ``rec`` with ``changes``."""
    return msgspec.structs.replace(rec, **changes)


# ---- the function ---------------------------------------------------------------


def step(rec: SandboxRecord, event: Event, now: float) -> Step:
    """What ``event`` does to ``rec`` at ``now`` (unix seconds)."""
    held = HELD.get(type(event))
    if held is not None:
        owner = getattr(event, "owner", "")
        if rec.owner != owner or rec.state not in held:
            return Step(None, (Lost(),))
    rule = _RULES.get(type(event))
    if rule is None:
        raise TypeError(f"no rule for event {type(event).__name__}")
    return rule(rec, event, now)


# ---- claims -----------------------------------------------------------------------


def _claimed(
    rec: SandboxRecord,
    state: State,
    ev: Claim,
    now: float,
    effect: Action,
    **changes: object,
) -> Step:
    new = replace(
        rec,
        state=state,
        owner=ev.owner,
        lease_until=now + ev.lease_s,
        provider=ev.provider or rec.provider,
        reason=ev.reason,
        **changes,
    )
    return Step(new, (Emit(reason=ev.reason), effect))


def _because(ev: BringUp, why: str) -> BringUp:
    return msgspec.structs.replace(ev, reason=f"{ev.reason}: {why}")


def _bring_up(rec: SandboxRecord, ev: BringUp, now: float) -> Step:
    if rec.state in ("deleted", "deleting"):
        return Step(None, (Refused(),))
    if rec.leased(now):
        return Step(None, (Wait(until=rec.lease_until),))
    if rec.state == "running":
        return Step(None, (Ready(),))
    if rec.state in ("creating", "rebuilding"):
        return _take_over_create(rec, ev, now)
    fresh = {"generation": rec.generation + 1, "nonce": ev.nonce}
    if rec.state == "none" or not (rec.sandbox_id or rec.last_active):
        create = Create(generation=rec.generation + 1, rebuild=False)
        return _claimed(
            rec, "creating", _because(ev, "first use"), now, create, **fresh
        )
    why = _because(ev, f"was {rec.state}")
    if rec.sandbox_id:
        # Whatever the record says, the provider decides: resume asks it,
        # retries, re-checks identity, and rebuilds only if all that fails.
        return _claimed(rec, "resuming", why, now, Resume(sandbox_id=rec.sandbox_id))
    create = Create(generation=rec.generation + 1, rebuild=True)
    return _claimed(rec, "rebuilding", why, now, create, **fresh)


def _take_over_create(rec: SandboxRecord, ev: BringUp, now: float) -> Step:
    # Same generation and nonce: the create key finds what the dead replica
    # may already have started instead of starting another.
    rebuild = rec.state == "rebuilding"
    create = Create(
        generation=rec.generation,
        rebuild=rebuild,
        replace=rec.sandbox_id if rebuild else None,
    )
    why = _because(ev, f"took over an unfinished {rec.state}")
    return _claimed(rec, rec.state, why, now, create)


def _pause(rec: SandboxRecord, ev: Pause, now: float) -> Step:
    idle = ev.idle_s and now - rec.last_active < ev.idle_s
    held = now < rec.busy_until  # a tool is running: never paused under it
    if rec.state != "running" or not rec.sandbox_id or idle or held:
        return NOTHING
    return _claimed(rec, "pausing", ev, now, PauseSandbox(sandbox_id=rec.sandbox_id))


def _archive(rec: SandboxRecord, ev: Archive, now: float) -> Step:
    early = ev.after_s and now - rec.paused_at < ev.after_s
    if rec.state != "paused" or early:
        return NOTHING
    save = SaveAndRemove(
        sandbox_id=rec.sandbox_id, dirty=rec.dirty, base=rec.last_archive
    )
    return _claimed(rec, "archiving", ev, now, save)


def _delete(rec: SandboxRecord, ev: Delete, now: float) -> Step:
    if rec.state == "deleted":
        return Step(None, (Refused(),))
    if rec.leased(now):
        return Step(None, (Wait(until=rec.lease_until),))
    return _claimed(rec, "deleting", ev, now, Kill(sandbox_id=rec.sandbox_id))


def _recover(rec: SandboxRecord, ev: Recover, now: float) -> Step:
    if rec.state not in ("pausing", "archiving") or rec.leased(now):
        return NOTHING
    return _claimed(rec, rec.state, ev, now, Probe(sandbox_id=rec.sandbox_id))


def _renew(rec: SandboxRecord, ev: Renew, now: float) -> Step:
    if rec.owner != ev.owner or rec.state not in TRANSITIONAL:
        return Step(None, (Lost(),))
    return Step(replace(rec, lease_until=now + ev.lease_s))


# ---- settling a claim ---------------------------------------------------------------


def _settled(rec: SandboxRecord, state: State, reason: str, **ch: object) -> Step:
    new = replace(rec, state=state, owner="", lease_until=0.0, reason=reason, **ch)
    return Step(new, (Emit(reason=reason),))


def _running(
    rec: SandboxRecord, conn: Conn, now: float, reason: str, **ch: object
) -> Step:
    return _settled(
        rec,
        "running",
        reason,
        sandbox_id=conn.sandbox_id,
        envd_url=conn.envd_url,
        access_token=conn.access_token,
        token_expires_at=conn.token_expires_at,
        last_active=now,
        paused_at=0.0,
        dirty=True,
        **ch,
    )


def _created(rec: SandboxRecord, ev: Created, now: float) -> Step:
    rebuilt = rec.state == "rebuilding"
    reason = "rebuilt from the archive" if rebuilt else "created"
    notice = rebuilt or rec.notice_pending
    return _running(rec, ev.conn, now, reason, rebuilt=rebuilt, notice_pending=notice)


def _resumed(rec: SandboxRecord, ev: Resumed, now: float) -> Step:
    reason = "resumed" if ev.resumed else "reconnected"
    return _running(rec, ev.conn, now, reason, rebuilt=False)


def _rebuild(rec: SandboxRecord, ev: Rebuild, now: float) -> Step:
    new = replace(
        rec,
        state="rebuilding",
        generation=rec.generation + 1,
        nonce=ev.nonce,
        reason=ev.reason,
    )
    create = Create(generation=new.generation, rebuild=True, replace=rec.sandbox_id)
    return Step(new, (Emit(reason=ev.reason), create))


def _abandon(rec: SandboxRecord, ev: Abandon, now: float) -> Step:
    if not rec.leased(now):
        return Step(None, (Lost(),))
    return _settled(rec, "failed", ev.reason)


def _paused(rec: SandboxRecord, ev: Paused, now: float) -> Step:
    return _settled(rec, "paused", ev.reason, paused_at=now, access_token=None)


def _undone(rec: SandboxRecord, ev: PauseFailed | ArchiveFailed, now: float) -> Step:
    if isinstance(ev, ArchiveFailed) and ev.wait_t3:
        return _settled(rec, "paused", ev.reason, paused_at=now)
    back: State = "running" if rec.state == "pausing" else "paused"
    return _settled(rec, back, ev.reason)


def _archived(rec: SandboxRecord, ev: Archived, now: float) -> Step:
    return _settled(
        rec,
        "archived",
        ev.reason,
        sandbox_id=None,
        access_token=None,
        last_archive=ev.manifest,
        archived_at=now,
        dirty=False,
    )


def _deleted(rec: SandboxRecord, ev: Deleted, now: float) -> Step:
    return _settled(
        rec, "deleted", rec.reason, sandbox_id=None, access_token=None, deleted_at=now
    )


def _vanished(rec: SandboxRecord, ev: Vanished, now: float) -> Step:
    state: State = "archived" if rec.last_archive else "failed"
    return _settled(rec, state, "sandbox vanished", sandbox_id=None)


def _probed(rec: SandboxRecord, ev: Probed, now: float) -> Step:
    if ev.real == "running":
        return _settled(rec, "running", "recovered")
    if ev.real is None:
        return _settled(rec, "failed", "sandbox vanished", sandbox_id=None)
    return _settled(rec, "paused", "recovered", paused_at=rec.paused_at or now)


# ---- everything else ----------------------------------------------------------


def _touch(rec: SandboxRecord, ev: Touch, now: float) -> Step:
    if rec.state in ("none", "deleted", "deleting"):
        return NOTHING
    # Only a running sandbox can have changed; activity on a paused one just
    # means a bind is coming (T3 then need not resume to save).
    dirty = rec.dirty or rec.state == "running"
    busy = max(rec.busy_until, now + ev.hold_s) if ev.hold_s else rec.busy_until
    extends = busy - rec.busy_until >= ev.debounce_s
    if now - rec.last_active < ev.debounce_s and rec.dirty == dirty and not extends:
        return NOTHING  # debounced: a busy session does not write on every call
    new = replace(
        rec, last_active=max(now, rec.last_active), dirty=dirty, busy_until=busy
    )
    return Step(new)


def _rotated(rec: SandboxRecord, ev: TokenRotated, now: float) -> Step:
    conn = ev.conn
    if rec.state != "running" or rec.sandbox_id != conn.sandbox_id:
        return NOTHING
    if 0 < conn.token_expires_at < rec.token_expires_at:
        return NOTHING  # a concurrent rotation stored a newer token
    new = replace(
        rec,
        access_token=conn.access_token,
        token_expires_at=conn.token_expires_at,
        envd_url=conn.envd_url,
    )
    return Step(new)


def _distrusted(rec: SandboxRecord, ev: Distrusted, now: float) -> Step:
    if rec.state != "running" or rec.sandbox_id != ev.sandbox_id:
        return NOTHING
    # "paused" routes the next bring-up through resume, which asks the
    # provider, re-checks identity, and rebuilds if it still fails.
    return Step(replace(rec, state="paused", reason=ev.reason))


def _notice_shown(rec: SandboxRecord, ev: NoticeShown, now: float) -> Step:
    if not rec.notice_pending or rec.sandbox_id != ev.sandbox_id:
        return NOTHING
    return Step(replace(rec, notice_pending=False))


def _saved(rec: SandboxRecord, ev: Saved, now: float) -> Step:
    if rec.last_archive != ev.base:
        return NOTHING  # someone saved meanwhile; theirs is newer
    new = replace(rec, last_archive=ev.manifest, dirty=False)
    return Step(new, (Emit(reason="workspace saved"),))


def _gone(rec: SandboxRecord, ev: Gone, now: float) -> Step:
    if rec.state not in ("running", "paused") or rec.sandbox_id != ev.sandbox_id:
        return NOTHING
    return _settled(rec, "failed", "sandbox vanished", sandbox_id=None)


def _purged(rec: SandboxRecord, ev: Purged, now: float) -> Step:
    return Step(replace(rec, last_archive=None)) if rec.last_archive else NOTHING


def _tick(rec: SandboxRecord, ev: Tick, now: float) -> Step:
    what = ""
    idle = now - rec.last_active >= ev.idle_s and now >= rec.busy_until
    if rec.state == "running" and idle:
        what = "pause"
    elif rec.state == "paused" and now - rec.paused_at >= ev.archive_after_s:
        what = "archive"
    elif rec.state in TRANSITIONAL and rec.lease_until < now:
        what = _takeover(rec.state)
    elif (
        rec.state == "deleted"
        and rec.last_archive
        and now - rec.deleted_at >= ev.retention_s
    ):
        what = "purge"
    return Step(None, (Due(what=what),)) if what else NOTHING


def _takeover(state: str) -> str:
    if state in ("creating", "rebuilding", "resuming"):
        return "bring_up"
    return "delete" if state == "deleting" else "recover"


_RULES: dict[type[Event], Callable[[SandboxRecord, Any, float], Step]] = {
    BringUp: _bring_up,
    Pause: _pause,
    Archive: _archive,
    Delete: _delete,
    Recover: _recover,
    Renew: _renew,
    Created: _created,
    Resumed: _resumed,
    Rebuild: _rebuild,
    Abandon: _abandon,
    Paused: _paused,
    PauseFailed: _undone,
    ArchiveFailed: _undone,
    Archived: _archived,
    Deleted: _deleted,
    Vanished: _vanished,
    Probed: _probed,
    Touch: _touch,
    TokenRotated: _rotated,
    Distrusted: _distrusted,
    NoticeShown: _notice_shown,
    Saved: _saved,
    Gone: _gone,
    Purged: _purged,
    Tick: _tick,
}
