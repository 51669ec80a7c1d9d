"""A fake Tencent Cloud API (AGS 2025-09-20) as a real aiohttp server.

It checks every request's TC3-HMAC-SHA256 signature exactly as the cloud does
(canonical request over content-type;host and the payload hash, a key derived
from the date and service), then drives the local sandbox host underneath
through its E2B REST API. Start and pause answer transitional states first
(``STARTING``, ``PAUSING``) so clients must poll ``DescribeSandboxInstances``.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import secrets
import time
from typing import Any

import aiohttp
from aiohttp import web

VERSION = "2025-09-20"


def tc3_signature(
    secret_key: str,
    method: str,
    host: str,
    ctype: str,
    body: bytes,
    ts: str,
    service: str,
) -> str:
    """The signature a TC3-HMAC-SHA256 request must carry."""
    date = datetime.datetime.fromtimestamp(int(ts), datetime.UTC).strftime("%Y-%m-%d")
    canonical = "\n".join(
        [
            method,
            "/",
            "",
            f"content-type:{ctype}\nhost:{host}\n",
            "content-type;host",
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{date}/{service}/tc3_request"
    to_sign = "\n".join(
        ["TC3-HMAC-SHA256", ts, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )

    def mac(key: bytes, msg: str) -> bytes:
        return hmac.new(key, msg.encode(), hashlib.sha256).digest()

    key = mac(mac(mac(("TC3" + secret_key).encode(), date), service), "tc3_request")
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


class TencentError(Exception):
    """An API error answer."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


class FakeAgs:
    """State of the fake: credentials, instances, tokens, call log."""

    def __init__(self, host_url: str, host_key: str, secret_id: str, secret_key: str):
        self.host_url = host_url.rstrip("/")
        self.host_headers = {"X-API-KEY": host_key}
        self.secret_id = secret_id
        self.secret_key = secret_key
        self.token_ttl_s = 3600
        self.calls: list[str] = []
        self.rejected = 0
        self._tokens: dict[str, str] = {}
        self._fresh: set[str] = set()  # answer STARTING/PAUSING once
        self._pausing: set[str] = set()
        self._client_tokens: dict[str, str] = {}
        self._http: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        """The aiohttp application (one POST route, like the real API)."""
        app = web.Application()
        app.router.add_post("/", self.handle)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, _: web.Application) -> None:
        if self._http is not None:
            await self._http.close()

    async def _host(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        if self._http is None:
            self._http = aiohttp.ClientSession()
        async with self._http.request(
            method, self.host_url + path, json=body, headers=self.host_headers
        ) as r:
            raw = await r.read()
            return r.status, (json.loads(raw) if raw else None)

    # ---- HTTP edge --------------------------------------------------------------

    def _check_signature(self, request: web.Request, body: bytes) -> None:
        auth = request.headers.get("Authorization", "")
        ts = request.headers.get("X-TC-Timestamp", "0")
        try:
            _, rest = auth.split(" ", 1)
            parts = dict(p.strip().split("=", 1) for p in rest.split(","))
            secret_id, date, service, _ = parts["Credential"].split("/")
        except ValueError as exc:
            raise TencentError("AuthFailure.SignatureFailure", "bad header") from exc
        if secret_id != self.secret_id:
            raise TencentError("AuthFailure.SecretIdNotFound", "unknown SecretId")
        ts_date = datetime.datetime.fromtimestamp(int(ts), datetime.UTC).date()
        if date != ts_date.isoformat():
            raise TencentError("AuthFailure.SignatureFailure", "credential date")
        if abs(time.time() - int(ts)) > 300:
            raise TencentError("AuthFailure.SignatureExpire", "timestamp too old")
        want = tc3_signature(
            self.secret_key,
            request.method,
            request.headers.get("Host", ""),
            request.headers.get("Content-Type", ""),
            body,
            ts,
            service,
        )
        if parts.get("SignedHeaders") != "content-type;host" or not hmac.compare_digest(
            want, parts.get("Signature", "")
        ):
            raise TencentError("AuthFailure.SignatureFailure", "signature mismatch")

    async def handle(self, request: web.Request) -> web.Response:
        """Verify, dispatch on ``X-TC-Action``, answer the ``Response`` envelope."""
        body = await request.read()
        rid = secrets.token_hex(8)
        action = request.headers.get("X-TC-Action", "")
        try:
            self._check_signature(request, body)
            if request.headers.get("X-TC-Version") != VERSION:
                raise TencentError("InvalidParameter", "bad X-TC-Version")
            handler = getattr(self, "do_" + action, None)
            if handler is None:
                raise TencentError("InvalidAction", f"{action} not supported")
            self.calls.append(action)
            result = await handler(json.loads(body or b"{}"))
        except TencentError as exc:
            if exc.code.startswith("AuthFailure"):
                self.rejected += 1
            result = {"Error": {"Code": exc.code, "Message": exc.message}}
        # Exactly "application/json" (no charset), as the real API answers:
        # the SDK only looks for an Error envelope under that content type.
        body = json.dumps({"Response": {**result, "RequestId": rid}}).encode()
        return web.Response(body=body, content_type="application/json")

    # ---- actions ------------------------------------------------------------------

    def _instance(self, detail: dict[str, Any], status: str) -> dict[str, Any]:
        meta = detail.get("metadata") or {}
        return {
            "InstanceId": detail["sandboxID"],
            "ToolId": "sdt-fake",
            "ToolName": detail.get("templateID", ""),
            "Status": status,
            "TimeoutSeconds": 600,
            "ExpiresAt": detail.get("endAt"),
            "CreateTime": detail.get("startedAt"),
            "UpdateTime": detail.get("startedAt"),
            "Metadata": [{"Name": k, "Value": v} for k, v in meta.items()],
            "AuthMode": "TOKEN",
        }

    async def _status(self, sid: str) -> dict[str, Any] | None:
        status, detail = await self._host("GET", f"/sandboxes/{sid}")
        if status == 404:
            return None
        if sid in self._fresh:
            self._fresh.discard(sid)
            return self._instance(detail, "STARTING")
        if sid in self._pausing:
            self._pausing.discard(sid)
            return self._instance(detail, "PAUSING")
        return self._instance(
            detail, "RUNNING" if detail["state"] == "running" else "PAUSED"
        )

    async def do_StartSandboxInstance(self, req: dict[str, Any]) -> dict[str, Any]:
        timeout = str(req.get("Timeout", "300s"))
        if not timeout.endswith("s") or int(timeout[:-1]) < 30:
            raise TencentError("InvalidParameterValue.Timeout", timeout)
        meta = {m["Name"]: m["Value"] for m in req.get("Metadata", [])}
        body = {"templateID": req.get("ToolName", "base"), "timeout": int(timeout[:-1])}
        body["metadata"] = meta
        status, data = await self._host("POST", "/v2/sandboxes", body)
        if status != 201:
            raise TencentError("InternalError", str(data))
        sid = data["sandboxID"]
        ctoken = req.get("ClientToken")
        if ctoken and ctoken in self._client_tokens:
            await self._host(
                "DELETE", f"/sandboxes/{sid}"
            )  # idempotent: the first wins
            sid = self._client_tokens[ctoken]
        else:
            if ctoken:
                self._client_tokens[ctoken] = sid
            self._tokens[sid] = data["envdAccessToken"]
            self._fresh.add(sid)
        _, detail = await self._host("GET", f"/sandboxes/{sid}")
        return {"Instance": self._instance(detail, "STARTING")}

    async def do_DescribeSandboxInstances(self, req: dict[str, Any]) -> dict[str, Any]:
        found = [await self._status(i) for i in req.get("InstanceIds", [])]
        return {"InstanceSet": [f for f in found if f is not None]}

    async def do_DescribeSandboxInstanceList(
        self, req: dict[str, Any]
    ) -> dict[str, Any]:
        _, listed = await self._host("GET", "/v2/sandboxes?state=running,paused")
        start = int(req.get("NextToken") or 0)
        size = int(req.get("MaxResults") or 20)
        page = listed[start : start + size]
        items = [
            self._instance(d, "RUNNING" if d["state"] == "running" else "PAUSED")
            for d in page
        ]
        more = start + size < len(listed)
        return {
            "InstanceSet": items,
            "TotalCount": len(listed),
            "NextToken": str(start + size) if more else "",
        }

    async def do_PauseSandboxInstance(self, req: dict[str, Any]) -> dict[str, Any]:
        sid = req["InstanceId"]
        status, _ = await self._host("POST", f"/sandboxes/{sid}/pause", {})
        if status == 404:
            raise TencentError("ResourceNotFound.SandboxInstance", sid)
        self._pausing.add(sid)
        return {"InstanceStatus": "PAUSING"}

    async def do_ResumeSandboxInstance(self, req: dict[str, Any]) -> dict[str, Any]:
        sid = req["InstanceId"]
        status, data = await self._host("POST", f"/v2/sandboxes/{sid}/connect", {})
        if status == 404:
            raise TencentError("ResourceNotFound.SandboxInstance", sid)
        if status not in (200, 201):
            raise TencentError("InternalError", str(data))
        self._tokens[sid] = data["envdAccessToken"]
        return {}

    async def do_StopSandboxInstance(self, req: dict[str, Any]) -> dict[str, Any]:
        sid = req["InstanceId"]
        status, _ = await self._host("DELETE", f"/sandboxes/{sid}")
        if status == 404:
            raise TencentError("ResourceNotFound.SandboxInstance", sid)
        return {}

    async def do_AcquireSandboxInstanceToken(
        self, req: dict[str, Any]
    ) -> dict[str, Any]:
        sid = req["InstanceId"]
        if await self._status(sid) is None:
            raise TencentError("ResourceNotFound.SandboxInstance", sid)
        if sid not in self._tokens:
            _, data = await self._host("POST", f"/v2/sandboxes/{sid}/connect", {})
            self._tokens[sid] = data["envdAccessToken"]
        expires = datetime.datetime.fromtimestamp(
            time.time() + self.token_ttl_s, datetime.UTC
        ).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"Token": self._tokens[sid], "ExpiresAt": expires, "TrafficToken": "t"}
