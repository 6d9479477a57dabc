"""The twin's tokens: how text is cut into pieces and hashed the same way in every process.

The twin has no tokenizer; a piece stands in for a token everywhere (prompt lengths, prefix-cache
blocks, streamed deltas), so counts agree between the engine, the replies and the server.
"""

from __future__ import annotations

import hashlib
import re

# Twin assumption: a token is a run of up to 8 letters or 3 digits, or one other character, with the
# whitespace before it. Joining the pieces gives the text back (trailing whitespace aside).
_PIECE_RE = re.compile(r"\s*(?:[A-Za-z]{1,8}|\d{1,3}|[^\sA-Za-z\d])")


def pieces(text: str) -> list[str]:
    return _PIECE_RE.findall(text)


def stable_hash(*parts: str) -> int:
    """A hash that is the same in every process (Python's hash() is salted per process)."""
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
