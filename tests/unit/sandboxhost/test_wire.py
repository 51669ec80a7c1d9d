"""Pure pieces of the sandbox host: end events, framing, signatures, faults."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from urllib.parse import quote

import pytest
from aiohttp.test_utils import make_mocked_request

from services.sandboxhost.connect import END_STREAM, HEADER, end_of_stream, envelope
from services.sandboxhost.envd_routes import signature_ok
from services.sandboxhost.errors import ControlError, EnvdRpcError
from services.sandboxhost.faults import Faults, FaultUpdate
from services.sandboxhost.processes import end_event
from services.sandboxhost.supervisor import Paths, permissions


def test_end_events_follow_go_process_state_wording() -> None:
    assert end_event(0) == {"exited": True, "status": "exit status 0"}
    assert end_event(3 << 8) == {
        "exited": True,
        "status": "exit status 3",
        "exitCode": 3,
        "error": "exit status 3",
    }
    killed = end_event(9)  # WTERMSIG == SIGKILL
    assert killed == {
        "exitCode": -1,
        "status": "signal: killed",
        "error": "signal: killed",
    }
    assert end_event(15)["status"] == "signal: terminated"


def test_envelopes_carry_flags_length_and_json() -> None:
    data = envelope({"event": {"start": {"pid": 7}}})
    flags, length = HEADER.unpack(data[:5])
    assert (flags, json.loads(data[5:])) == (0, {"event": {"start": {"pid": 7}}})
    assert length == len(data) - 5
    end = end_of_stream(EnvdRpcError("not_found", "gone"))
    assert end[0] == END_STREAM
    assert json.loads(end[5:]) == {"error": {"code": "not_found", "message": "gone"}}
    assert EnvdRpcError("bogus", "x").code == "internal"


def _signed(path: str, op: str, token: str, expiration: int | None) -> str:
    raw = f"{path}:{op}::{token}" + (f":{expiration}" if expiration else "")
    digest = base64.b64encode(hashlib.sha256(raw.encode()).digest()).decode()
    query = f"/files?path={path}&signature={quote('v1_' + digest.rstrip('='))}"
    return query + (f"&signature_expiration={expiration}" if expiration else "")


def test_signed_urls_check_path_operation_token_and_expiry() -> None:
    url = _signed("/w/a.txt", "read", "tok", None)
    assert signature_ok(make_mocked_request("GET", url), "tok", "read")
    assert not signature_ok(make_mocked_request("GET", url), "other", "read")
    assert not signature_ok(make_mocked_request("GET", url), "tok", "write")
    expired = _signed("/w/a.txt", "read", "tok", 1000)
    assert not signature_ok(make_mocked_request("GET", expired), "tok", "read")
    assert not signature_ok(make_mocked_request("GET", "/files?path=/x"), "tok", "read")


def test_faults_merge_and_consume_resume_failures() -> None:
    faults = Faults()
    faults.apply(FaultUpdate(fail_resumes=1, delay_ms={"get": 5}, swap={"a": "b"}))
    with pytest.raises(ControlError) as err:
        faults.check_resume("a")
    assert err.value.status == 500
    faults.check_resume("a")  # consumed
    faults.apply(FaultUpdate(delay_ms={"get": 0}, swap={"a": ""}))
    assert (faults.delay_ms, faults.swap) == ({}, {})
    faults.apply(FaultUpdate(fail_resumes=2, clear=True))
    assert faults.fail_resumes == 2


def test_supervisor_paths_expand_home_and_map_when_unisolated() -> None:
    paths = Paths("/home/user", [["/workspace", "/data/ws"]])
    assert paths.expand("~/x") == "/home/user/x"
    assert paths.expand("a/../b") == "/home/user/b"
    assert paths.expand("/workspace/../etc") == "/etc"
    assert paths.real("/workspace/f") == "/data/ws/f"
    assert paths.real("/workspaces") == "/workspaces"
    assert permissions(stat.S_IFDIR | 0o755) == "drwxr-xr-x"
    assert permissions(stat.S_IFREG | 0o640) == "-rw-r-----"
    assert os.sep == "/"
