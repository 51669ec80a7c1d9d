"""Every service refuses an ``AGENTBUS_*`` variable no service reads: exit 2, named.

"Known" is the union of every settings class (``agentbus up`` passes its whole
environment to each service), so another service's variable is accepted.
"""

from __future__ import annotations

import importlib

import pytest

from services.cli import COMMANDS
from services.common.settings import SettingsError, known_env_names, load_settings
from services.gateway.settings import GatewaySettings

# (command, argv that would otherwise start it)
SERVICES = [
    ("gateway", []),
    ("pool", []),
    ("broker", []),
    ("sandboxhost", []),
    ("projector", []),
    ("audit", ["s_x"]),
]


@pytest.mark.parametrize(("command", "argv"), SERVICES)
def test_a_typo_variable_stops_the_service_with_exit_2_naming_it(
    command: str,
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AGENTBUS_NATS_ULR", "nats://127.0.0.1:1")
    main = importlib.import_module(COMMANDS[command][0]).main
    assert main(argv) == 2
    assert "AGENTBUS_NATS_ULR" in capsys.readouterr().err


def test_another_services_variable_is_known_to_every_service() -> None:
    env = {"AGENTBUS_BROKER_PROVIDER": "local", "AGENTBUS_POOL_WORKERS": "3"}
    assert set(env) <= known_env_names()
    assert load_settings(GatewaySettings, env).bus_prefix == "agentbus"


def test_the_error_names_the_variable() -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(GatewaySettings, {"AGENTBUS_GATEWAY_LISTN": "x"})
    assert info.value.variable == "AGENTBUS_GATEWAY_LISTN"
