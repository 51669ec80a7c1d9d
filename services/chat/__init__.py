"""``agentbus chat``: a terminal client of one session (stream, prompts, approvals)."""

__all__: list[str] = []
