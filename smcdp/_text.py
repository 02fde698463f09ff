"""Peer-supplied text made safe for a log line or a record (imports nothing from smcdp).

A peer controls some strings that end up in this party's logs and session
records: an ``Abort`` message, the details of a refusal it sends back, an
unknown protocol name.  :func:`printable` escapes every character that
``str.isprintable`` rejects -- C0 and C1 controls (newline, carriage return,
escape), DEL, the Unicode line and paragraph separators, bidirectional
overrides and other format characters, tabs -- as ``\\xNN`` / ``\\uNNNN`` /
``\\UNNNNNNNN``, and caps the length, so an ``Abort`` whose message is
``"ok\\n2026-01-01 INFO forged line"`` stays on its own line, visibly escaped.
"""

from __future__ import annotations

#: default cap on a peer-supplied string in a log line or record (characters)
MAX_TEXT = 4000


def printable(text: object, limit: int = MAX_TEXT) -> str:
    """``text`` as one line of printable characters: at most ``limit`` of them, then a marker."""
    s = text if isinstance(text, str) else str(text)
    total = len(s)
    if total > limit:
        s = s[:limit]
    if not s.isprintable():
        parts = []
        for ch in s:
            o = ord(ch)
            if ch.isprintable():
                parts.append(ch)
            elif o < 0x100:
                parts.append(f"\\x{o:02x}")
            elif o < 0x10000:
                parts.append(f"\\u{o:04x}")
            else:
                parts.append(f"\\U{o:08x}")
        s = "".join(parts)
    return s if total <= limit else f"{s}...[cut: {total} characters]"
