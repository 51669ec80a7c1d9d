"""``E2bProvider``: the E2B control-plane REST API (E2B cloud or the sandbox host)."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp

from services.broker.errors import ProviderError, SandboxNotFoundError
from services.broker.providers.base import Connection, SandboxInfo

_STATES = {"running": "running", "paused": "paused"}
log = logging.getLogger(__name__)


def _message(data: Any) -> str:
    return str(data.get("message", "")) if isinstance(data, dict) else ""


def _template_trouble(status: int, data: Any) -> bool:
    """A create refused because of its template (not the sandbox or the host)."""
    return status in (400, 404, 500, 503) and "template" in _message(data).lower()


class E2bProvider:
    """Speaks ``/v2/sandboxes`` (create/connect/list), get, pause, kill."""

    def __init__(
        self,
        name: str,
        api_url: str,
        api_key: str | None,
        *,
        sandbox_url: str = "",
        template: str = "base",
        timeout_s: int = 3600,
        request_timeout_s: float = 60.0,
        token_ttl_s: float = 0.0,
    ) -> None:
        self.name = name
        # > 0 only on the agentbus sandbox host, which understands the token
        # headers (docs/architecture.md §7); E2B cloud ignores them.
        self.token_ttl_s = token_ttl_s
        self.api_url = api_url.rstrip("/")
        self.sandbox_url = sandbox_url.rstrip("/")
        self.template = template
        self.timeout_s = timeout_s
        self._headers = {"X-API-KEY": api_key or "", "Content-Type": "application/json"}
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _call(
        self,
        op: str,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        try:
            async with self._http().request(
                method,
                self.api_url + path,
                json=body,
                headers={**self._headers, **(headers or {})},
            ) as resp:
                raw = await resp.read()
                data = None
                if raw and resp.content_type == "application/json":
                    data = await resp.json()
                return resp.status, data, dict(resp.headers)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ProviderError(self.name, op, repr(exc)) from exc

    def _fail(self, op: str, status: int, data: Any) -> ProviderError:
        message = _message(data)
        transient = status >= 500 or status in (409, 429)
        return ProviderError(self.name, op, f"{status} {message}", transient=transient)

    def _connection(self, data: dict[str, Any], resumed: bool) -> Connection:
        sid = str(data["sandboxID"])
        url = self.sandbox_url
        if not url:
            url = f"https://49983-{sid}.{data.get('domain') or 'e2b.app'}"
        expires = data.get("envdAccessTokenExpiresAt")
        return Connection(
            sandbox_id=sid,
            envd_url=url,
            access_token=data.get("envdAccessToken"),
            token_expires_at=float(expires) if expires else 0.0,
            resumed=resumed,
        )

    def _token_headers(self, rotate: bool) -> dict[str, str]:
        if self.token_ttl_s <= 0:
            return {}
        headers = {"X-Agentbus-Token-Ttl": f"{self.token_ttl_s:g}"}
        if rotate:
            headers["X-Agentbus-Rotate-Token"] = "1"
        return headers

    async def create(
        self, metadata: dict[str, str], idempotency_key: str
    ) -> Connection:
        """``POST /v2/sandboxes`` with ``autoPause`` so a provider timeout pauses.

        A template that cannot be had (unknown, its build failed or is still
        running) degrades to ``base``, loudly: the session works with the
        host's tools (the lsp tool then installs its server in the sandbox).
        """
        status, data = await self._create(self.template, metadata, idempotency_key)
        if self.template != "base" and _template_trouble(status, data):
            log.warning(
                "template %s unavailable (%s %s); creating from base",
                self.template,
                status,
                _message(data),
            )
            key = f"{idempotency_key}-base"
            status, data = await self._create("base", metadata, key)
        if status != 201 or not isinstance(data, dict):
            raise self._fail("create", status, data)
        return self._connection(data, resumed=False)

    async def _create(
        self, template: str, metadata: dict[str, str], idempotency_key: str
    ) -> tuple[int, Any]:
        body = {
            "templateID": template,
            "timeout": self.timeout_s,
            "metadata": metadata,
            "autoPause": True,
        }
        status, data, _ = await self._call(
            "create",
            "POST",
            "/v2/sandboxes",
            body,
            {"Idempotency-Key": idempotency_key, **self._token_headers(False)},
        )
        return status, data

    async def connect(self, sandbox_id: str) -> Connection:
        """``POST /v2/sandboxes/{id}/connect``: 200 running, 201 resumed.

        With a token TTL (sandbox host) every connect answers a new token.
        """
        status, data, _ = await self._call(
            "connect",
            "POST",
            f"/v2/sandboxes/{sandbox_id}/connect",
            {"timeout": self.timeout_s},
            self._token_headers(True),
        )
        if status == 404:
            raise SandboxNotFoundError(self.name, "connect", sandbox_id)
        if status not in (200, 201) or not isinstance(data, dict):
            raise self._fail("connect", status, data)
        return self._connection(data, resumed=status == 201)

    async def describe(self, sandbox_id: str) -> SandboxInfo | None:
        """``GET /sandboxes/{id}``."""
        status, data, _ = await self._call("get", "GET", f"/sandboxes/{sandbox_id}")
        if status == 404:
            return None
        if status != 200 or not isinstance(data, dict):
            raise self._fail("get", status, data)
        return _info(data)

    async def pause(self, sandbox_id: str) -> None:
        """``POST /sandboxes/{id}/pause``; 409 (already paused) is success."""
        status, data, _ = await self._call(
            "pause", "POST", f"/sandboxes/{sandbox_id}/pause", {}
        )
        if status == 404:
            raise SandboxNotFoundError(self.name, "pause", sandbox_id)
        if status not in (204, 409):
            raise self._fail("pause", status, data)

    async def kill(self, sandbox_id: str) -> bool:
        """``DELETE /sandboxes/{id}``."""
        status, data, _ = await self._call("kill", "DELETE", f"/sandboxes/{sandbox_id}")
        if status == 404:
            return False
        if status != 204:
            raise self._fail("kill", status, data)
        return True

    async def list(self) -> list[SandboxInfo]:
        """``GET /v2/sandboxes?state=running,paused`` through every page."""
        out: list[SandboxInfo] = []
        token = ""
        while True:
            query = "?state=running,paused&limit=100"
            if token:
                query += f"&nextToken={token}"
            status, data, headers = await self._call(
                "list", "GET", "/v2/sandboxes" + query
            )
            if status != 200 or not isinstance(data, list):
                raise self._fail("list", status, data)
            out.extend(_info(item) for item in data)
            token = headers.get("x-next-token", "") or headers.get("X-Next-Token", "")
            if not token:
                return out

    def __repr__(self) -> str:
        return f"E2bProvider({self.name}, {self.api_url})"


def _info(data: dict[str, Any]) -> SandboxInfo:
    state = _STATES.get(str(data.get("state", "")), "transitional")
    meta = data.get("metadata") or {}
    return SandboxInfo(
        sandbox_id=str(data["sandboxID"]),
        state=state,  # type: ignore[arg-type]
        metadata={str(k): str(v) for k, v in meta.items()},
    )
