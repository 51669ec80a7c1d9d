"""Paged listing of a device's sessions: ``GET /v1/sessions?limit=&cursor=``.

The index (``dev.<device>.<session>`` in KV) has no ordered range reads, and a
device may own 10k sessions: listing them by a watcher costs every record every
time. So each gateway keeps, per recently listed device, the records it has read
and the bucket's stream seq it has read up to. A page first asks the server for
anything put since (one ``STREAM.MSG.GET`` with ``next_by_subj``, answered "no
message" in the usual case), then slices the sorted records. The first page of a
device loads its records with one watcher, as the unpaged listing does.

The order is newest first by (``created_at``, session id); the cursor is that
pair of the page's last record, so it stays valid across gateways and restarts.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
from collections import OrderedDict

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from eventstore.index import SessionRecord, decode_record
from eventstore.kvscan import latest

# Devices whose records one gateway keeps (least recently listed dropped first).
MAX_DEVICES = 256
# More new records than this since the last page: reload with a watcher.
MAX_CATCH_UP = 64

Key = tuple[str, str]  # (created_at, session_id): ascending; pages walk it down


class BadCursorError(ValueError):
    """The cursor is not one this API handed out."""


def encode_cursor(key: Key) -> str:
    """The opaque cursor of a page's last record."""
    return base64.urlsafe_b64encode(msgspec.json.encode(key)).decode().rstrip("=")


def decode_cursor(text: str) -> Key:
    """The (created_at, session_id) a cursor names, or :class:`BadCursorError`."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        created_at, session_id = msgspec.json.decode(raw, type=tuple[str, str])
    except (binascii.Error, ValueError, msgspec.DecodeError) as exc:
        raise BadCursorError("cursor is not one a listing answered") from exc
    return created_at, session_id


class _Device:
    """One device's records as far as ``seen`` (the KV stream seq read up to)."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.seen = 0
        self.records: dict[str, SessionRecord] = {}
        self.order: list[Key] = []

    def put(self, record: SessionRecord) -> None:
        old = self.records.get(record.session_id)
        if old is not None:
            self.order.remove((old.created_at, old.session_id))
        self.records[record.session_id] = record
        bisect.insort(self.order, (record.created_at, record.session_id))

    def drop(self, session_id: str) -> None:
        old = self.records.pop(session_id, None)
        if old is not None:
            self.order.remove((old.created_at, old.session_id))

    def page(self, limit: int, before: Key | None) -> tuple[list[SessionRecord], bool]:
        """Up to ``limit`` records older than ``before``, newest first; more left?"""
        end = (
            len(self.order)
            if before is None
            else bisect.bisect_left(self.order, before)
        )
        start = max(0, end - limit)
        keys = self.order[start:end]
        return [self.records[sid] for _, sid in reversed(keys)], start > 0


class SessionPages:
    """Pages of the session index, per device, kept fresh by cheap catch-ups."""

    def __init__(self, js: JetStreamContext, kv: KeyValue, bucket: str) -> None:
        self._js = js
        self._kv = kv
        self._stream = f"KV_{bucket}"
        self._prefix = f"$KV.{bucket}."
        self._devices: OrderedDict[str, _Device] = OrderedDict()

    async def page(
        self, device_id: str, limit: int, cursor: str | None
    ) -> tuple[list[SessionRecord], str | None]:
        """One page, newest first, and the cursor of the next (None at the end)."""
        before = decode_cursor(cursor) if cursor else None
        device = self._device(device_id)
        async with device.lock:
            if device.seen == 0 or not await self._catch_up(device_id, device):
                await self._load(device_id, device)
            records, more = device.page(limit, before)
        if not more or not records:
            return records, None
        last = records[-1]
        return records, encode_cursor((last.created_at, last.session_id))

    def _device(self, device_id: str) -> _Device:
        device = self._devices.get(device_id)
        if device is None:
            device = self._devices[device_id] = _Device()
        self._devices.move_to_end(device_id)
        while len(self._devices) > MAX_DEVICES:
            self._devices.popitem(last=False)
        return device

    async def _load(self, device_id: str, device: _Device) -> None:
        """Every record of the device, by one watcher."""
        fresh = _Device()
        for item in await latest(self._kv, f"dev.{device_id}.*"):
            fresh.seen = max(fresh.seen, item.revision)
            record = decode_record(item.key, item.value)
            if record is not None:
                fresh.put(record)
        device.records, device.order = fresh.records, fresh.order
        device.seen = max(fresh.seen, 1)  # 1: loaded, even when empty

    async def _catch_up(self, device_id: str, device: _Device) -> bool:
        """Records put since ``seen``, one get each; False: too many, reload."""
        subject = f"{self._prefix}dev.{device_id}.*"
        for _ in range(MAX_CATCH_UP):
            try:
                msg = await self._js.get_msg(
                    self._stream, seq=device.seen + 1, next=True, subject=subject
                )
            except NotFoundError:
                return True
            device.seen = msg.seq or device.seen + 1
            key = msg.subject or ""
            if _deleted(msg.headers):
                device.drop(key.rsplit(".", 1)[-1])
                continue
            record = decode_record(key, msg.data)
            if record is not None:
                device.put(record)
        return False


def _deleted(headers: dict[str, str] | None) -> bool:
    return (headers or {}).get("KV-Operation") in {"DEL", "PURGE"}
