"""Model clients: OpenAI-compatible and Anthropic streaming clients, fallbacks,
and the scripted model; ``make_model`` builds the configured one."""

from services.pool.models.anthropic import AnthropicModel
from services.pool.models.base import (
    Finish,
    ModelChunk,
    ModelClient,
    Retrying,
    TextDelta,
    ThoughtDelta,
    ToolRequest,
)
from services.pool.models.factory import make_model
from services.pool.models.fallback import FallbackModel
from services.pool.models.openai import OpenAIChatModel
from services.pool.models.scripted import ScriptedModel

__all__ = [
    "AnthropicModel",
    "FallbackModel",
    "Finish",
    "ModelChunk",
    "ModelClient",
    "OpenAIChatModel",
    "Retrying",
    "ScriptedModel",
    "TextDelta",
    "ThoughtDelta",
    "ToolRequest",
    "make_model",
]
