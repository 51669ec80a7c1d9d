"""Load one frozen settings Struct per service from ``AGENTBUS_*`` variables.

Every service refuses an ``AGENTBUS_*`` variable that no service of this build
reads (a typo, most likely). "Known" is the union of every settings class in
``SETTINGS``, not the loading service's own: ``agentbus up`` hands its whole
environment to every service it starts.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import msgspec

PREFIX = "AGENTBUS_"

T = TypeVar("T", bound=msgspec.Struct)

# Settings classes whose AGENTBUS_* variables are known (for the typo check).
SETTINGS: tuple[str, ...] = (
    "services.launcher.settings:LauncherSettings",
    "services.gateway.settings:GatewaySettings",
    "services.pool.settings:PoolSettings",
    "services.broker.settings:BrokerSettings",
    "services.sandboxhost.settings:SandboxHostSettings",
    "eventstore.settings:EventStoreSettings",
    "eventstore.settings:ReplicaSettings",
    "services.notifier.settings:NotifierSettings",
)


class SettingsError(Exception):
    """A configuration variable is unknown or has a bad value."""

    def __init__(self, variable: str, problem: str) -> None:
        self.variable = variable
        self.problem = problem
        super().__init__(f"{variable}: {problem}")


def env_name(field: str) -> str:
    """The environment variable that sets a settings field."""
    return PREFIX + field.upper()


def env_names(cls: type[msgspec.Struct]) -> set[str]:
    """Every variable a settings class reads."""
    return {env_name(f) for f in cls.__struct_fields__}


def load_settings(
    cls: type[T],
    environ: Mapping[str, str],
    overrides: Mapping[str, Any] | None = None,
) -> T:
    """Build ``cls`` from ``AGENTBUS_<FIELD>`` variables, then explicit overrides.

    Values are converted with msgspec (``"1"`` → int, ``"true"`` → bool); a bad
    value, or an ``AGENTBUS_*`` variable no service reads, raises
    :class:`SettingsError` naming the variable.
    """
    check_unknown(environ, known_env_names() | env_names(cls))
    raw: dict[str, Any] = {}
    for field in cls.__struct_fields__:
        name = env_name(field)
        if name in environ:
            raw[field] = environ[name]
    for key, value in (overrides or {}).items():
        if value is not None:
            raw[key] = value
    try:
        return msgspec.convert(raw, cls, strict=False)
    except msgspec.ValidationError as exc:
        bad = _field_of(str(exc))
        raise SettingsError(env_name(bad) if bad else cls.__name__, str(exc)) from exc


@functools.cache
def known_env_names() -> frozenset[str]:
    """Every ``AGENTBUS_*`` variable some service of this build reads."""
    names: set[str] = set()
    for ref in SETTINGS:
        module, _, cls = ref.partition(":")
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError:
            continue
        names |= env_names(getattr(mod, cls))
    return frozenset(names)


def check_unknown(environ: Mapping[str, str], known: Iterable[str]) -> None:
    """Refuse an ``AGENTBUS_*`` variable that no service reads (likely a typo)."""
    allowed = set(known)
    for name in sorted(environ):
        if name.startswith(PREFIX) and name not in allowed:
            raise SettingsError(name, "unknown variable (no service reads it)")


def _field_of(message: str) -> str | None:
    # msgspec errors end with "- at `$.field`" (or "$.field").
    marker = "$."
    if marker not in message:
        return None
    return message.split(marker, 1)[1].split("`")[0].split("[")[0].split(".")[0]
