"""One turn of the agent loop: model stream → deltas → message → tools → repeat.

The turn's body (:meth:`Turn.steps`) runs as its own task so a cancel request
can stop it at any await (the model stream is closed, a running command's
process group is killed by the envd client); :meth:`Turn.finish` then writes
what the body left unfinished and ``turn.ended``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Literal, Protocol

import msgspec

from eventstore.log import StoredEvent
from schemas.events import (
    AgentMessage,
    AgentMessageDelta,
    AgentMessageDiscarded,
    AgentThoughtDelta,
    ErrorRaised,
    OptionKind,
    Payload,
    PermissionRequested,
    PolicyUpdated,
    StopReason,
    ToolCall,
    ToolResult,
    ToolUpdate,
    TurnEnded,
    TurnStarted,
    Usage,
)
from schemas.ids import new_id
from services.envd import SandboxTools
from services.pool import approval, usage_metrics
from services.pool.cancellation import raise_if_cancelled
from services.pool.coalesce import DeltaCoalescer
from services.pool.conversation import Conversation
from services.pool.errors import ModelError, SandboxUnavailableError, ScriptError
from services.pool.live import LiveOutput
from services.pool.models import metrics
from services.pool.models.base import (
    Finish,
    ModelChunk,
    ModelClient,
    Retrying,
    TextDelta,
    ThoughtDelta,
    ToolRequest,
)
from services.pool.outcome import MAX_OUTPUT_CHARS, Outcome
from services.pool.sandbox import SandboxBinding
from services.pool.settings import PoolSettings
from services.pool.toolbox import (
    INFRA_UNAVAILABLE,
    LIVE,
    Run,
    ToolArgs,
    ToolArgsError,
    execute,
    parse_args,
    specs,
)

log = logging.getLogger(__name__)
# Bind refusals that are our infrastructure's failure (worth a retry), not the
# session's (deleted, reassigned, token reused).
INFRA_BIND_CODES = frozenset(
    {"broker_unavailable", "broker_timeout", "sandbox_failed", "internal"}
)

SYSTEM_PROMPT = (
    "You are a coding agent. You work on a remote computer whose workspace is "
    "/workspace; every tool runs there. Use the tools to inspect and change "
    "files and to run commands; keep answers short."
)


class SessionPort(Protocol):
    """What a turn needs from its session: the log, the fold, the sandbox."""

    conv: Conversation
    binding: SandboxBinding
    model: ModelClient
    settings: PoolSettings

    async def append(self, payload: Payload) -> StoredEvent:
        """Append to the session log as this worker."""
        ...

    async def caught_up(self, seq: int) -> None:
        """Wait until the fold has applied ``seq``."""
        ...

    async def answer(self, request_id: str) -> OptionKind:
        """Wait (durably: it is in the log) for a person's answer."""
        ...


class Turn:
    """State of one running turn; the body and the finish share it."""

    def __init__(self, port: SessionPort, turn_id: str) -> None:
        self.port = port
        self.turn_id = turn_id
        self.usage = Usage()
        self.answered_by = ""
        self._attempt = 1
        self.last_seq = 0
        self.open_calls: list[str] = []
        self._text = ""
        self._thought = ""
        self._coalescer: DeltaCoalescer | None = None
        self._tools = specs()
        self.degraded = False  # a tool failed for our infrastructure

    async def _append(self, payload: Payload) -> StoredEvent:
        stored = await self.port.append(payload)
        self.last_seq = stored.seq
        # Stop lands mid-publish most of the time, and 3.11's wait_for inside
        # nats.py swallows a cancel that races the publish's answer: without
        # this check a turn streamed on after Stop (seen under load).
        raise_if_cancelled()
        return stored

    async def start(self, prompt_seq: int) -> None:
        """``turn.started`` (the App's first sign that the prompt is served)."""
        await self._append(TurnStarted(turn_id=self.turn_id, prompt_seq=prompt_seq))

    async def steps(self, resume: bool) -> tuple[StopReason, str]:
        """Run model calls and tools until the model stops or the step limit."""
        if resume:
            await self._resume_calls()
        for _ in range(self.port.settings.pool_max_steps):
            await self.port.caught_up(self.last_seq)
            try:
                calls = await self._model_call()
            except (ModelError, ScriptError) as exc:
                code = exc.code if isinstance(exc, ModelError) else "bad_script"
                if self._text or self._thought:  # half an answer: withdrawn
                    await self._withdraw(code)
                await self._append(
                    ErrorRaised(code=code, message=str(exc), turn_id=self.turn_id)
                )
                return "error", str(exc)
            if not calls:
                return "end_turn", ""
            for call in await self._announce(calls):
                await self._tool(call)
        return "max_steps", ""

    # --- the model ------------------------------------------------------------------

    async def _model_call(self) -> list[ToolRequest]:
        messages = self.port.conv.model_messages(SYSTEM_PROMPT)
        calls: list[ToolRequest] = []
        self._attempt = 1
        self._coalescer = DeltaCoalescer(
            self._delta, self.port.settings.pool_delta_interval_s
        )
        started = time.monotonic()
        try:
            async with self.port.binding.activity("model"):
                async for chunk in self.port.model.stream(messages, self._tools):
                    await self._chunk(chunk, calls)
        finally:
            took = round(self.usage.model_s + time.monotonic() - started, 3)
            self.usage = msgspec.structs.replace(self.usage, model_s=took)
        await self._coalescer.close()
        self._coalescer = None
        await self._message()
        return calls

    async def _chunk(self, chunk: ModelChunk, calls: list[ToolRequest]) -> None:
        assert self._coalescer is not None
        raise_if_cancelled()  # a cancel a library swallowed (see _append)
        match chunk:
            case TextDelta():
                self._text += chunk.text
                await self._coalescer.add("message", chunk.text)
            case ThoughtDelta():
                self._thought += chunk.text
                await self._coalescer.add("thought", chunk.text)
            case ToolRequest():
                calls.append(chunk)
            case Finish():
                self._count(chunk)
            case Retrying():
                await self._retrying(chunk, calls)

    async def _retrying(self, retry: Retrying, calls: list[ToolRequest]) -> None:
        """A broken response starts over: count it; withdraw what it streamed."""
        causes = dict(self.usage.retry_causes)
        causes[retry.cause] = causes.get(retry.cause, 0) + 1
        self.usage = msgspec.structs.replace(
            self.usage,
            retries=self.usage.retries + 1,
            retry_causes=causes,
            retry_s=round(self.usage.retry_s + retry.lost_s, 3),
        )
        metrics.retried(retry.cause, retry.lost_s)
        if retry.discard:
            calls.clear()
            await self._withdraw(retry.cause)
        self._attempt += 1

    async def _withdraw(self, cause: str) -> None:
        """``agent.message.discarded``: what this attempt streamed is void."""
        if self._coalescer is not None:
            await self._coalescer.drop()
        self._text = self._thought = ""
        await self._append(
            AgentMessageDiscarded(
                turn_id=self.turn_id, attempt=self._attempt, cause=cause
            )
        )

    async def _delta(self, kind: str, text: str) -> None:
        if kind == "thought":
            await self._append(AgentThoughtDelta(turn_id=self.turn_id, text=text))
        else:
            await self._append(AgentMessageDelta(turn_id=self.turn_id, text=text))

    def _count(self, finish: Finish) -> None:
        usage = self.usage
        self.usage = msgspec.structs.replace(
            usage,
            input_tokens=usage.input_tokens + finish.input_tokens,
            output_tokens=usage.output_tokens + finish.output_tokens,
            cached_input_tokens=usage.cached_input_tokens + finish.cached_input_tokens,
            estimated=usage.estimated or finish.estimated,
        )
        self.answered_by = finish.model or self.answered_by

    async def _message(self) -> None:
        """The full text of the response so far (deltas already went out)."""
        text, thought = self._text, self._thought
        self._text = self._thought = ""
        if text or thought:
            await self._append(
                AgentMessage(turn_id=self.turn_id, text=text, thought=thought)
            )

    # --- tools ----------------------------------------------------------------------

    async def _announce(self, requests: list[ToolRequest]) -> list[ToolCall]:
        """``tool.call`` for every call of one response, before any runs."""
        calls = []
        for request in requests:
            try:
                args = json.loads(request.arguments or "{}")
            except ValueError:
                args = request.arguments
            call = ToolCall(
                turn_id=self.turn_id,
                call_id=request.call_id,
                tool=request.name,
                args=args if isinstance(args, dict) else {"_raw": str(args)[:2000]},
            )
            await self._append(call)
            self.open_calls.append(call.call_id)
            calls.append(call)
        return calls

    async def _tool(self, call: ToolCall) -> None:
        if "_raw" in call.args:
            bad = f"arguments are not a JSON object: {call.args['_raw'][:200]}"
            await self._result(call.call_id, Outcome(ok=False, error=bad))
            return
        decision: str = approval.decide(
            self.port.settings.approval, call.tool, self.port.conv.policies
        )
        if decision == "ask":
            decision = await self._ask(call.call_id, call.tool, call.args)
        await self._run_decided(call.call_id, call.tool, call.args, decision)

    async def _ask(self, call_id: str, tool: str, args: dict[str, Any]) -> str:
        request_id = new_id("perm")
        await self._append(
            PermissionRequested(
                request_id=request_id,
                turn_id=self.turn_id,
                call_id=call_id,
                tool=tool,
                args=args,
                options=approval.OPTIONS,
            )
        )
        return await self._answered(request_id, tool)

    async def _answered(self, request_id: str, tool: str) -> str:
        option = await self.port.answer(request_id)
        rule = approval.standing(option)
        if rule is not None and self.port.conv.policies.get(tool) != rule:
            await self._append(
                PolicyUpdated(tool=tool, decision=rule, request_id=request_id)
            )
        return "allow" if approval.allows(option) else "rejected"

    async def _run_decided(
        self, call_id: str, tool: str, args: dict[str, Any], decision: str
    ) -> None:
        if decision == "allow":
            outcome = await self._execute(call_id, tool, args)
        elif decision == "reject":
            outcome = Outcome(ok=False, error="rejected by this session's policy")
        else:
            outcome = Outcome(ok=False, error="the user rejected this tool call")
        await self._result(call_id, outcome)

    async def _execute(self, call_id: str, tool: str, args: dict[str, Any]) -> Outcome:
        try:
            typed = parse_args(tool, args)
        except ToolArgsError as exc:
            return Outcome(ok=False, error=str(exc))
        binding = self.port.binding
        outcome = await self._tries(call_id, typed)
        if outcome.error_code == INFRA_UNAVAILABLE:
            self.degraded = True
        notice = binding.take_notice()
        if notice:
            outcome = Outcome(
                **{**_fields(outcome), "output": f"{notice}\n\n{outcome.output}"}
            )
        return outcome

    async def _tries(self, call_id: str, typed: ToolArgs) -> Outcome:
        """Run a tool, retrying infrastructure failures where that is safe
        within ``pool_tool_retry_window_s`` (a broker or sandbox host restart)."""
        window = self.port.settings.pool_tool_retry_window_s
        deadline = time.monotonic() + window
        delay, started = 0.2, False
        while True:
            run, started = await self._try(call_id, typed, started)
            if run.stale:
                self.port.binding.mark_stale()
            if not run.retry_safe or time.monotonic() + delay > deadline:
                if not started:  # the sandbox was never reached: say why
                    await self._append(
                        ErrorRaised(
                            code="sandbox_unavailable",
                            message=run.outcome.error or "",
                            turn_id=self.turn_id,
                        )
                    )
                return run.outcome
            log.info("tool call %s retried: %s", call_id, run.outcome.error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _try(
        self, call_id: str, typed: ToolArgs, started: bool
    ) -> tuple[Run, bool]:
        binding = self.port.binding
        try:
            tools = await binding.tools()
        except SandboxUnavailableError as exc:
            infra = exc.code in INFRA_BIND_CODES
            outcome = Outcome(
                ok=False,
                error=f"the remote computer is unavailable: {exc}",
                error_code=INFRA_UNAVAILABLE if infra else None,
            )
            return Run(outcome, True, infra), started
        if not started:
            # Marks the point of no return: a turn lost after it is not resumed.
            await self._append(
                ToolUpdate(call_id=call_id, stream="status", text="running")
            )
        async with binding.activity("tool"):
            return await self._run_tool(call_id, tools, typed), True

    async def _run_tool(
        self, call_id: str, tools: SandboxTools, typed: ToolArgs
    ) -> Run:
        """Execute; a command's output goes out live as ``tool.update`` events."""
        if not isinstance(typed, LIVE):
            return await execute(tools, typed)

        async def update(stream: str, text: str) -> None:
            kind: Literal["stdout", "stderr", "status"] = "stdout"
            if stream == "stderr":
                kind = "stderr"
            elif stream == "status":
                kind = "status"
            await self._append(ToolUpdate(call_id=call_id, stream=kind, text=text))

        live = LiveOutput(update, limit=MAX_OUTPUT_CHARS)
        try:
            done = await execute(tools, typed, live.add)
        except BaseException:
            live.discard()
            raise
        await live.close()  # every update before the result
        return done

    async def _result(self, call_id: str, outcome: Outcome) -> None:
        await self._append(ToolResult(call_id=call_id, **_fields(outcome)))
        self.open_calls.remove(call_id)

    async def _resume_calls(self) -> None:
        """Go on with the calls a previous worker left waiting for a person."""
        turn = self.port.conv.turn
        assert turn is not None
        self.open_calls = list(turn.calls)
        for call in list(turn.calls.values()):
            asked = [r for r in turn.requests.values() if r.call_id == call.call_id]
            if not asked:
                await self._tool(call)
                continue
            decision = await self._answered(asked[0].request_id, call.tool)
            await self._run_decided(call.call_id, call.tool, call.args, decision)

    # --- the end --------------------------------------------------------------------

    async def finish(self, stop_reason: StopReason, message: str = "") -> None:
        """Write what the body left open, then ``turn.ended``."""
        if self._coalescer is not None:
            await self._coalescer.close()
            self._coalescer = None
        await self._message()
        for call_id in list(self.open_calls):
            await self._result(
                call_id, Outcome(ok=False, error=f"not finished: {stop_reason}")
            )
        usage_metrics.turn_ended(self.answered_by, self.usage)
        # The workspace save of this turn, before the next one can start.
        await self.port.binding.save_turn(self.turn_id)
        await self._append(
            TurnEnded(
                turn_id=self.turn_id,
                stop_reason=stop_reason,
                usage=self.usage,
                message=message,
                infrastructure_degraded=self.degraded,
                model=self.answered_by,
            )
        )


def _fields(outcome: Outcome) -> dict[str, Any]:
    return {
        "ok": outcome.ok,
        "output": outcome.output,
        "error": outcome.error,
        "truncated": outcome.truncated,
        "spill_path": outcome.spill_path,
        "exit_code": outcome.exit_code,
        "error_code": outcome.error_code,
    }
