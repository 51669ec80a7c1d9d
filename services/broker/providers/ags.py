"""``AgsProvider``: Tencent Cloud Agent Sandbox (AGS 2025-09-20) via its Python SDK.

Start/Pause/Resume are asynchronous on AGS: every call is followed by polling
``DescribeSandboxInstances`` until a settled status. ``ClientToken`` makes a
retried start idempotent. The data-plane token comes from
``AcquireSandboxInstanceToken`` after each start/resume and carries an
``ExpiresAt`` the broker honours (re-acquired before it runs out, or on 401).
"""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

from tencentcloud.ags.v20250920 import ags_client_async, models
from tencentcloud.common import credential
from tencentcloud.common.exception.tencent_cloud_sdk_exception import (
    TencentCloudSDKException,
)
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile

from services.broker.errors import ProviderError, SandboxNotFoundError
from services.broker.providers.base import Connection, ProviderState, SandboxInfo
from services.broker.settings import BrokerSettings

SETTLED: dict[str, ProviderState] = {"RUNNING": "running", "PAUSED": "paused"}
FAILED = {"FAILED", "STARTING_FAILED", "STOPPING_FAILED", "STOP_FAILED", "PAUSE_FAILED"}
FAILED |= {"RESUME_FAILED", "FORK_FAILED"}
GONE = {"STOPPED", "STOPPING"}
NOT_FOUND = "ResourceNotFound.SandboxInstance"


class AgsProvider:
    """Sandbox instances of one AGS tool (template) in one region."""

    name = "ags"

    def __init__(
        self,
        client: Any,
        tool_name: str,
        envd_url: str,
        *,
        timeout_s: int = 3600,
        poll_s: float = 0.2,
        settle_s: float = 120.0,
    ) -> None:
        self.client = client
        self.tool_name = tool_name
        self.envd_url = envd_url
        self.timeout = f"{min(max(timeout_s, 30), 86400)}s"
        self.poll_s = poll_s
        self.settle_s = settle_s

    @classmethod
    def from_settings(cls, s: BrokerSettings) -> AgsProvider:
        """Build the SDK client from ``ags_*`` settings."""
        cred = credential.Credential(s.ags_secret_id or "", s.ags_secret_key or "")
        http = HttpProfile(protocol=s.ags_scheme, endpoint=s.ags_endpoint)
        client = ags_client_async.AgsClient(
            cred, s.ags_region, ClientProfile(httpProfile=http)
        )
        envd = s.ags_envd_url or f"https://49983-{{id}}.{s.ags_region}.{s.ags_domain}"
        return cls(
            client,
            s.ags_tool_name,
            envd,
            timeout_s=s.sandbox_timeout_s,
            poll_s=s.ags_poll_s,
        )

    async def close(self) -> None:
        """Nothing to release beyond the SDK's own pool."""
        closer = getattr(self.client, "close", None)
        if closer is not None:
            result = closer()
            if asyncio.iscoroutine(result):
                await result

    async def _call(self, op: str, req: Any) -> Any:
        try:
            return await getattr(self.client, op)(req)
        except TencentCloudSDKException as exc:
            code = exc.get_code() or ""
            if code == NOT_FOUND:
                raise SandboxNotFoundError(self.name, op, str(req)) from exc
            transient = not code.startswith(("AuthFailure", "InvalidParameter"))
            raise ProviderError(
                self.name, op, f"{code}: {exc.get_message()}", transient=transient
            ) from exc

    async def _status(self, sandbox_id: str) -> str | None:
        req = models.DescribeSandboxInstancesRequest()
        req.InstanceIds = [sandbox_id]
        resp = await self._call("DescribeSandboxInstances", req)
        for inst in resp.InstanceSet or []:
            if inst.InstanceId == sandbox_id:
                return str(inst.Status)
        return None

    async def _await(self, sandbox_id: str, want: str) -> None:
        deadline = time.monotonic() + self.settle_s
        while True:
            status = await self._status(sandbox_id)
            if status == want:
                return
            if status is None or status in GONE:
                raise SandboxNotFoundError(self.name, "poll", sandbox_id)
            if status in FAILED:
                raise ProviderError(self.name, "poll", f"{sandbox_id} is {status}")
            if time.monotonic() > deadline:
                raise ProviderError(
                    self.name, "poll", f"{sandbox_id} stuck in {status}"
                )
            await asyncio.sleep(self.poll_s)

    async def _token(self, sandbox_id: str, resumed: bool) -> Connection:
        req = models.AcquireSandboxInstanceTokenRequest()
        req.InstanceId = sandbox_id
        resp = await self._call("AcquireSandboxInstanceToken", req)
        return Connection(
            sandbox_id=sandbox_id,
            envd_url=self.envd_url.replace("{id}", sandbox_id),
            access_token=resp.Token,
            token_expires_at=_epoch(resp.ExpiresAt),
            resumed=resumed,
        )

    async def create(
        self, metadata: dict[str, str], idempotency_key: str
    ) -> Connection:
        """StartSandboxInstance (ClientToken = the key), poll RUNNING, get a token."""
        req = models.StartSandboxInstanceRequest()
        req.ToolName = self.tool_name
        req.Timeout = self.timeout
        req.ClientToken = idempotency_key[:64]
        req.Metadata = []
        for key, value in metadata.items():
            var = models.MetadataVar()
            var.Name, var.Value = key, value
            req.Metadata.append(var)
        resp = await self._call("StartSandboxInstance", req)
        sid = str(resp.Instance.InstanceId)
        await self._await(sid, "RUNNING")
        return await self._token(sid, resumed=False)

    async def connect(self, sandbox_id: str) -> Connection:
        """Resume if paused (poll RUNNING); always a freshly acquired token."""
        status = await self._status(sandbox_id)
        if status is None or status in GONE:
            raise SandboxNotFoundError(self.name, "connect", sandbox_id)
        resumed = False
        if status != "RUNNING":
            if status == "PAUSED":
                req = models.ResumeSandboxInstanceRequest()
                req.InstanceId, req.Timeout = sandbox_id, self.timeout
                await self._call("ResumeSandboxInstance", req)
                resumed = True
            await self._await(sandbox_id, "RUNNING")
        return await self._token(sandbox_id, resumed)

    async def describe(self, sandbox_id: str) -> SandboxInfo | None:
        """DescribeSandboxInstances, mapped onto running/paused/transitional/failed."""
        status = await self._status(sandbox_id)
        if status is None or status in GONE:
            return None
        return SandboxInfo(sandbox_id=sandbox_id, state=_state(status))

    async def pause(self, sandbox_id: str) -> None:
        """PauseSandboxInstance (memory kept), then poll PAUSED."""
        req = models.PauseSandboxInstanceRequest()
        req.InstanceId, req.Memory = sandbox_id, True
        await self._call("PauseSandboxInstance", req)
        await self._await(sandbox_id, "PAUSED")

    async def kill(self, sandbox_id: str) -> bool:
        """StopSandboxInstance; False if it did not exist."""
        req = models.StopSandboxInstanceRequest()
        req.InstanceId = sandbox_id
        try:
            await self._call("StopSandboxInstance", req)
        except SandboxNotFoundError:
            return False
        return True

    async def list(self) -> list[SandboxInfo]:
        """DescribeSandboxInstanceList through every page (token pagination)."""
        out: list[SandboxInfo] = []
        token = ""
        while True:
            req = models.DescribeSandboxInstanceListRequest()
            req.MaxResults = 100
            if token:
                req.NextToken = token
            resp = await self._call("DescribeSandboxInstanceList", req)
            for inst in resp.InstanceSet or []:
                if inst.Status in GONE:
                    continue
                meta = {m.Name: m.Value for m in inst.Metadata or []}
                out.append(
                    SandboxInfo(
                        sandbox_id=inst.InstanceId,
                        state=_state(inst.Status),
                        metadata=meta,
                    )
                )
            token = resp.NextToken or ""
            if not token:
                return out


def _state(status: str) -> ProviderState:
    if status in SETTLED:
        return SETTLED[status]
    return "failed" if status in FAILED else "transitional"


def _epoch(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    parsed = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return parsed.timestamp()
