"""Model clients: an OpenAI-compatible streaming client and the scripted model."""

from services.pool.models.base import (
    Finish,
    ModelChunk,
    ModelClient,
    TextDelta,
    ThoughtDelta,
    ToolRequest,
)
from services.pool.models.openai import OpenAIChatModel
from services.pool.models.scripted import ScriptedModel

__all__ = [
    "Finish",
    "ModelChunk",
    "ModelClient",
    "OpenAIChatModel",
    "ScriptedModel",
    "TextDelta",
    "ThoughtDelta",
    "ToolRequest",
]
