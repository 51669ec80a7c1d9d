"""The ``lsp`` tool's answers: one language server per sandbox, bounded text.

Positions are 1-based as editors show them (LSP's are 0-based); paths in
answers are relative to the workspace. More languages plug in as another
:class:`LanguageServer` command keyed by file suffix (only Python today).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from services.envd.client import EnvdClient
from services.envd.errors import EnvdInvalidArgument, EnvdTimeout
from services.envd.lsp import LanguageServer

ACTIONS = ("diagnostics", "definition", "references", "hover", "symbols")
MAX_ITEMS = 200
MAX_CHARS = 16 * 1024
DIAGNOSTICS_S = 30.0
SEVERITY = {1: "error", 2: "warning", 3: "info", 4: "hint"}
KINDS = {
    2: "module", 5: "class", 6: "method", 7: "property", 8: "field",
    9: "constructor", 12: "function", 13: "variable", 14: "constant",
}  # fmt: skip


class LanguageServers:
    """The sandbox's language server, (re)attached through ``client_of()``."""

    def __init__(
        self, client_of: Callable[[], EnvdClient], *, root: str = "/workspace"
    ) -> None:
        self._client_of = client_of
        self.root = root.rstrip("/")
        self._server: LanguageServer | None = None
        self._lock = asyncio.Lock()

    async def server(self) -> LanguageServer:
        """The running server: reattached after a rebind, restarted if gone."""
        async with self._lock:
            client = self._client_of()
            old = self._server
            if old is None or old.client is not client or old.ended.is_set():
                if old is not None:
                    await old.close()
                fresh = LanguageServer(client, self.root)
                await fresh.open()
                self._server = fresh
            assert self._server is not None
            return self._server

    async def query(
        self, action: str, path: str, line: int | None, column: int | None
    ) -> str:
        """Answer one action about the file at absolute ``path``."""
        if action not in ACTIONS:
            raise EnvdInvalidArgument("lsp", f"action must be one of {ACTIONS}")
        if not path.endswith(".py"):
            raise EnvdInvalidArgument("lsp", "only Python files (.py) for now")
        pos = None
        if action not in ("diagnostics", "symbols"):
            pos = _position(action, line, column)
        server = await self.server()
        uri = f"file://{path}"
        text = (await server.client.read_bytes(path)).decode("utf-8", "replace")
        seen = await server.sync(uri, text)
        if action == "diagnostics":
            return await self._diagnostics(server, uri, seen)
        if action == "symbols":
            found = await server.request(
                "textDocument/documentSymbol", {"textDocument": {"uri": uri}}
            )
            return _bounded([_symbol(s) for s in found or []]) or "(no symbols)"
        assert pos is not None
        return await self._at(server, action, uri, pos)

    async def _diagnostics(
        self, server: LanguageServer, uri: str, seen: asyncio.Event
    ) -> str:
        try:
            async with asyncio.timeout(DIAGNOSTICS_S):
                await seen.wait()
        except TimeoutError:
            raise EnvdTimeout("lsp", DIAGNOSTICS_S) from None
        shown = self._relative(uri)
        lines = [_diagnostic(shown, d) for d in server.diagnostics.get(uri, [])]
        return _bounded(lines) or "(no problems)"

    async def _at(
        self, server: LanguageServer, action: str, uri: str, pos: dict[str, int]
    ) -> str:
        params: dict[str, Any] = {"textDocument": {"uri": uri}, "position": pos}
        if action == "hover":
            found = await server.request("textDocument/hover", params)
            return _hover_text(found) or "(nothing here)"
        if action == "references":
            params["context"] = {"includeDeclaration": True}
        found = await server.request(f"textDocument/{action}", params)
        if isinstance(found, dict):
            found = [found]
        locations = [self._location(loc) for loc in found or []]
        return _bounded(locations) or f"(no {action})"

    def _relative(self, uri: str) -> str:
        path = uri.removeprefix("file://")
        return path.removeprefix(self.root + "/") if path != self.root else "."

    def _location(self, loc: dict[str, Any]) -> str:
        uri = loc.get("uri") or loc.get("targetUri") or ""
        rng = loc.get("range") or loc.get("targetSelectionRange") or {}
        start = rng.get("start") or {}
        where = f"{start.get('line', 0) + 1}:{start.get('character', 0) + 1}"
        return f"{self._relative(uri)}:{where}"

    async def close(self) -> None:
        """Stop following the server (it keeps running in the sandbox)."""
        if self._server is not None:
            await self._server.close()


def _position(action: str, line: int | None, column: int | None) -> dict[str, int]:
    if line is None or column is None or line < 1 or column < 1:
        raise EnvdInvalidArgument(
            "lsp", f"{action} needs line and column (1-based, as editors show)"
        )
    return {"line": line - 1, "character": column - 1}


def _diagnostic(path: str, d: dict[str, Any]) -> str:
    start = (d.get("range") or {}).get("start") or {}
    level = SEVERITY.get(d.get("severity", 1), "error")
    where = f"{start.get('line', 0) + 1}:{start.get('character', 0) + 1}"
    source = f" [{d['source']}]" if d.get("source") else ""
    return f"{path}:{where}: {level}: {d.get('message', '')}{source}"


def _symbol(s: dict[str, Any]) -> str:
    rng = (s.get("location") or {}).get("range") or s.get("range") or {}
    line = (rng.get("start") or {}).get("line", 0) + 1
    return f"{line}: {KINDS.get(s.get('kind', 0), 'symbol')} {s.get('name', '')}"


def _hover_text(found: Any) -> str:
    if not found:
        return ""
    contents = found.get("contents")
    parts = contents if isinstance(contents, list) else [contents]
    texts = [p.get("value", "") if isinstance(p, dict) else str(p) for p in parts]
    return "\n".join(t for t in texts if t)[:MAX_CHARS]


def _bounded(lines: list[str]) -> str:
    shown = lines[:MAX_ITEMS]
    text = "\n".join(shown)[:MAX_CHARS]
    if len(lines) > len(shown):
        text += f"\n[{len(lines) - len(shown)} more not shown]"
    return text
