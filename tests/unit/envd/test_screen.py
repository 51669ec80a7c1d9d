"""Terminal output reduced to plain text."""

from __future__ import annotations

import pytest

from services.envd.screen import plain_text


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[1;32mok\x1b[0m\r\n", "ok\n"),
        ("\x1b]633;P\x07/tmp$ ls\r\n", "/tmp$ ls\n"),
        ("\x1b[?2004hprompt$ ", "prompt$"),
        ("10%\r50%\r100%\n", "100%\n"),
        ("abc\b \b\b \bX\n", "aX\n"),  # readline erasing with "\b \b"
        ("\x1b]0;title\x1b\\text", "text"),
        ("bell\x07 and \x00nul", "bell and nul"),
        ("cut at an escape \x1b[", "cut at an escape"),
    ],
)
def test_plain_text(raw: str, shown: str) -> None:
    """Escapes vanish; CR redraws; backspace moves back."""
    assert plain_text(raw) == shown
