"""Terminal output as plain text for a model: control sequences reduced away.

A PTY's bytes carry escape sequences (colours, cursor moves, bracketed paste,
window titles), carriage returns that redraw a line (progress bars) and
backspaces (line editing). The model gets what a person would read: every
escape removed, ``\\r\\n`` as a newline, a lone ``\\r`` starting the line over,
a backspace erasing the character before it.
"""

from __future__ import annotations

import re

# OSC (ESC ] ... BEL or ST), CSI (ESC [ params final), other two-byte escapes,
# and 8-bit CSI. Order matters: the longer forms first.
_ESCAPES = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC, possibly unterminated at a cut
    r"|\x1b\[[0-?]*[ -/]*(?:[@-~]|$)"  # CSI, possibly cut at the end
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC
    r"|\x1b[()*+][0-9A-Za-z]"  # charset designation
    r"|\x1b[@-Z\\-_=>78]"  # two-byte escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"
)
# C0 controls other than tab, newline, carriage return and backspace.
_CONTROLS = re.compile(r"[\x00-\x07\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")


def plain_text(raw: str) -> str:
    """``raw`` terminal output reduced to the text a person would see."""
    text = _ESCAPES.sub("", raw)
    text = _CONTROLS.sub("", text.replace("\x1b", ""))
    text = text.replace("\r\n", "\n")
    return "\n".join(_line(part) for part in text.split("\n"))


def _line(part: str) -> str:
    """One line: a lone CR overwrites from the start, a backspace erases."""
    shown: list[str] = []
    col = 0
    for ch in part:
        if ch == "\r":
            col = 0
        elif ch == "\b":
            col = max(col - 1, 0)
        elif col < len(shown):
            shown[col] = ch
            col += 1
        else:
            shown.append(ch)
            col += 1
    return "".join(shown).rstrip()
