"""Every stream, subject, bucket and object-store name, in one place.

All names hang off one prefix so tests sharing a nats-server never collide and
two deployments can share a cluster. Subject tokens never contain dots.
"""

from __future__ import annotations

import msgspec


class BusNames(msgspec.Struct, frozen=True):
    """Names derived from one prefix (``agentbus`` by default)."""

    prefix: str = "agentbus"

    @property
    def _upper(self) -> str:
        return self.prefix.upper().replace(".", "_").replace("-", "_")

    # --- the session log -------------------------------------------------
    @property
    def log_stream(self) -> str:
        """JetStream stream holding every session log."""
        return f"{self._upper}_LOG"

    @property
    def log_all(self) -> str:
        """Subject filter matching every event of every session."""
        return f"{self.prefix}.log.>"

    def log_subject(self, session_id: str, seq: int, event_type: str) -> str:
        """Subject of one event: ``<prefix>.log.<session>.<seq>.<type>``.

        One subject per (session, seq) makes "event n" a single direct get; the
        type in the subject lets streams and consumers filter by type (wake-ups).
        """
        return f"{self.prefix}.log.{session_id}.{seq}.{event_type}"

    def log_seq(self, session_id: str, seq: int) -> str:
        """Filter matching event ``seq`` of a session, whatever its type."""
        return f"{self.prefix}.log.{session_id}.{seq}.>"

    def log_session(self, session_id: str) -> str:
        """Filter matching every event of one session."""
        return f"{self.prefix}.log.{session_id}.>"

    def log_type(self, event_type: str) -> str:
        """Filter matching one event type in every session (e.g. ``user.prompt``)."""
        return f"{self.prefix}.log.*.*.{event_type}"

    def session_of_subject(self, subject: str) -> str:
        """Session id from an event subject."""
        return subject.split(".")[2 + self.prefix.count(".")]

    # --- session index (gateway lists a device's sessions from NATS) --------
    @property
    def sessions_bucket(self) -> str:
        """KV bucket: ``dev.<device>.<session>`` and ``sid.<session>`` records."""
        return f"{self._upper}_sessions"

    @property
    def summaries_bucket(self) -> str:
        """KV bucket: session → the gateway's folded summary (a cold GET's start)."""
        return f"{self._upper}_summaries"

    @property
    def idempotency_bucket(self) -> str:
        """KV bucket of client idempotency keys (e.g. a prompt's client_msg_id)."""
        return f"{self._upper}_idem"

    @property
    def event_ids_bucket(self) -> str:
        """KV bucket: ``<session>.<event id>`` → where a caller-given id landed."""
        return f"{self._upper}_eventids"

    # --- projector (long-term store, served over request/reply) ----------------
    @property
    def projector_read(self) -> str:
        """Request subject: read a range of a session from SQLite."""
        return f"{self.prefix}.projector.read"

    @property
    def projector_lease_bucket(self) -> str:
        """KV bucket holding the lease of the one replica that copies."""
        return f"{self._upper}_projector"

    @property
    def projector_deadletter(self) -> str:
        """Core subject on which the projector announces each dead-lettered message."""
        return f"{self.prefix}.projector.deadletter"

    @property
    def projector_durable(self) -> str:
        """Durable consumer name of the projector."""
        return "projector"

    # --- pool ---------------------------------------------------------------
    @property
    def wake_stream(self) -> str:
        """Work-queue stream of session wake-ups (a session has work)."""
        return f"{self._upper}_WAKE"

    def wake_subject(self, session_id: str) -> str:
        """Wake-up subject of one session."""
        return f"{self.prefix}.wake.{session_id}"

    @property
    def wake_all(self) -> str:
        """Every wake-up subject."""
        return f"{self.prefix}.wake.*"

    @property
    def leases_bucket(self) -> str:
        """KV bucket: session → owning worker lease (CAS, expiry, heartbeat)."""
        return f"{self._upper}_leases"

    @property
    def snapshots_bucket(self) -> str:
        """KV bucket: session → conversation snapshot (a worker's fold, to resume)."""
        return f"{self._upper}_snapshots"

    @property
    def assignments_bucket(self) -> str:
        """KV bucket: worker id → assigned session and one-time bind token."""
        return f"{self._upper}_assign"

    # --- broker -------------------------------------------------------------
    @property
    def sandboxes_bucket(self) -> str:
        """KV bucket: session → sandbox record (state machine, by revision CAS)."""
        return f"{self._upper}_sandboxes"

    @property
    def archives_store(self) -> str:
        """Object store bucket of workspace archives."""
        return f"{self._upper}_archives"

    @property
    def broker_bind(self) -> str:
        """Request subject: a worker binds to its session's sandbox."""
        return f"{self.prefix}.broker.bind"

    @property
    def broker_fork(self) -> str:
        """Request subject: seed a forked session's workspace (gateway → broker).

        Under ``broker.files``: the gateway's NATS allow-list already lets it
        ask the broker about workspaces there (``services/launcher/natsconf.py``).
        """
        return f"{self.prefix}.broker.files.fork"

    @property
    def broker_files(self) -> str:
        """Request subject prefix of the file API (``.stat``/``.read``/``.write``)."""
        return f"{self.prefix}.broker.files"

    def broker_file(self, op: str) -> str:
        """Request subject of one file operation: ``stat``, ``read`` or ``write``."""
        return f"{self.broker_files}.{op}"

    @property
    def broker_control(self) -> str:
        """Subject prefix of lifecycle signals to the broker (``.activity``)."""
        return f"{self.prefix}.broker.ctl"

    @property
    def broker_save(self) -> str:
        """Request subject: a worker's turn-end save, before its ``turn.ended``."""
        return f"{self.broker_control}.save"

    @property
    def broker_activity(self) -> str:
        """Subject workers and the gateway publish sandbox activity on."""
        return f"{self.broker_control}.activity"

    # --- notifier (push) ----------------------------------------------------
    @property
    def webhooks_bucket(self) -> str:
        """KV: each device's webhook registration and its last deliveries."""
        return f"{self._upper}_webhooks"

    @property
    def webhook_stream(self) -> str:
        """The notifier's outbox: one job per event to push (work queue)."""
        return f"{self._upper}_WEBHOOKS"

    def webhook_subject(self, device_id: str) -> str:
        """The outbox subject of one device's jobs."""
        return f"{self.prefix}.webhook.{device_id}"

    @property
    def webhook_all(self) -> str:
        """Every outbox subject."""
        return f"{self.prefix}.webhook.*"

    @property
    def notifier_durable(self) -> str:
        """The notifier's durable consumers (shared by every replica)."""
        return "notifier"

    # --- gateway (shared counters) ------------------------------------------
    @property
    def streams_bucket(self) -> str:
        """KV: open event streams per device per gateway process (expiring)."""
        return f"{self._upper}_streams"
