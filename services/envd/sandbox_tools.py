"""The agent's tools on top of EnvdClient: workspace paths, version guard, caps."""

from __future__ import annotations

import asyncio
import hashlib
import posixpath

import msgspec

from services.envd.client import EnvdClient
from services.envd.code_intel import LanguageServers
from services.envd.errors import (
    EditMismatch,
    EnvdInvalidArgument,
    EnvdNotFound,
    PathRefused,
    StaleFileError,
)
from services.envd.output import ExecResult, OnText, TextFeed, utf8_head, utf8_tail
from services.envd.paths import PathCache, Resolved, WorkspacePaths, resolved_from_entry
from services.envd.program import Programs
from services.envd.terminal import Terminals

MODEL_OUTPUT_CAP = 30 * 1024
_MAX_LINK_HOPS = 8
_EXIT_MISSING = 3
_EXIT_OUTSIDE = 4
# Glob and grep check containment inside the same command (realpath), so they
# cost exactly one request: exit 3 = missing, 4 = leaves the workspace.
_CONTAIN = (
    'cd -- "$AB_ROOT" || exit 3; r=$(realpath -e -- "$AB_PATH") || exit 3; '
    'case "$r/" in "$AB_ROOT"/*) ;; *) exit 4;; esac; '
)
# Every match's directories are checked too (``r/etc/*`` with ``r -> /``): a
# symlinked component is resolved and must stay inside, else exit 4.
_GLOB_SCRIPT = _CONTAIN + (
    'inside() { local d=${1%/*} p= c parts r; [[ $d == "$1" ]] && return 0; '
    'IFS=/ read -ra parts <<< "$d"; for c in "${parts[@]}"; do p=${p:+$p/}$c; '
    '[[ -L $p ]] || continue; r=$(realpath -e -- "$p") || return 1; '
    'case "$r/" in "$AB_ROOT"/*) ;; *) return 1;; esac; done; }; '
    'shopt -s globstar nullglob; cd -- "$AB_PATH"; IFS=; '
    "for f in $AB_PAT; do [[ -e $f || -L $f ]] || continue; "
    'inside "$f" || exit 4; printf "%s\\0" "$f"; done'
)
_GREP_SCRIPT = _CONTAIN + (
    'grep -rnIE --color=never --exclude-dir=.git -e "$AB_PAT" -- "$AB_PATH"'
)


class _Result(msgspec.Struct, frozen=True, kw_only=True):
    """Base of tool results: plain data the pool renders for the model."""


class ReadResult(_Result, frozen=True, kw_only=True):
    """Lines ``start_line``.. of a file (1-based) and how many it has."""

    path: str
    content: str
    start_line: int
    line_count: int
    total_lines: int
    binary: bool = False


class WriteResult(_Result, frozen=True, kw_only=True):
    """A file written (created or replaced)."""

    path: str
    bytes_written: int
    created: bool


class EditResult(_Result, frozen=True, kw_only=True):
    """A file edited by one exact, unique replacement."""

    path: str
    bytes_written: int


class LsEntry(_Result, frozen=True, kw_only=True):
    """One directory entry."""

    name: str
    kind: str
    size: int
    symlink_target: str | None = None


class LsResult(_Result, frozen=True, kw_only=True):
    """A directory listing."""

    path: str
    entries: list[LsEntry]


class GlobResult(_Result, frozen=True, kw_only=True):
    """Workspace-relative paths matching a pattern, sorted."""

    pattern: str
    paths: list[str]
    truncated: bool = False


class CommandOutput(_Result, frozen=True, kw_only=True):
    """What a command printed, capped for the model; the rest is in ``spill_path``."""

    exit_code: int
    output: str
    truncated: bool = False
    spill_path: str | None = None
    timed_out: bool = False
    total_bytes: int = 0


class SandboxTools:
    """Tool implementations for one sandbox; keep one per worker session."""

    def __init__(
        self,
        client: EnvdClient,
        *,
        root: str = "/workspace",
        output_cap: int = MODEL_OUTPUT_CAP,
        max_glob: int = 1000,
        strict_parents: bool = True,
    ) -> None:
        self.client = client
        self.paths = WorkspacePaths(root, read_roots=(client.spill_dir,))
        self.cache = PathCache()
        self.output_cap = output_cap
        self.max_glob = max_glob
        self.strict_parents = strict_parents
        self._versions: dict[str, str] = {}
        # Terminals live in the sandbox; this follows ``self.client`` on rebinds.
        self.terminals = Terminals(lambda: self.client, root=root)
        self.programs = Programs(lambda: self.client, root=root)
        self.language_servers = LanguageServers(lambda: self.client, root=root)

    # ---- paths ----------------------------------------------------------------

    async def resolve(self, path: str, *, write: bool = False) -> Resolved:
        """Absolute path and its real target; refused outside the workspace.

        Lexical checks happen before any request; the symlink check costs one
        ``Stat`` per path per generation, plus one per uncached parent directory
        (in parallel: every component is resolved, not only the last) and one per
        hop of a symlink chain. ``strict_parents=False`` skips the parents (only
        for callers that trust the tree, e.g. benchmarks of the old behaviour).
        """
        normal = self.paths.absolute(path, write=write)
        resolved = await self._resolve_normal(normal)
        for _ in range(_MAX_LINK_HOPS):
            if not self.paths.allows(resolved.real, write=write):
                raise PathRefused(
                    path, f"links to {resolved.real}, outside the workspace"
                )
            if resolved.real == resolved.path:
                return resolved
            # A symlink to a path inside the workspace: that path may link on.
            hop = await self._resolve_normal(resolved.real)
            resolved = Resolved(normal, hop.real, hop.kind)
        raise PathRefused(path, "too many levels of symbolic links")

    async def _resolve_normal(self, normal: str) -> Resolved:
        through = self.cache.ancestor_real(normal)
        if through is not None:
            return Resolved(normal, through, "other")
        resolved = self.cache.get(normal)
        if resolved is not None:
            return resolved
        parents = self._uncached_parents(normal) if self.strict_parents else []
        found = await asyncio.gather(self._stat(normal), *map(self._stat, parents))
        for item in found:
            self.cache.put(item)
        through = self.cache.ancestor_real(normal)
        return found[0] if through is None else Resolved(normal, through, "other")

    def _uncached_parents(self, normal: str) -> list[str]:
        out = []
        parent = posixpath.dirname(normal)
        while self.paths.allows(parent, write=False) and parent != self.paths.root:
            if self.cache.get(parent) is None:
                out.append(parent)
            parent = posixpath.dirname(parent)
        return out

    async def _stat(self, normal: str) -> Resolved:
        if normal == self.paths.root:
            return Resolved(normal, normal, "dir")
        try:
            entry = await self.client.stat(normal)
        except EnvdNotFound:
            return Resolved(normal, normal, "missing")
        return resolved_from_entry(normal, entry)

    # ---- files ----------------------------------------------------------------

    async def read(self, path: str, offset: int = 1, limit: int = 2000) -> ReadResult:
        """Lines ``offset``..``offset+limit-1`` of a text file (one GET when cached)."""
        resolved, data = await self._resolve_and_read(path)
        self._versions[resolved.real] = _digest(data)
        shown = self.paths.relative(resolved.path)
        if b"\x00" in data[:8192]:
            return ReadResult(
                path=shown,
                content="",
                start_line=1,
                line_count=0,
                total_lines=0,
                binary=True,
            )
        lines = _lines(data.decode("utf-8", "replace"))
        start = max(offset, 1)
        chosen = lines[start - 1 : start - 1 + max(limit, 0)]
        return ReadResult(
            path=shown,
            content="".join(chosen),
            start_line=start,
            line_count=len(chosen),
            total_lines=len(lines),
        )

    async def _resolve_and_read(
        self, path: str, *, write: bool = False
    ) -> tuple[Resolved, bytes]:
        normal = self.paths.absolute(path, write=write)
        if self.cache.get(normal) is not None or self.cache.ancestor_real(normal):
            resolved = await self.resolve(path, write=write)
            self._require_file(path, resolved)
            return resolved, await self.client.read_bytes(resolved.path)
        # Cold: Stat and GET in parallel, one round trip of latency; the content is
        # dropped if the Stat refuses the path (it never leaves the sandbox then).
        got = await asyncio.gather(
            self.resolve(path, write=write),
            self.client.read_bytes(normal),
            return_exceptions=True,
        )
        resolved_or_error, data_or_error = got
        if isinstance(resolved_or_error, BaseException):
            raise resolved_or_error
        self._require_file(path, resolved_or_error)
        if isinstance(data_or_error, BaseException):
            raise data_or_error
        return resolved_or_error, data_or_error

    async def write(self, path: str, content: str) -> WriteResult:
        """Create or replace a file (parents created): ≤ 2 round trips."""
        resolved = await self.resolve(path, write=True)
        if resolved.kind == "dir":
            raise EnvdInvalidArgument("write", f"{path} is a directory")
        data = content.encode()
        await self.client.write_bytes(resolved.path, data)
        self._written(resolved, data)
        return WriteResult(
            path=self.paths.relative(resolved.path),
            bytes_written=len(data),
            created=resolved.kind == "missing",
        )

    async def edit(self, path: str, old: str, new: str) -> EditResult:
        """Replace the one exact occurrence of ``old``; refused if the file changed
        since this adapter last read or wrote it."""
        if not old:
            raise EnvdInvalidArgument("edit", "old text is empty")
        resolved, data = await self._resolve_and_read(path, write=True)
        known = self._versions.get(resolved.real)
        if known is not None and known != _digest(data):
            raise StaleFileError(self.paths.relative(resolved.path))
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise EnvdInvalidArgument("edit", f"{path} is not UTF-8 text") from e
        count = text.count(old)
        if count != 1:
            raise EditMismatch(self.paths.relative(resolved.path), count)
        updated = text.replace(old, new, 1).encode()
        await self.client.write_bytes(resolved.path, updated)
        self._written(resolved, updated)
        return EditResult(
            path=self.paths.relative(resolved.path), bytes_written=len(updated)
        )

    def _written(self, resolved: Resolved, data: bytes) -> None:
        self._versions[resolved.real] = _digest(data)
        if resolved.kind == "missing":
            self.cache.put(Resolved(resolved.path, resolved.real, "file"))

    @staticmethod
    def _require_file(path: str, resolved: Resolved) -> None:
        if resolved.kind == "missing":
            raise EnvdNotFound("read", f"{path} does not exist")
        if resolved.kind == "dir":
            raise EnvdInvalidArgument("read", f"{path} is a directory")

    async def ls(self, path: str = ".") -> LsResult:
        """Entries of a directory (and caches what they resolve to)."""
        resolved = await self.resolve(path)
        entries = await self.client.list_dir(resolved.path, depth=1)
        out = []
        for entry in sorted(entries, key=lambda e: e.name):
            child = resolved.path.rstrip("/") + "/" + entry.name
            self.cache.put(resolved_from_entry(child, entry))
            target = entry.symlink_target if entry.is_symlink else None
            out.append(
                LsEntry(
                    name=entry.name,
                    kind=entry.kind,
                    size=entry.size_bytes,
                    symlink_target=target,
                )
            )
        return LsResult(path=self.paths.relative(resolved.path), entries=out)

    # ---- commands -------------------------------------------------------------

    async def glob(self, pattern: str, path: str = ".") -> GlobResult:
        """Paths matching a bash globstar pattern under ``path`` (one command)."""
        if pattern.startswith("/") or ".." in pattern.split("/") or "\x00" in pattern:
            raise PathRefused(pattern, "glob patterns are relative to the workspace")
        rel = self._contained(path)
        envs = {"AB_ROOT": self.paths.root, "AB_PATH": rel, "AB_PAT": pattern}
        result = await self.client.run(_GLOB_SCRIPT, envs=envs, output_cap=1 << 20)
        self._check_contained(path, result)
        names = [n for n in result.stdout.decode("utf-8", "replace").split("\0") if n]
        shown = [n if rel == "." else f"{rel}/{n}" for n in names]
        return GlobResult(
            pattern=pattern,
            paths=shown[: self.max_glob],
            truncated=len(shown) > self.max_glob or result.truncated,
        )

    async def grep(self, pattern: str, path: str = ".") -> CommandOutput:
        """``grep -rnE`` under ``path`` (one command); exit 1 means no match."""
        rel = self._contained(path)
        envs = {"AB_ROOT": self.paths.root, "AB_PATH": rel, "AB_PAT": pattern}
        result = await self.client.run(
            _GREP_SCRIPT, envs=envs, output_cap=self.output_cap
        )
        self._check_contained(path, result)
        return self._render(result)

    def _contained(self, path: str) -> str:
        """Lexical and cached-symlink checks; the rest happens in the command."""
        normal = self.paths.absolute(path)
        through = self.cache.ancestor_real(normal)
        if through is not None and not self.paths.allows(through, write=False):
            raise PathRefused(
                path, f"a parent links to {through}, outside the workspace"
            )
        return self.paths.relative(normal)

    @staticmethod
    def _check_contained(path: str, result: ExecResult) -> None:
        if result.exit_code == _EXIT_MISSING:
            raise EnvdNotFound("search", f"{path} does not exist")
        if result.exit_code == _EXIT_OUTSIDE:
            raise PathRefused(path, "resolves outside the workspace")

    async def bash(
        self,
        command: str,
        timeout_s: float = 120.0,
        on_output: OnText | None = None,
    ) -> CommandOutput:
        """Run an agent command in the workspace: one streaming call; stderr merged.

        ``on_output`` gets the output live as text (a character split across
        chunks arrives whole), all of it, not only what the cap keeps.
        """
        feed = TextFeed(on_output) if on_output is not None else None
        self.cache.begin_command()
        try:
            result = await self.client.run(
                "exec 2>&1\n" + command,
                cwd=self.paths.root,
                timeout_s=timeout_s,
                output_cap=self.output_cap,
                on_output=feed.feed if feed is not None else None,
            )
        finally:
            self.cache.end_command()
        if feed is not None:
            await feed.flush()
        return self._render(result)

    async def bash_background(self, command: str) -> int:
        """Start an agent command that keeps running; returns its pid."""
        ended = False

        def end(_: object = None) -> None:
            nonlocal ended
            if not ended:
                ended = True
                self.cache.end_command()

        self.cache.begin_command()
        try:
            return await self.client.start_background(
                "exec 2>&1\n" + command, cwd=self.paths.root, on_exit=end
            )
        except BaseException:
            end()
            raise

    def _render(self, result: ExecResult) -> CommandOutput:
        head = result.stdout + result.stderr
        if not result.truncated:
            text = head.decode("utf-8", "replace")
        else:
            keep = self.output_cap * 2 // 3
            first = utf8_head(head[:keep]).decode("utf-8", "replace")
            last = utf8_tail(result.tail[-(self.output_cap - keep) :]).decode(
                "utf-8", "replace"
            )
            where = result.spill_path or "not saved"
            note = f"[{result.total_bytes} bytes in all; full output: {where}]"
            text = f"{first}\n… {note} …\n{last}"
        return CommandOutput(
            exit_code=result.exit_code,
            output=text,
            truncated=result.truncated,
            spill_path=result.spill_path,
            timed_out=result.timed_out,
            total_bytes=result.total_bytes,
        )


def _lines(text: str) -> list[str]:
    """Lines split on ``\\n`` only (as editors and ``grep -n`` count them)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
