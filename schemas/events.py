"""The session log: one envelope, one payload Struct per event type (design §3).

Payloads tolerate unknown fields so a newer writer's additions pass through an
older reader; new fields always get defaults and existing fields are never retyped.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import msgspec


class Payload(msgspec.Struct, frozen=True, kw_only=True):
    """Base of every event payload; ``TYPE`` is the event's ``type``."""

    TYPE: ClassVar[str] = ""


class GenericData(msgspec.Struct, frozen=True):
    """Payload of an event type this version does not know; kept byte-exact."""

    raw: msgspec.Raw


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """The envelope every log entry has. ``data`` is a Payload (or GenericData)."""

    session_id: str
    seq: int
    id: str
    type: str
    ts: str
    actor: str
    data: Any
    prev: str | None = None


# --- sessions -----------------------------------------------------------------


class SessionCreated(Payload, frozen=True, kw_only=True):
    """A device opened a session; that device owns it."""

    TYPE: ClassVar[str] = "session.created"
    device_id: str
    title: str = ""
    metadata: dict[str, str] = {}


class SessionClosed(Payload, frozen=True, kw_only=True):
    """The session was deleted; its log is kept."""

    TYPE: ClassVar[str] = "session.closed"
    reason: str = "deleted"


class SessionForked(Payload, frozen=True, kw_only=True):
    """This session was forked from ``parent_session_id`` at ``at_seq``.

    The events after this one copy the parent's conversation through its last
    turn end at or before ``at_seq`` (``conversation_seq``; a turn still open
    at ``at_seq`` is left out). The workspace starts from the parent's
    turn-end save ``workspace_manifest`` (taken at the ``turn.ended`` of
    ``workspace_seq``); None: no save existed, the workspace starts empty.
    """

    TYPE: ClassVar[str] = "session.forked"
    parent_session_id: str
    at_seq: int
    conversation_seq: int = 0
    copied_events: int = 0
    workspace_manifest: str | None = None
    workspace_seq: int | None = None


# --- turns --------------------------------------------------------------------


class UserPrompt(Payload, frozen=True, kw_only=True):
    """A person's prompt; turns run one at a time in the order of these seqs."""

    TYPE: ClassVar[str] = "user.prompt"
    text: str
    turn_id: str
    client_msg_id: str | None = None


class TurnStarted(Payload, frozen=True, kw_only=True):
    """A worker began answering the prompt at ``prompt_seq``."""

    TYPE: ClassVar[str] = "turn.started"
    turn_id: str
    prompt_seq: int


class TurnCancelRequested(Payload, frozen=True, kw_only=True):
    """A person asked to stop the running turn."""

    TYPE: ClassVar[str] = "turn.cancel_requested"
    turn_id: str


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Token usage of one turn, and what broken model responses cost it.

    ``cached_input_tokens`` is the part of ``input_tokens`` served from the
    provider's prompt cache; ``estimated`` is true when some count was estimated
    because the provider sent none; ``retries`` counts model responses started
    over, by cause in ``retry_causes`` (``http_429``, ``disconnect``,
    ``truncated``, ``malformed``, ``stall``, ...), and ``retry_s`` the seconds
    lost to them (failed attempts plus back-off).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    estimated: bool = False
    retries: int = 0
    retry_causes: dict[str, int] = {}
    retry_s: float = 0.0
    # Seconds the turn waited on the model (every attempt, first byte to last).
    model_s: float = 0.0


StopReason = Literal["end_turn", "cancelled", "max_steps", "error", "worker_lost"]


class TurnEnded(Payload, frozen=True, kw_only=True):
    """A turn finished, with why and what it cost."""

    TYPE: ClassVar[str] = "turn.ended"
    turn_id: str
    stop_reason: StopReason
    usage: Usage = Usage()
    message: str = ""
    # True when a tool call failed for our infrastructure (broker or sandbox
    # host unreachable after retries), not because of the model or the tool.
    infrastructure_degraded: bool = False
    # The model that gave the turn's last answer (a fallback's name after one).
    model: str = ""


class AgentThoughtDelta(Payload, frozen=True, kw_only=True):
    """Coalesced reasoning text (tens per second, not one per token)."""

    TYPE: ClassVar[str] = "agent.thought.delta"
    turn_id: str
    text: str


class AgentMessageDelta(Payload, frozen=True, kw_only=True):
    """Coalesced answer text."""

    TYPE: ClassVar[str] = "agent.message.delta"
    turn_id: str
    text: str


class AgentMessageDiscarded(Payload, frozen=True, kw_only=True):
    """Withdraws the deltas of a model response that broke and is started over.

    Every ``agent.message.delta`` and ``agent.thought.delta`` of ``turn_id``
    since its last ``agent.message`` (or its start) is void; the response
    streams again from its beginning. ``attempt`` is the attempt that broke (1
    is the first) and ``cause`` why.
    """

    TYPE: ClassVar[str] = "agent.message.discarded"
    turn_id: str
    attempt: int
    cause: str = ""


class AgentMessage(Payload, frozen=True, kw_only=True):
    """The full text of one assistant message."""

    TYPE: ClassVar[str] = "agent.message"
    turn_id: str
    text: str
    thought: str = ""


# --- tools --------------------------------------------------------------------


class ToolCall(Payload, frozen=True, kw_only=True):
    """The agent called a tool."""

    TYPE: ClassVar[str] = "tool.call"
    turn_id: str
    call_id: str
    tool: str
    args: dict[str, Any] = {}


class ToolUpdate(Payload, frozen=True, kw_only=True):
    """Live output of a running tool."""

    TYPE: ClassVar[str] = "tool.update"
    call_id: str
    stream: Literal["stdout", "stderr", "status"] = "stdout"
    text: str = ""


class ToolResult(Payload, frozen=True, kw_only=True):
    """A tool finished; ``output`` is what the model saw (bounded)."""

    TYPE: ClassVar[str] = "tool.result"
    call_id: str
    ok: bool
    output: str = ""
    error: str | None = None
    truncated: bool = False
    spill_path: str | None = None
    exit_code: int | None = None
    # Why it failed, when the cause is ours (``infrastructure_unavailable``).
    error_code: str | None = None


# --- approvals ----------------------------------------------------------------

OptionKind = Literal["allow_once", "allow_always", "reject_once", "reject_always"]


class PermissionOption(msgspec.Struct, frozen=True, kw_only=True):
    """One answer a person may give (ACP ``PermissionOption``)."""

    option_id: OptionKind
    name: str
    kind: OptionKind


class PermissionRequested(Payload, frozen=True, kw_only=True):
    """A tool call waits for a person's decision."""

    TYPE: ClassVar[str] = "permission.requested"
    request_id: str
    turn_id: str
    call_id: str
    tool: str
    args: dict[str, Any] = {}
    options: list[PermissionOption] = []


class PermissionResolved(Payload, frozen=True, kw_only=True):
    """A person answered a permission request."""

    TYPE: ClassVar[str] = "permission.resolved"
    request_id: str
    option: OptionKind


class PolicyUpdated(Payload, frozen=True, kw_only=True):
    """An ``*_always`` answer became a standing, auditable rule for this session."""

    TYPE: ClassVar[str] = "policy.updated"
    tool: str
    decision: Literal["allow", "reject"]
    scope: Literal["session"] = "session"
    request_id: str | None = None


# --- workers and sandboxes -----------------------------------------------------


class WorkerAssigned(Payload, frozen=True, kw_only=True):
    """A warm worker took the session."""

    TYPE: ClassVar[str] = "worker.assigned"
    worker_id: str
    host: str
    pid: int


class WorkerReleased(Payload, frozen=True, kw_only=True):
    """A worker let the session go (idle, deleted, lost)."""

    TYPE: ClassVar[str] = "worker.released"
    worker_id: str
    reason: str


SandboxStateName = Literal[
    "none",
    "creating",
    "running",
    "pausing",
    "paused",
    "resuming",
    "rebuilding",
    "archived",
    "deleted",
    "failed",
]


class SandboxState(Payload, frozen=True, kw_only=True):
    """The session's sandbox moved to ``state``."""

    TYPE: ClassVar[str] = "sandbox.state"
    state: SandboxStateName
    reason: str = ""
    duration_ms: float = 0.0
    provider: str = ""
    sandbox_id: str | None = None
    rebuilt: bool = False


BilledState = Literal["running", "paused", "archived"]


class SandboxUsage(Payload, frozen=True, kw_only=True):
    """The session's sandbox left a billed state after ``seconds`` in it.

    Appended by the broker on every transition out of ``running`` (creating,
    resuming and pausing count as running: the provider bills them), ``paused``
    (archiving counts as paused) or ``archived``. The state it is in now began
    at this event's ``ts``; a reader adds that open interval itself.
    ``archive_bytes`` is the workspace bytes the session's archive holds from
    now on (what an archived state is billed on). ``at`` is the broker's clock
    at the transition (unix seconds; readers prefer it to the envelope's ``ts``).
    """

    TYPE: ClassVar[str] = "sandbox.usage"
    state: BilledState | None
    seconds: float
    next_state: BilledState | None
    archive_bytes: int = 0
    at: float = 0.0


class ErrorRaised(Payload, frozen=True, kw_only=True):
    """Something failed that the App should show."""

    TYPE: ClassVar[str] = "error"
    code: str
    message: str
    turn_id: str | None = None


EVENT_TYPES: dict[str, type[Payload]] = {
    cls.TYPE: cls
    for cls in (
        SessionCreated,
        SessionClosed,
        SessionForked,
        UserPrompt,
        TurnStarted,
        TurnCancelRequested,
        TurnEnded,
        AgentThoughtDelta,
        AgentMessageDelta,
        AgentMessageDiscarded,
        AgentMessage,
        ToolCall,
        ToolUpdate,
        ToolResult,
        PermissionRequested,
        PermissionResolved,
        PolicyUpdated,
        WorkerAssigned,
        WorkerReleased,
        SandboxState,
        SandboxUsage,
        ErrorRaised,
    )
}
