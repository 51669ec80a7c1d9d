"""raise_nofile: the soft open-file limit goes up to what the hard limit allows."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

SCRIPT = """
import json, resource
from services.common.limits import raise_nofile
resource.setrlimit(resource.RLIMIT_NOFILE, (256, {hard}))
after = raise_nofile({wanted})
print(json.dumps([after, resource.getrlimit(resource.RLIMIT_NOFILE)]))
"""


def run(wanted: int, hard: int) -> tuple[list[int], list[int]]:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(wanted=wanted, hard=hard)],
        check=True,
        capture_output=True,
        text=True,
    )
    answered, actual = json.loads(out.stdout)
    return answered, actual


def test_soft_limit_is_raised_to_the_wanted_value_under_the_hard_limit():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    answered, actual = run(cap // 2, cap)
    assert answered == actual == [cap // 2, cap]


def test_above_the_hard_limit_it_gets_what_it_may():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = 2048 if hard == resource.RLIM_INFINITY else min(hard, 2048)
    answered, actual = run(cap * 4, cap)
    assert answered == actual
    # root may raise the hard limit; anyone else stops at it
    assert actual[0] in (cap, cap * 4)
    assert actual[0] == actual[1] or actual == [cap, cap]


def test_a_higher_soft_limit_is_left_alone():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    answered, _ = run(128, cap)
    assert answered == [256, cap]
