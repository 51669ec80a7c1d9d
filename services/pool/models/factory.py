"""The configured model client: scripted, OpenAI-compatible or Anthropic, with
the fallbacks of ``AGENTBUS_MODEL_FALLBACKS`` behind it."""

from __future__ import annotations

from services.pool.models.anthropic import DEFAULT_URL as ANTHROPIC_URL
from services.pool.models.anthropic import AnthropicModel
from services.pool.models.base import ModelClient
from services.pool.models.fallback import FallbackModel
from services.pool.models.openai import OpenAIChatModel
from services.pool.models.scripted import ScriptedModel
from services.pool.settings import DEFAULT_MODEL_URL, PoolSettings


class ModelSpec:
    """One entry of the list: ``kind:name`` or ``kind:name@base_url``."""

    def __init__(self, kind: str, name: str, url: str, key: str | None) -> None:
        self.kind = kind
        self.name = name
        self.url = url
        self.key = key

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.name}"


def parse_fallbacks(text: str, key: str | None) -> list[ModelSpec]:
    """``AGENTBUS_MODEL_FALLBACKS``: comma-separated ``kind:name[@base_url]``."""
    specs = []
    for raw in (part.strip() for part in text.split(",")):
        if not raw:
            continue
        kind, sep, rest = raw.partition(":")
        name, _, url = rest.partition("@")
        if not sep or kind not in ("openai", "anthropic") or not name:
            raise ValueError(
                f"AGENTBUS_MODEL_FALLBACKS: {raw!r} is not kind:name[@base_url] "
                "with kind openai or anthropic"
            )
        default = ANTHROPIC_URL if kind == "anthropic" else DEFAULT_MODEL_URL
        specs.append(ModelSpec(kind, name, url or default, key))
    return specs


def primary(settings: PoolSettings) -> ModelSpec:
    """The spec of ``AGENTBUS_MODEL`` (Anthropic's URL unless one is set)."""
    url = settings.model_base_url
    if settings.model == "anthropic" and url == DEFAULT_MODEL_URL:
        url = ANTHROPIC_URL
    return ModelSpec(settings.model, settings.model_name, url, settings.model_api_key)


def client(spec: ModelSpec, settings: PoolSettings, retries: int) -> ModelClient:
    """One HTTP model client for ``spec``."""
    common = {
        "timeout_s": settings.model_timeout_s,
        "max_retries": retries,
        "retry_base_s": settings.model_retry_base_s,
        "stall_s": settings.model_stall_timeout_s,
        "max_tokens": settings.model_max_tokens,
    }
    if spec.kind == "anthropic":
        return AnthropicModel(
            spec.url,
            spec.key,
            spec.name,
            thinking_budget=settings.model_thinking_budget,
            prompt_cache=settings.model_prompt_cache,
            **common,  # type: ignore[arg-type]
        )
    return OpenAIChatModel(spec.url, spec.key, spec.name, **common)  # type: ignore[arg-type]


def make_model(settings: PoolSettings) -> ModelClient:
    """The configured model client."""
    if settings.model == "scripted":
        return ScriptedModel(settings.scripted_token_delay_s)
    key = settings.model_fallback_api_key or settings.model_api_key
    specs = [primary(settings), *parse_fallbacks(settings.model_fallbacks, key)]
    if len(specs) == 1:
        return client(specs[0], settings, settings.model_max_retries)
    after = max(1, settings.model_fallback_after)
    models = [(spec.label, client(spec, settings, after - 1)) for spec in specs[:-1]]
    last = specs[-1]
    models.append((last.label, client(last, settings, settings.model_max_retries)))
    return FallbackModel(models, after)
