"""Workspace archives: layered tars in an ``ArchiveStore`` (JetStream object store).

A save lists /workspace in one ``find`` (type, mode, size, mtime, link target),
tars only the entries that changed since the previous manifest (``--no-recursion``
so directories, empty ones included, carry their own mode), and stores that
layer plus a new manifest. Restore extracts the layers in order and removes
what later saves saw deleted. Every ``full_every`` saves a full layer restarts
the chain so restores stay short.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import shlex
import tempfile
from typing import IO, Literal, Protocol

import aiohttp
import msgspec
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.errors import NotFoundError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from eventstore.streams import ensure_object_store
from schemas.names import BusNames
from services.broker import archive_refs
from services.broker.errors import SandboxError
from services.broker.link import SandboxLink
from services.broker.settings import BrokerSettings

log = logging.getLogger(__name__)

WORKSPACE = "/workspace"
SCRATCH = "/home/user/.agentbus"
SPOOL_BYTES = 4 << 20
TOO_LARGE_EXIT = 75


PAX = "--format=posix --pax-option=delete=atime,delete=ctime"


def tar_command(listing: str, tar: str, limit: int) -> str:
    """Tar the listed paths into ``tar``, at most ``limit`` bytes of it.

    ``--sparse`` stores a file's holes as holes: a ``truncate -s 2G`` file
    costs a few blocks, not 2 GB, here, on the wire and in the object store.
    The stream is cut at ``limit + 1`` bytes, so an over-large layer never
    fills the sandbox's disk either; it exits ``TOO_LARGE_EXIT`` then.
    POSIX (pax) format keeps sub-second mtimes, so a workspace restored from
    the archive scans as unchanged (GNU format keeps whole seconds: the first
    save after every rebuild or fork re-archived every file).
    """
    q = shlex.quote
    return (
        f"tar --sparse --null --no-recursion {PAX} -C {WORKSPACE} -T {q(listing)}"
        " -cf -"
        f" | head -c {limit + 1} > {q(tar)}; rc=${{PIPESTATUS[0]}};"
        f" rm -f {q(listing)};"
        f" if [ $(stat -c %s {q(tar)}) -gt {limit} ]; then"
        f" rm -f {q(tar)}; exit {TOO_LARGE_EXIT}; fi; exit $rc"
    )


FIND = f"find {WORKSPACE} -mindepth 1 -printf '%y\\0%m\\0%s\\0%T@\\0%l\\0%P\\0'"


class ArchiveLimitError(SandboxError):
    """A size limit refused an archive (``code``: ``archive_too_large`` or
    ``archive_store_full``). Retrying the same save cannot help."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


class Workspace(Protocol):
    """Saves and restores a sandbox's /workspace (see ``archive.Archiver``)."""

    async def save(self, link: SandboxLink, session_id: str, base: str | None) -> str:
        """Archive what changed since ``base``; returns the new manifest name."""
        ...

    async def restore(self, link: SandboxLink, manifest: str) -> None:
        """Replay an archive into an empty workspace."""
        ...

    async def forget(self, session_id: str) -> None:
        """Delete every archive object of a session."""
        ...

    async def size(self, manifest: str) -> int:
        """The workspace bytes an archive holds (the sum of its files' sizes)."""
        ...


class ArchiveStore(Protocol):
    """Where archive objects live (default: the JetStream object store)."""

    async def put(self, name: str, source: IO[bytes]) -> None:
        """Store an object from a file."""
        ...

    async def get(self, name: str, sink: IO[bytes]) -> None:
        """Write an object into a file (raises ``KeyError`` if missing)."""
        ...

    async def delete(self, name: str) -> None:
        """Remove an object (missing is fine)."""
        ...

    async def names(self, prefix: str) -> list[str]:
        """Object names starting with ``prefix``."""
        ...


class JetStreamArchiveStore:
    """``ArchiveStore`` on a JetStream object store bucket."""

    def __init__(self, js: JetStreamContext, obj: ObjectStore, bucket: str) -> None:
        self.js = js
        self.obj = obj
        self.bucket = bucket

    @classmethod
    async def open(
        cls, js: JetStreamContext, names: BusNames, max_bytes: int = -1
    ) -> JetStreamArchiveStore:
        """Declare the bucket idempotently, holding at most ``max_bytes`` (-1: no
        limit; an existing bucket is brought to the configured limit and replicas)."""
        bucket = names.archives_store
        obj = await ensure_object_store(
            js,
            ObjectStoreConfig(
                bucket=bucket, storage=StorageType.FILE, max_bytes=max_bytes
            ),
        )
        info = await js.stream_info(f"OBJ_{bucket}")
        if info.config.max_bytes != max_bytes:
            info.config.max_bytes = max_bytes
            await js.update_stream(info.config)
        return cls(js, obj, bucket)

    async def put(self, name: str, source: IO[bytes]) -> None:
        """Store an object from a file (chunked by the client).

        A full store refuses with :class:`ArchiveLimitError`
        (``archive_store_full``); the partial object is removed.
        """
        try:
            await self.obj.put(name, source)  # type: ignore[arg-type]
        except nats.js.errors.APIError as exc:
            if "maximum bytes" not in str(exc).lower():
                raise
            # nats.py has purged the chunks already sent.
            raise ArchiveLimitError(
                "archive_store_full", f"the archive store is full: {exc}"
            ) from exc

    async def get(self, name: str, sink: IO[bytes]) -> None:
        """Stream an object into a file, one direct get per chunk, digest checked.

        nats.py's ``ObjectStore.get`` (an ordered push consumer) moves ~20 MB/s
        here; walking the chunk subject with direct gets is several times faster.
        """
        try:
            info = await self.obj.get_info(name)
        except ObjectNotFoundError as exc:
            raise KeyError(name) from exc
        stream, subject = f"OBJ_{self.bucket}", f"$O.{self.bucket}.C.{info.nuid}"
        digest, left, seq = hashlib.sha256(), int(info.size or 0), 0
        while left > 0:
            msg = await self.js.get_msg(
                stream, seq=seq + 1, subject=subject, direct=True, next=True
            )
            data = msg.data or b""
            sink.write(data)
            digest.update(data)
            left -= len(data)
            seq = int(msg.seq or 0)
        want = (info.digest or "").split("=", 1)[-1]
        got = base64.urlsafe_b64encode(digest.digest()).decode()
        if want and want.rstrip("=") != got.rstrip("="):
            raise SandboxError(f"archive object {name}: digest mismatch")

    async def delete(self, name: str) -> None:
        """Delete an object; missing is fine."""
        try:
            await self.obj.delete(name)
        except ObjectNotFoundError:
            return

    async def names(self, prefix: str) -> list[str]:
        """Live object names with ``prefix``."""
        try:
            infos = await self.obj.list(ignore_deletes=True)
        except NotFoundError:
            return []
        return [i.name for i in infos if i.name and i.name.startswith(prefix)]


EntryType = Literal["f", "d", "l"]


class Entry(msgspec.Struct, frozen=True, array_like=True):
    """One workspace entry as ``find`` saw it; ``layer`` holds its bytes."""

    type: str
    mode: int
    size: int
    mtime: str
    target: str
    layer: int = 0

    def same(self, other: Entry) -> bool:
        """True if nothing archivable changed."""
        return (self.type, self.mode, self.size, self.mtime, self.target) == (
            other.type,
            other.mode,
            other.size,
            other.mtime,
            other.target,
        )


class Layer(msgspec.Struct, frozen=True):
    """One tar in the chain and the paths it carries."""

    name: str
    paths: list[str]


class Manifest(msgspec.Struct, frozen=True, kw_only=True):
    """The state of a workspace at one save."""

    session_id: str
    seq: int
    layers: list[Layer]
    entries: dict[str, Entry]


_manifest = msgspec.json.Decoder(Manifest)


def parse_find(out: bytes) -> dict[str, Entry]:
    """Entries from the NUL-separated ``find -printf`` output (6 fields each)."""
    fields = out.split(b"\0")
    entries: dict[str, Entry] = {}
    for i in range(0, len(fields) - 5, 6):
        kind, mode, size, mtime, target, path = (
            f.decode("utf-8", "surrogateescape") for f in fields[i : i + 6]
        )
        if kind not in ("f", "d", "l") or not path:
            continue  # sockets, fifos, devices are not archived
        entries[path] = Entry(
            kind, int(mode, 8), int(size) if kind == "f" else 0, mtime, target
        )
    return entries


def diff(old: dict[str, Entry], new: dict[str, Entry]) -> list[str]:
    """Paths whose entry is new or changed (parents before children)."""
    return sorted(p for p, e in new.items() if p not in old or not e.same(old[p]))


class Archiver:
    """Saves and restores workspaces through an :class:`ArchiveStore`."""

    def __init__(
        self, store: ArchiveStore, http: aiohttp.ClientSession, settings: BrokerSettings
    ) -> None:
        self.store = store
        self.http = http
        self.full_every = max(settings.broker_full_archive_every, 1)
        self.spool_dir = settings.broker_staging_dir or None
        self.max_layer = int(settings.broker_archive_max_mb * 1024 * 1024)

    def _spool(self) -> IO[bytes]:
        return tempfile.TemporaryFile(dir=self.spool_dir)

    async def load(self, name: str) -> Manifest:
        """A manifest by object name."""
        with self._spool() as f:
            await self.store.get(name, f)
            f.seek(0)
            return _manifest.decode(f.read())

    async def size(self, manifest: str) -> int:
        """The workspace bytes an archive holds (the sum of its files' sizes)."""
        return sum(entry.size for entry in (await self.load(manifest)).entries.values())

    async def save(self, link: SandboxLink, session_id: str, base: str | None) -> str:
        """Archive what changed since ``base``; returns the manifest's name."""
        envd = link.envd(self.http)
        found = await envd.run(FIND, timeout_s=300, output_cap=256 << 20)
        if found.exit_code != 0:
            raise SandboxError(f"workspace scan failed: {found.stderr[:300]!r}")
        entries = parse_find(found.stdout)
        prev = await self.load(base) if base else None
        seq = prev.seq + 1 if prev else 1
        full = prev is None or len(prev.layers) >= self.full_every
        old = {} if full or prev is None else prev.entries
        changed = diff(old, entries)
        if prev is not None and not full and not changed and len(old) == len(entries):
            return base or ""
        layers = [] if full or prev is None else list(prev.layers)
        if changed:
            name = f"{session_id}/l{seq:06d}.tar"
            await self._tar_layer(link, changed, name)
            layers.append(Layer(name, changed))
        idx = len(layers) - 1
        touched = set(changed)
        kept = {
            p: (msgspec.structs.replace(e, layer=idx) if p in touched else old[p])
            for p, e in entries.items()
        }
        manifest = Manifest(session_id=session_id, seq=seq, layers=layers, entries=kept)
        mname = f"{session_id}/m{seq:06d}"
        with self._spool() as f:
            f.write(msgspec.json.encode(manifest))
            f.seek(0)
            await self.store.put(mname, f)
        return mname

    async def _tar_layer(self, link: SandboxLink, paths: list[str], name: str) -> None:
        envd = link.envd(self.http)
        tag = name.rsplit("/", 1)[-1]
        listing, tar = f"{SCRATCH}/{tag}.list", f"{SCRATCH}/{tag}"
        await envd.write_bytes(
            listing, "\0".join(paths).encode("utf-8", "surrogateescape")
        )
        res = await envd.run(tar_command(listing, tar, self.max_layer), timeout_s=600)
        if res.exit_code == TOO_LARGE_EXIT:
            raise ArchiveLimitError(
                "archive_too_large",
                f"the workspace changes exceed {self.max_layer} bytes; not archived",
            )
        if res.exit_code != 0:
            raise SandboxError(f"tar failed: {res.stderr[:300]!r}")
        with self._spool() as f:
            await link.download(self.http, tar, f)
            f.seek(0)
            await self.store.put(name, f)
        await envd.remove(tar)

    async def restore(self, link: SandboxLink, manifest: str) -> None:
        """Replay every layer into the workspace, then drop what was deleted later."""
        m = await self.load(manifest)
        envd = link.envd(self.http)
        for layer in m.layers:
            tar = f"{SCRATCH}/restore-{layer.name.rsplit('/', 1)[-1]}"
            with self._spool() as f:
                await self.store.get(layer.name, f)
                f.seek(0)
                await link.upload(self.http, tar, f)
            res = await envd.run(
                f"tar -xpf {tar} -C {WORKSPACE}; rc=$?; rm -f {tar}; exit $rc"
            )
            if res.exit_code != 0:
                raise SandboxError(f"untar failed: {res.stderr[:300]!r}")
        stale = sorted({p for lay in m.layers for p in lay.paths} - set(m.entries))
        if stale:
            listing = f"{SCRATCH}/stale.list"
            await envd.write_bytes(
                listing, "\0".join(stale).encode("utf-8", "surrogateescape")
            )
            await envd.run(
                f"cd {WORKSPACE} && xargs -0 rm -rf -- < {listing}; rm -f {listing}"
            )

    async def forget(self, session_id: str) -> None:
        """Delete a session's archive objects but those its live forks name."""
        await archive_refs.forget(self.store, session_id)

    async def extract(self, manifest: Manifest, path: str, sink: IO[bytes]) -> int:
        """Copy one archived file's bytes into ``sink`` without any sandbox."""
        import tarfile

        entry = manifest.entries[path]
        layer = manifest.layers[entry.layer]
        with self._spool() as f:
            await self.store.get(layer.name, f)
            f.seek(0)
            with tarfile.open(fileobj=f, mode="r:") as tar:
                member = tar.extractfile(path)
                if member is None:
                    raise KeyError(path)
                size = 0
                while chunk := member.read(256 * 1024):
                    sink.write(chunk)
                    size += len(chunk)
                return size
