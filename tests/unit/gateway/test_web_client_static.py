"""The web client's static files: every event type is subscribed, no inline code."""

from __future__ import annotations

import re

from schemas.events import EVENT_TYPES
from services.gateway.webapp import STATIC_DIR


def test_the_stream_subscribes_to_every_event_type_the_log_holds():
    js = (STATIC_DIR / "api.js").read_text()
    block = re.search(r"EVENT_TYPES = \[(.*?)\];", js, re.S)
    assert block is not None
    subscribed = set(re.findall(r'"([a-z._]+)"', block.group(1)))
    missing = set(EVENT_TYPES) - subscribed
    assert not missing, f"api.js EVENT_TYPES lacks {sorted(missing)}"


def test_the_page_has_no_inline_script_or_style_for_the_strict_csp():
    html = (STATIC_DIR / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)", html)
    assert "<style" not in html
    assert not re.search(r"\son[a-z]+=", html)
    for name in re.findall(r'(?:src|href)="/app/static/([^"]+)"', html):
        assert (STATIC_DIR / name).is_file(), name
