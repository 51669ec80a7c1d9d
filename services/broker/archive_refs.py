"""Who still needs a session's archive objects: forks share their parent's.

A fork's manifests name its parent's layers (and, until its first save, its
record names the parent's manifest): nothing is copied. So forgetting a
session may delete only what no live fork names. When a fork is seeded,
every session whose objects its starting manifest names gets a marker
``<owner>/children/<fork>`` (holding that manifest's name), and the fork a
``<fork>/parents/<owner>``. ``forget`` then deletes a session's objects but
those its live children name — their seed manifests, and the layers and
manifests their own manifests name — and leaves a tombstone
``<sid>/forgotten``. When a child is forgotten in turn, its markers go and
each forgotten parent is swept again: the last one out deletes everything.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from services.broker.archive import ArchiveStore

CHILDREN = "children/"
PARENTS = "parents/"
TOMBSTONE = "forgotten"


class _Named(msgspec.Struct):
    name: str


class _Layers(msgspec.Struct):
    """What a manifest names (the rest of it is not read here)."""

    layers: list[_Named]


_manifest = msgspec.json.Decoder(_Layers)


def owner(name: str) -> str:
    """The session an archive object belongs to (its name's first part)."""
    return name.split("/", 1)[0]


async def _read(store: ArchiveStore, name: str) -> bytes:
    sink = io.BytesIO()
    await store.get(name, sink)
    return sink.getvalue()


async def _named_by(store: ArchiveStore, manifest: str) -> set[str]:
    """A manifest and the layers it names."""
    try:
        m = _manifest.decode(await _read(store, manifest))
    except KeyError:
        return set()
    return {manifest, *(layer.name for layer in m.layers)}


async def note_fork(store: ArchiveStore, manifest: str, child: str) -> None:
    """``child`` starts from ``manifest``: mark every session whose objects it names."""
    for parent in sorted({owner(n) for n in await _named_by(store, manifest)}):
        if parent == child:
            continue
        body = manifest.encode()
        await store.put(f"{parent}/{CHILDREN}{child}", io.BytesIO(body))
        await store.put(f"{child}/{PARENTS}{parent}", io.BytesIO(parent.encode()))


async def _still_named(store: ArchiveStore, sid: str, markers: list[str]) -> set[str]:
    """``sid``'s objects named by its live children (their markers included)."""
    keep: set[str] = set()
    for marker in markers:
        child = marker.rsplit("/", 1)[1]
        names = await store.names(f"{child}/")
        if not names or f"{child}/{TOMBSTONE}" in names:
            await store.delete(marker)  # the child is gone
            continue
        named = await _named_by(store, (await _read(store, marker)).decode())
        for name in names:
            if name.startswith(f"{child}/m"):
                named |= await _named_by(store, name)
        mine = {n for n in named if owner(n) == sid}
        if mine:
            keep |= mine | {marker}
        else:
            await store.delete(marker)  # its saves no longer name ours
    return keep


async def forget(store: ArchiveStore, sid: str) -> None:
    """Delete ``sid``'s objects but those a live fork still names."""
    names = await store.names(f"{sid}/")
    parents = [n.rsplit("/", 1)[1] for n in names if n.startswith(f"{sid}/{PARENTS}")]
    markers = [n for n in names if n.startswith(f"{sid}/{CHILDREN}")]
    keep = await _still_named(store, sid, markers)
    for name in names:
        if name not in keep and name != f"{sid}/{TOMBSTONE}":
            await store.delete(name)
    if keep:
        await store.put(f"{sid}/{TOMBSTONE}", io.BytesIO(b""))
    else:
        await store.delete(f"{sid}/{TOMBSTONE}")
    for parent in parents:  # we no longer hold theirs: sweep the forgotten ones
        await store.delete(f"{parent}/{CHILDREN}{sid}")
        if f"{parent}/{TOMBSTONE}" in await store.names(f"{parent}/{TOMBSTONE}"):
            await forget(store, parent)
