"""Keys as pklimit stores them, the same from every client."""

import re

__all__ = ["escape_key"]

# What the database cannot store in a key, or would not keep apart: NUL,
# and surrogates (not encodable in UTF-8).  Escaped with '%' ('%00',
# '%uD800', and '%' itself as '%25'), as rate-limit-pklimit escapes them.
_KEY_ESCAPES = re.compile("[%\x00\ud800-\udfff]")


def escape_key(key: str) -> str:
    """The key as stored: every other key as it is."""
    def escape(match: "re.Match[str]") -> str:
        c = match.group(0)
        return "%25" if c == "%" else "%00" if c == "\x00" else "%%u%04X" % ord(c)
    return _KEY_ESCAPES.sub(escape, key)
