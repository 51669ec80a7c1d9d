"""Sandbox metering in the pure machine: seconds per billed state on transitions."""

from __future__ import annotations

from typing import Any

import msgspec

from services.broker import machine_io as m
from services.broker.machine import step
from services.broker.metering import usage_event
from services.broker.records import SandboxRecord

NOW = 1_000_000.0
ME = "b-me"
CONN = m.Conn(sandbox_id="sb", envd_url="http://e", access_token="t")


def rec(state: str, **fields: Any) -> SandboxRecord:
    return msgspec.convert({"session_id": "s", "state": state, **fields}, SandboxRecord)


def claim(cls: type[m.Claim], **extra: Any) -> Any:
    return cls(owner=ME, lease_s=6.0, provider="local", reason="why", **extra)


def meters(s: m.Step) -> list[m.Meter]:
    return [a for a in s.actions if isinstance(a, m.Meter)]


def test_first_use_starts_the_running_clock_without_seconds() -> None:
    s = step(rec("none"), claim(m.BringUp, nonce="n"), NOW)
    assert meters(s) == [m.Meter(state=None, seconds=0.0, next_state="running", at=NOW)]
    assert s.record is not None
    assert s.record.state_since == NOW


def test_creating_to_running_is_one_billed_state_and_keeps_its_start() -> None:
    creating = rec("creating", owner=ME, lease_until=NOW + 5, state_since=NOW - 3)
    s = step(creating, m.Created(owner=ME, conn=CONN), NOW)
    assert s.record is not None
    assert s.record.state == "running"
    assert meters(s) == []
    assert s.record.state_since == NOW - 3


def test_pausing_reports_the_running_seconds_since_creation() -> None:
    pausing = rec("pausing", owner=ME, lease_until=NOW + 5, state_since=NOW - 90.5)
    s = step(pausing, m.Paused(owner=ME, reason="idle"), NOW)
    assert meters(s) == [
        m.Meter(state="running", seconds=90.5, next_state="paused", at=NOW)
    ]
    assert s.record is not None
    assert s.record.state_since == NOW


def test_archived_carries_the_archive_bytes_and_the_paused_seconds() -> None:
    archiving = rec("archiving", owner=ME, lease_until=NOW + 5, state_since=NOW - 600)
    done = m.Archived(owner=ME, reason="t2", manifest="s/m2", archive_bytes=4096)
    s = step(archiving, done, NOW)
    assert meters(s) == [
        m.Meter(
            state="paused",
            seconds=600.0,
            next_state="archived",
            archive_bytes=4096,
            at=NOW,
        )
    ]
    assert s.record is not None
    assert s.record.archive_bytes == 4096


def test_resuming_from_archived_reports_the_archived_seconds() -> None:
    archived = rec("archived", state_since=NOW - 86400, archive_bytes=10, last_active=1)
    s = step(archived, claim(m.BringUp, nonce="n"), NOW)
    assert s.record is not None
    assert s.record.state == "rebuilding"
    assert meters(s) == [
        m.Meter(
            state="archived",
            seconds=86400.0,
            next_state="running",
            archive_bytes=10,
            at=NOW,
        )
    ]


def test_a_deleted_sandbox_stops_the_clock() -> None:
    deleting = rec("deleting", owner=ME, lease_until=NOW + 5, state_since=NOW - 7)
    s = step(deleting, m.Deleted(owner=ME), NOW)
    assert meters(s) == [m.Meter(state="running", seconds=7.0, next_state=None, at=NOW)]


def test_a_record_from_before_metering_reports_zero_not_the_epoch() -> None:
    pausing = rec("pausing", owner=ME, lease_until=NOW + 5)
    s = step(pausing, m.Paused(owner=ME, reason="idle"), NOW)
    assert meters(s)[0].seconds == 0.0


def test_a_meter_becomes_a_sandbox_usage_event() -> None:
    ev = usage_event(m.Meter(state="paused", seconds=2.5, next_state="archived"))
    assert (ev.TYPE, ev.state, ev.seconds, ev.next_state) == (
        "sandbox.usage",
        "paused",
        2.5,
        "archived",
    )
