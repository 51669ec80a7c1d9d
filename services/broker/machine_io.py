"""The inputs and outputs of the sandbox state machine (``machine.py``).

Events are what happens to a session's record (a replica claims it, a provider
call finished, the sweep looks at it); actions are what the driver must do
after a step. All are plain frozen values: a step is testable by comparing them.
"""

from __future__ import annotations

from typing import TypedDict

import msgspec

from services.broker.providers.base import Connection
from services.broker.records import SandboxRecord, Versioned

# ---- events -------------------------------------------------------------------


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """Base of everything that can happen to a record."""


class Claim(Event, frozen=True, kw_only=True):
    """An event by which replica ``owner`` claims the record for an operation."""

    owner: str
    lease_s: float
    provider: str = ""
    reason: str = ""


class BringUp(Claim, frozen=True, kw_only=True):
    """Someone needs the sandbox running (bind, file API, recovery).

    ``nonce`` is the identity to plant if a new generation is started (the
    driver draws it, so this function stays deterministic).
    """

    nonce: str


class Pause(Claim, frozen=True, kw_only=True):
    """T2: pause a running sandbox idle for at least ``idle_s`` (0: at once)."""

    idle_s: float = 0.0


class Archive(Claim, frozen=True, kw_only=True):
    """T3: save and remove a sandbox paused for at least ``after_s``."""

    after_s: float = 0.0


class Delete(Claim, frozen=True, kw_only=True):
    """The session is closed: its sandbox goes, the record becomes a tombstone."""


class Recover(Claim, frozen=True, kw_only=True):
    """Take over a pause or archive whose holder's lease ran out."""


class Renew(Event, frozen=True, kw_only=True):
    """The holder is still working: push its lease out."""

    owner: str
    lease_s: float


class Conn(msgspec.Struct, frozen=True, kw_only=True):
    """Where a started or resumed sandbox is reached."""

    sandbox_id: str
    envd_url: str
    access_token: str | None = None
    token_expires_at: float = 0.0


class Created(Event, frozen=True, kw_only=True):
    """The claimed create (or rebuild) finished: identity planted and checked."""

    owner: str
    conn: Conn


class Resumed(Event, frozen=True, kw_only=True):
    """The claimed resume finished (``resumed``: it had been paused)."""

    owner: str
    conn: Conn
    resumed: bool = True


class Rebuild(Event, frozen=True, kw_only=True):
    """The resume failed for good: switch the claim to a new generation."""

    owner: str
    reason: str
    nonce: str


class Abandon(Event, frozen=True, kw_only=True):
    """The holder's bring-up failed: release as ``failed`` (next try rebuilds)."""

    owner: str
    reason: str


class Paused(Event, frozen=True, kw_only=True):
    """The claimed pause worked."""

    owner: str
    reason: str


class PauseFailed(Event, frozen=True, kw_only=True):
    """The claimed pause failed and the sandbox still runs."""

    owner: str
    reason: str


class Archived(Event, frozen=True, kw_only=True):
    """The claimed archive saved ``manifest`` and removed the sandbox."""

    owner: str
    reason: str
    manifest: str | None


class ArchiveFailed(Event, frozen=True, kw_only=True):
    """The workspace could not be saved: it stays paused (never deleted unsaved).

    ``wait_t3``: retrying soon cannot help (a size limit): T3 starts over.
    """

    owner: str
    reason: str
    wait_t3: bool = False


class Deleted(Event, frozen=True, kw_only=True):
    """The claimed delete killed the sandbox."""

    owner: str


class Vanished(Event, frozen=True, kw_only=True):
    """The holder found the provider has no such sandbox any more."""

    owner: str


class Probed(Event, frozen=True, kw_only=True):
    """A recovering holder asked the provider: ``real`` is its settled state."""

    owner: str
    real: str | None


class Gone(Event, frozen=True, kw_only=True):
    """The reconciler: the provider no longer lists ``sandbox_id``."""

    sandbox_id: str


class Touch(Event, frozen=True, kw_only=True):
    """Activity: resets T2; a running sandbox's workspace may have changed.

    ``hold_s`` > 0: no pause before now + ``hold_s`` (a tool is running).
    """

    debounce_s: float = 1.0
    hold_s: float = 0.0


class TokenRotated(Event, frozen=True, kw_only=True):
    """A new data-plane token for the running sandbox ``conn.sandbox_id``."""

    conn: Conn


class Distrusted(Event, frozen=True, kw_only=True):
    """The running sandbox failed its identity check: resume (or rebuild) next."""

    sandbox_id: str
    reason: str


class NoticeShown(Event, frozen=True, kw_only=True):
    """The worker was told its sandbox was rebuilt."""

    sandbox_id: str


class Saved(Event, frozen=True, kw_only=True):
    """A turn-end save from ``base`` wrote ``manifest``."""

    base: str | None
    manifest: str


class Purged(Event, frozen=True, kw_only=True):
    """A deleted session's archives are gone after the retention."""


class Tick(Event, frozen=True, kw_only=True):
    """The sweep looks at a record: which timer or take-over is due."""

    idle_s: float
    archive_after_s: float
    retention_s: float


# ---- actions ------------------------------------------------------------------


class Action(msgspec.Struct, frozen=True, kw_only=True):
    """Base of what the driver must do after a step."""


class Emit(Action, frozen=True, kw_only=True):
    """Append ``sandbox.state`` for the new record."""

    reason: str


class Create(Action, frozen=True, kw_only=True):
    """Start generation ``generation`` (idempotent by its key); ``replace`` dies."""

    generation: int
    rebuild: bool
    replace: str | None = None


class Resume(Action, frozen=True, kw_only=True):
    """Ask the provider for ``sandbox_id`` (resume if paused)."""

    sandbox_id: str


class PauseSandbox(Action, frozen=True, kw_only=True):
    """Pause ``sandbox_id`` at the provider."""

    sandbox_id: str


class SaveAndRemove(Action, frozen=True, kw_only=True):
    """Save the workspace (if ``dirty``) from ``base``, then kill the sandbox."""

    sandbox_id: str | None
    dirty: bool
    base: str | None


class Kill(Action, frozen=True, kw_only=True):
    """Kill ``sandbox_id`` (a delete)."""

    sandbox_id: str | None


class Probe(Action, frozen=True, kw_only=True):
    """Ask the provider what state ``sandbox_id`` is really in."""

    sandbox_id: str | None


class Ready(Action, frozen=True, kw_only=True):
    """The sandbox runs: use it."""


class Refused(Action, frozen=True, kw_only=True):
    """The session is deleted: it never gets a sandbox again."""


class Wait(Action, frozen=True, kw_only=True):
    """Another replica holds a live lease until ``until``: wait, then retry."""

    until: float


class Lost(Action, frozen=True, kw_only=True):
    """The claim this settling event needs is no longer ours."""


class Due(Action, frozen=True, kw_only=True):
    """The sweep should run ``what``.

    One of pause, archive, recover, bring_up, delete, purge.
    """

    what: str


class Step(msgspec.Struct, frozen=True):
    """A step's result: the new record (``None``: unchanged) and the actions."""

    record: SandboxRecord | None
    actions: tuple[Action, ...] = ()


# ---- what the driver hands its callers ------------------------------------------


class ClaimFields(TypedDict):
    """What every :class:`machine.Claim` by this replica carries."""

    owner: str
    lease_s: float
    provider: str
    reason: str


class Applied(msgspec.Struct, frozen=True):
    """An event applied to a record: the record after it and what to do next."""

    current: Versioned
    actions: tuple[Action, ...]
    changed: bool

    @property
    def record(self) -> SandboxRecord:
        """The record after the step."""
        return self.current.record

    @property
    def effect(self) -> Action | None:
        """The one action that is not an announcement (if any)."""
        rest = [a for a in self.actions if not isinstance(a, Emit)]
        return rest[0] if rest else None


def conn_of(conn: Connection) -> Conn:
    """A provider connection as the state machine sees it."""
    return Conn(
        sandbox_id=conn.sandbox_id,
        envd_url=conn.envd_url,
        access_token=conn.access_token,
        token_expires_at=conn.token_expires_at,
    )
