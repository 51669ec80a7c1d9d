"""Every bus name hangs off the prefix, so two deployments (or tests) never meet."""

from __future__ import annotations

from schemas.names import BusNames


def _all(names: BusNames) -> dict[str, str]:
    return {
        "snapshots_bucket": names.snapshots_bucket,
        "projector_lease_bucket": names.projector_lease_bucket,
        "projector_deadletter": names.projector_deadletter,
        "broker_activity": names.broker_activity,
        "file_stat": names.broker_file("stat"),
        "file_read": names.broker_file("read"),
        "file_write": names.broker_file("write"),
    }


def test_names_moved_into_busnames_keep_their_wire_values() -> None:
    assert _all(BusNames()) == {
        "snapshots_bucket": "AGENTBUS_snapshots",
        "projector_lease_bucket": "AGENTBUS_projector",
        "projector_deadletter": "agentbus.projector.deadletter",
        "broker_activity": "agentbus.broker.ctl.activity",
        "file_stat": "agentbus.broker.files.stat",
        "file_read": "agentbus.broker.files.read",
        "file_write": "agentbus.broker.files.write",
    }


def test_two_prefixes_share_no_name() -> None:
    a, b = _all(BusNames("one")), _all(BusNames("two"))
    assert not set(a.values()) & set(b.values())
