"""Every transition of the sandbox state machine, without sandboxes or a clock."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from services.broker import machine_io as m
from services.broker.machine import step
from services.broker.records import SandboxRecord

NOW = 1_000_000.0
LEASE = 6.0
ME, OTHER = "b-me", "b-other"
CONN = m.Conn(sandbox_id="sb2", envd_url="http://e", access_token="t2")


def rec(state: str = "none", **fields: Any) -> SandboxRecord:
    return msgspec.convert({"session_id": "s", "state": state, **fields}, SandboxRecord)


def held(state: str, owner: str = ME, until: float = NOW + 3, **fields: Any):  # type: ignore[no-untyped-def]
    return rec(state, owner=owner, lease_until=until, **fields)


def claim(cls: type[m.Claim], reason: str = "bind", **extra: Any) -> Any:
    return cls(owner=ME, lease_s=LEASE, provider="local", reason=reason, **extra)


def bring_up() -> m.BringUp:
    return claim(m.BringUp, nonce="n2")


def effect(s: m.Step) -> m.Action:
    rest = [a for a in s.actions if not isinstance(a, m.Emit)]
    assert len(rest) == 1, s.actions
    return rest[0]


# ---- bring up ---------------------------------------------------------------------


def test_first_use_claims_creating_with_a_new_generation_and_lease() -> None:
    s = step(rec(), bring_up(), NOW)
    assert s.record is not None
    assert s.record.state == "creating"
    assert (s.record.generation, s.record.nonce) == (1, "n2")
    assert (s.record.owner, s.record.lease_until) == (ME, NOW + LEASE)
    assert s.actions == (
        m.Emit(reason="bind: first use"),
        m.Create(generation=1, rebuild=False),
    )


def test_a_running_sandbox_is_ready_without_a_write() -> None:
    assert step(rec("running", sandbox_id="sb"), bring_up(), NOW) == m.Step(
        None, (m.Ready(),)
    )


@pytest.mark.parametrize("state", ["deleted", "deleting"])
def test_a_deleted_session_is_refused(state: str) -> None:
    assert step(rec(state), bring_up(), NOW) == m.Step(None, (m.Refused(),))


@pytest.mark.parametrize("state", ["creating", "resuming", "pausing", "archiving"])
def test_a_live_lease_of_another_replica_is_waited_for(state: str) -> None:
    s = step(held(state, OTHER, NOW + 2), bring_up(), NOW)
    assert s == m.Step(None, (m.Wait(until=NOW + 2),))


@pytest.mark.parametrize("state", ["creating", "rebuilding"])
def test_an_expired_create_is_taken_over_in_the_same_generation(state: str) -> None:
    old = held(state, OTHER, NOW - 0.1, generation=4, nonce="n1", sandbox_id="sb")
    s = step(old, bring_up(), NOW)
    assert s.record is not None
    assert (s.record.state, s.record.owner) == (state, ME)
    assert (s.record.generation, s.record.nonce) == (4, "n1")
    assert s.record.lease_until == NOW + LEASE
    rebuild = state == "rebuilding"
    assert effect(s) == m.Create(
        generation=4, rebuild=rebuild, replace="sb" if rebuild else None
    )
    assert s.actions[0] == m.Emit(reason=f"bind: took over an unfinished {state}")


@pytest.mark.parametrize("state", ["paused", "failed", "archived", "resuming"])
def test_a_known_sandbox_is_resumed_whatever_the_record_says(state: str) -> None:
    old = held(state, OTHER, NOW - 1, sandbox_id="sb", last_active=NOW - 50)
    s = step(old, bring_up(), NOW)
    assert s.record is not None
    assert s.record.state == "resuming"
    assert s.record.generation == 0  # same generation: the provider decides
    assert effect(s) == m.Resume(sandbox_id="sb")


def test_a_sandbox_gone_after_running_is_rebuilt_in_a_new_generation() -> None:
    old = rec("archived", generation=2, last_active=NOW - 100, last_archive="m1")
    s = step(old, bring_up(), NOW)
    assert s.record is not None
    assert (s.record.state, s.record.generation, s.record.nonce) == (
        "rebuilding",
        3,
        "n2",
    )
    assert effect(s) == m.Create(generation=3, rebuild=True)


def test_a_failed_first_create_is_a_first_create_again() -> None:
    s = step(rec("failed", generation=1), bring_up(), NOW)
    assert s.record is not None
    assert s.record.state == "creating"
    assert effect(s) == m.Create(generation=2, rebuild=False)


# ---- settling a bring-up ----------------------------------------------------------


def test_created_settles_running_with_the_connection() -> None:
    s = step(held("creating"), m.Created(owner=ME, conn=CONN), NOW)
    r = s.record
    assert r is not None
    assert (r.state, r.owner, r.lease_until) == ("running", "", 0.0)
    assert (r.sandbox_id, r.access_token, r.last_active) == ("sb2", "t2", NOW)
    assert not r.rebuilt
    assert r.dirty
    assert s.actions == (m.Emit(reason="created"),)


def test_a_rebuild_settles_with_the_notice_pending() -> None:
    s = step(held("rebuilding"), m.Created(owner=ME, conn=CONN), NOW)
    assert s.record is not None
    assert s.record.rebuilt
    assert s.record.notice_pending
    assert s.actions == (m.Emit(reason="rebuilt from the archive"),)


@pytest.mark.parametrize(
    ("resumed", "reason"), [(True, "resumed"), (False, "reconnected")]
)
def test_resumed_settles_running(resumed: bool, reason: str) -> None:
    old = held("resuming", sandbox_id="sb2", paused_at=NOW - 5, rebuilt=True)
    s = step(old, m.Resumed(owner=ME, conn=CONN, resumed=resumed), NOW)
    assert s.record is not None
    assert (s.record.state, s.record.paused_at, s.record.rebuilt) == (
        "running",
        0.0,
        False,
    )
    assert s.actions == (m.Emit(reason=reason),)


def test_a_failed_resume_switches_the_claim_to_a_rebuild() -> None:
    old = held("resuming", sandbox_id="sb", generation=2)
    s = step(old, m.Rebuild(owner=ME, reason="resume failed", nonce="n3"), NOW)
    assert s.record is not None
    assert (s.record.state, s.record.generation, s.record.nonce) == (
        "rebuilding",
        3,
        "n3",
    )
    assert s.record.owner == ME  # still our claim
    assert effect(s) == m.Create(generation=3, rebuild=True, replace="sb")


def test_abandon_releases_a_live_claim_as_failed() -> None:
    s = step(held("creating"), m.Abandon(owner=ME, reason="boom"), NOW)
    assert s.record is not None
    assert (s.record.state, s.record.owner, s.record.lease_until) == ("failed", "", 0)


def test_abandon_after_the_lease_ran_out_leaves_it_to_the_taker() -> None:
    s = step(held("creating", until=NOW - 1), m.Abandon(owner=ME, reason="x"), NOW)
    assert s == m.Step(None, (m.Lost(),))


SETTLING: list[tuple[m.Event, str]] = [
    (m.Created(owner=ME, conn=CONN), "creating"),
    (m.Resumed(owner=ME, conn=CONN), "resuming"),
    (m.Rebuild(owner=ME, reason="r", nonce="n"), "resuming"),
    (m.Paused(owner=ME, reason="idle"), "pausing"),
    (m.PauseFailed(owner=ME, reason="r"), "pausing"),
    (m.Archived(owner=ME, reason="r", manifest="m"), "archiving"),
    (m.ArchiveFailed(owner=ME, reason="r"), "archiving"),
    (m.Deleted(owner=ME), "deleting"),
    (m.Probed(owner=ME, real="paused"), "pausing"),
    (m.Vanished(owner=ME), "pausing"),
]


@pytest.mark.parametrize(("event", "state"), SETTLING)
def test_a_claim_taken_over_by_another_replica_is_lost(
    event: m.Event, state: str
) -> None:
    assert step(held(state, OTHER), event, NOW) == m.Step(None, (m.Lost(),))
    assert step(held(state), event, NOW).record is not None  # ours: it settles


@pytest.mark.parametrize(("event", "state"), SETTLING)
def test_a_settling_event_for_another_state_is_lost(event: m.Event, state: str) -> None:
    other = "running" if state != "running" else "paused"
    assert step(rec(other, owner=ME), event, NOW) == m.Step(None, (m.Lost(),))


# ---- leases ------------------------------------------------------------------------


def test_renew_pushes_our_lease_out() -> None:
    s = step(held("creating", until=NOW + 1), m.Renew(owner=ME, lease_s=LEASE), NOW)
    assert s.record is not None
    assert s.record.lease_until == NOW + LEASE
    assert s.actions == ()


@pytest.mark.parametrize("old", [held("creating", OTHER), rec("running", owner="")])
def test_renew_of_a_claim_we_no_longer_hold_is_lost(old: SandboxRecord) -> None:
    assert step(old, m.Renew(owner=ME, lease_s=LEASE), NOW) == m.Step(None, (m.Lost(),))


def test_a_lease_is_live_until_its_instant_and_expired_after() -> None:
    at_edge = held("creating", OTHER, until=NOW)
    assert isinstance(effect(step(at_edge, bring_up(), NOW)), m.Create)
    live = held("creating", OTHER, until=NOW + 0.001)
    assert step(live, bring_up(), NOW).actions == (m.Wait(until=NOW + 0.001),)


# ---- pause, archive, delete, recover ----------------------------------------------


def test_pause_claims_an_idle_running_sandbox() -> None:
    old = rec("running", sandbox_id="sb", last_active=NOW - 10)
    s = step(old, claim(m.Pause, "idle", idle_s=10), NOW)
    assert s.record is not None
    assert s.record.state == "pausing"
    assert effect(s) == m.PauseSandbox(sandbox_id="sb")


@pytest.mark.parametrize(
    "old",
    [
        rec("running", sandbox_id="sb", last_active=NOW - 9),
        rec("running", last_active=NOW - 100),
        rec("paused", sandbox_id="sb", last_active=NOW - 100),
    ],
)
def test_pause_leaves_busy_or_not_running_sandboxes(old: SandboxRecord) -> None:
    assert step(old, claim(m.Pause, "idle", idle_s=10), NOW) == m.Step(None)


def test_paused_records_when_and_drops_the_token() -> None:
    old = held("pausing", sandbox_id="sb", access_token="t")
    s = step(old, m.Paused(owner=ME, reason="idle"), NOW)
    assert s.record is not None
    assert (s.record.state, s.record.paused_at, s.record.access_token) == (
        "paused",
        NOW,
        None,
    )


@pytest.mark.parametrize(
    ("state", "back"), [("pausing", "running"), ("archiving", "paused")]
)
def test_a_failed_pause_or_archive_goes_back(state: str, back: str) -> None:
    event: m.Event = (
        m.PauseFailed(owner=ME, reason="r")
        if state == "pausing"
        else m.ArchiveFailed(owner=ME, reason="r")
    )
    s = step(held(state, sandbox_id="sb"), event, NOW)
    assert s.record is not None
    assert (s.record.state, s.record.sandbox_id) == (back, "sb")


def test_archive_claims_a_long_paused_sandbox_with_what_to_save() -> None:
    old = rec(
        "paused", sandbox_id="sb", paused_at=NOW - 60, dirty=False, last_archive="a"
    )
    s = step(old, claim(m.Archive, "t3", after_s=60), NOW)
    assert s.record is not None
    assert s.record.state == "archiving"
    assert effect(s) == m.SaveAndRemove(sandbox_id="sb", dirty=False, base="a")
    early = rec("paused", sandbox_id="sb", paused_at=NOW - 59)
    assert step(early, claim(m.Archive, "t3", after_s=60), NOW) == m.Step(None)


def test_archived_forgets_the_sandbox_and_keeps_the_manifest() -> None:
    old = held("archiving", sandbox_id="sb", dirty=True)
    s = step(old, m.Archived(owner=ME, reason="t3", manifest="m2"), NOW)
    r = s.record
    assert r is not None
    assert (r.state, r.sandbox_id, r.last_archive, r.archived_at, r.dirty) == (
        "archived",
        None,
        "m2",
        NOW,
        False,
    )


def test_delete_claims_then_settles_a_tombstone() -> None:
    s = step(rec("running", sandbox_id="sb"), claim(m.Delete, "closed"), NOW)
    assert s.record is not None
    assert s.record.state == "deleting"
    assert effect(s) == m.Kill(sandbox_id="sb")
    done = step(s.record, m.Deleted(owner=ME), NOW)
    assert done.record is not None
    assert (done.record.state, done.record.sandbox_id, done.record.reason) == (
        "deleted",
        None,
        "closed",
    )
    assert done.record.deleted_at == NOW


def test_delete_waits_for_a_live_claim_and_refuses_twice() -> None:
    assert step(held("creating", OTHER), claim(m.Delete), NOW).actions == (
        m.Wait(until=NOW + 3),
    )
    assert step(rec("deleted"), claim(m.Delete), NOW).actions == (m.Refused(),)


@pytest.mark.parametrize("state", ["pausing", "archiving"])
def test_an_expired_pause_or_archive_is_recovered_by_probing(state: str) -> None:
    old = held(state, OTHER, NOW - 1, sandbox_id="sb")
    s = step(old, claim(m.Recover, "recovery"), NOW)
    assert s.record is not None
    assert (s.record.state, s.record.owner) == (state, ME)
    assert effect(s) == m.Probe(sandbox_id="sb")
    assert step(held(state, OTHER), claim(m.Recover), NOW) == m.Step(None)


@pytest.mark.parametrize(
    ("real", "state", "sandbox"),
    [("running", "running", "sb"), ("paused", "paused", "sb"), (None, "failed", None)],
)
def test_a_probe_settles_what_the_provider_says(
    real: str | None, state: str, sandbox: str | None
) -> None:
    s = step(held("pausing", sandbox_id="sb"), m.Probed(owner=ME, real=real), NOW)
    assert s.record is not None
    assert (s.record.state, s.record.sandbox_id) == (state, sandbox)


@pytest.mark.parametrize(("archive", "state"), [("m1", "archived"), (None, "failed")])
def test_a_vanished_sandbox_falls_back_to_the_archive(
    archive: str | None, state: str
) -> None:
    old = held("archiving", sandbox_id="sb", last_archive=archive)
    s = step(old, m.Vanished(owner=ME), NOW)
    assert s.record is not None
    assert (s.record.state, s.record.sandbox_id) == (state, None)


# ---- the sweep ---------------------------------------------------------------------


TICK = m.Tick(idle_s=10, archive_after_s=100, retention_s=1000)


@pytest.mark.parametrize(
    ("old", "what"),
    [
        (rec("running", sandbox_id="sb", last_active=NOW - 10), "pause"),
        (rec("running", sandbox_id="sb", last_active=NOW - 9), None),
        (rec("paused", paused_at=NOW - 100), "archive"),
        (rec("paused", paused_at=NOW - 99), None),
        (held("creating", OTHER, NOW - 1), "bring_up"),
        (held("rebuilding", OTHER, NOW - 1), "bring_up"),
        (held("resuming", OTHER, NOW - 1), "bring_up"),
        (held("deleting", OTHER, NOW - 1), "delete"),
        (held("pausing", OTHER, NOW - 1), "recover"),
        (held("archiving", OTHER, NOW - 1), "recover"),
        (held("creating", OTHER, NOW + 1), None),
        (rec("deleted", last_archive="m", deleted_at=NOW - 1000), "purge"),
        (rec("deleted", last_archive="m", deleted_at=NOW - 999), None),
        (rec("deleted", deleted_at=NOW - 5000), None),
        (rec("archived"), None),
    ],
)
def test_the_sweep_names_what_is_due(old: SandboxRecord, what: str | None) -> None:
    s = step(old, TICK, NOW)
    assert s.record is None  # a tick never writes; the claim it leads to does
    assert s.actions == ((m.Due(what=what),) if what else ())


# ---- records outside a claim ---------------------------------------------------------


def test_touch_resets_idle_and_marks_a_running_workspace_dirty() -> None:
    old = rec("running", last_active=NOW - 5, dirty=False)
    s = step(old, m.Touch(debounce_s=1), NOW)
    assert s.record is not None
    assert (s.record.last_active, s.record.dirty) == (NOW, True)


def test_touch_is_debounced_and_ignored_without_a_sandbox() -> None:
    recent = rec("running", last_active=NOW - 0.5, dirty=True)
    assert step(recent, m.Touch(debounce_s=1), NOW) == m.Step(None)
    assert step(rec("deleted"), m.Touch(), NOW) == m.Step(None)
    paused = step(rec("paused", last_active=NOW - 5, dirty=False), m.Touch(), NOW)
    assert paused.record is not None
    assert not paused.record.dirty  # a paused sandbox cannot have changed


def test_a_rotated_token_is_stored_unless_older_or_for_another_sandbox() -> None:
    old = rec("running", sandbox_id="sb2", token_expires_at=NOW + 10)
    newer = m.Conn(**{**msgspec.structs.asdict(CONN), "token_expires_at": NOW + 20})
    s = step(old, m.TokenRotated(conn=newer), NOW)
    assert s.record is not None
    assert (s.record.access_token, s.record.token_expires_at) == ("t2", NOW + 20)
    older = m.Conn(**{**msgspec.structs.asdict(CONN), "token_expires_at": NOW + 5})
    assert step(old, m.TokenRotated(conn=older), NOW) == m.Step(None)
    moved = rec("running", sandbox_id="sb9")
    assert step(moved, m.TokenRotated(conn=newer), NOW) == m.Step(None)


def test_a_distrusted_sandbox_goes_through_resume_next() -> None:
    old = rec("running", sandbox_id="sb", last_active=NOW - 1)
    s = step(old, m.Distrusted(sandbox_id="sb", reason="identity"), NOW)
    assert s.record is not None
    assert s.record.state == "paused"
    assert effect(step(s.record, bring_up(), NOW)) == m.Resume(sandbox_id="sb")
    assert step(old, m.Distrusted(sandbox_id="other", reason="x"), NOW) == m.Step(None)


def test_the_rebuilt_notice_is_cleared_once_for_its_sandbox() -> None:
    old = rec("running", sandbox_id="sb", notice_pending=True)
    s = step(old, m.NoticeShown(sandbox_id="sb"), NOW)
    assert s.record is not None
    assert not s.record.notice_pending
    assert step(old, m.NoticeShown(sandbox_id="old"), NOW) == m.Step(None)


def test_a_save_lands_only_on_the_archive_it_started_from() -> None:
    old = rec("running", last_archive="m1", dirty=True)
    s = step(old, m.Saved(base="m1", manifest="m2"), NOW)
    assert s.record is not None
    assert (s.record.last_archive, s.record.dirty) == ("m2", False)
    assert s.actions == (m.Emit(reason="workspace saved"),)
    assert step(old, m.Saved(base="m0", manifest="m2"), NOW) == m.Step(None)


def test_the_reconciler_marks_a_vanished_sandbox_failed() -> None:
    s = step(rec("paused", sandbox_id="sb"), m.Gone(sandbox_id="sb"), NOW)
    assert s.record is not None
    assert (s.record.state, s.record.sandbox_id) == ("failed", None)
    moving = held("resuming", sandbox_id="sb")
    assert step(moving, m.Gone(sandbox_id="sb"), NOW) == m.Step(None)


def test_purge_drops_the_archive_but_keeps_the_tombstone() -> None:
    s = step(rec("deleted", last_archive="m"), m.Purged(), NOW)
    assert s.record is not None
    assert (s.record.state, s.record.last_archive) == ("deleted", None)
    assert step(s.record, bring_up(), NOW).actions == (m.Refused(),)


def test_a_running_tool_holds_the_sandbox_awake_whatever_t2_is() -> None:
    old = rec("running", sandbox_id="sb", last_active=NOW - 100, dirty=True)
    held = step(old, m.Touch(debounce_s=1, hold_s=15), NOW).record
    assert held is not None
    assert held.busy_until == NOW + 15
    later = NOW + 14  # idle for T2 (10 s) but inside the hold
    assert step(held, claim(m.Pause, "idle", idle_s=10), later) == m.Step(None)
    assert step(held, TICK, later) == m.Step(None)
    # The hold ends unless renewed: then T2 applies again.
    assert step(held, TICK, NOW + 15).actions == (m.Due(what="pause"),)
    assert isinstance(
        effect(step(held, claim(m.Pause, "idle", idle_s=10), NOW + 15)),
        m.PauseSandbox,
    )


def test_a_hold_is_renewed_even_inside_the_debounce() -> None:
    old = rec("running", last_active=NOW - 0.2, dirty=True, busy_until=NOW + 5)
    renewed = step(old, m.Touch(debounce_s=1, hold_s=15), NOW).record
    assert renewed is not None
    assert renewed.busy_until == NOW + 15
    same = step(renewed, m.Touch(debounce_s=1, hold_s=15), NOW + 0.5)
    assert same == m.Step(None)  # extends by < debounce: not written


def test_an_archive_over_a_size_limit_waits_a_whole_t3_before_trying_again() -> None:
    old = held("archiving", sandbox_id="sb", paused_at=NOW - 200)
    failed = m.ArchiveFailed(owner=ME, reason="archive_too_large", wait_t3=True)
    s = step(old, failed, NOW)
    assert s.record is not None
    assert (s.record.state, s.record.paused_at) == ("paused", NOW)
    assert step(s.record, TICK, NOW + 99) == m.Step(None)
    assert step(s.record, TICK, NOW + 100).actions == (m.Due(what="archive"),)
    transient = step(old, m.ArchiveFailed(owner=ME, reason="envd"), NOW)
    assert transient.record is not None
    assert transient.record.paused_at == NOW - 200  # retried at the next sweep
