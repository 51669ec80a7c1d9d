"""Settings: AGENTBUS_* variables, typed conversion, errors naming the variable."""

from __future__ import annotations

import msgspec
import pytest

from services.common.settings import SettingsError, check_unknown, load_settings


class _Demo(msgspec.Struct, frozen=True, kw_only=True):
    nats_url: str = "nats://x"
    demo_workers: int = 2
    demo_flag: bool = False


def test_variables_are_converted_and_overrides_win():
    env = {"AGENTBUS_DEMO_WORKERS": "5", "AGENTBUS_DEMO_FLAG": "true"}
    s = load_settings(_Demo, env, {"nats_url": "nats://y", "demo_flag": None})
    assert (s.demo_workers, s.demo_flag, s.nats_url) == (5, True, "nats://y")


def test_a_bad_value_names_the_variable():
    with pytest.raises(SettingsError) as info:
        load_settings(_Demo, {"AGENTBUS_DEMO_WORKERS": "many"})
    assert info.value.variable == "AGENTBUS_DEMO_WORKERS"


def test_an_unknown_variable_is_refused_by_name():
    with pytest.raises(SettingsError) as info:
        check_unknown(
            {"AGENTBUS_DEMO_WORKRS": "1", "PATH": "/bin"}, {"AGENTBUS_DEMO_WORKERS"}
        )
    assert info.value.variable == "AGENTBUS_DEMO_WORKRS"
