"""Secret redaction for everything we log, record or publish (commands, params, outputs, executed notebooks).

Two nets: patterns that recognise a secret by its shape or by the name it is stored under (HF tokens, API
keys, bearer and basic credentials, private key blocks, passwords in URLs, KEY=value forms), and the literal
values of this process's secret-named environment variables, so a secret of no known shape that a runbook
echoes from its environment is caught too.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Optional

REDACTED = "[REDACTED]"

# Key names whose values are secrets wherever they appear (env assignments, params, JSON).
# A key that ENDS in one of these words: HF_TOKEN, api_key, DSPARK_API_KEYS; not max_tokens or MAX_NUM_BATCHED_TOKENS.
SECRET_KEYS = re.compile(r"(?i)(?:^|[_-])(token|api[_-]?keys?|apikey|password|passwd|secret|authorization)$")

# Words that make a parameter or environment variable name a secret's, wherever they stand in the name
# (ssh_key, HF_TOKEN, db_password_file); "tokens" is a count (max_tokens), never a secret.
SECRET_NAME_WORDS = {
    "token",
    "key",
    "keys",
    "apikey",
    "password",
    "passwd",
    "secret",
    "secrets",
    "credential",
    "credentials",
    "authorization",
}

# Each pattern's `secret` group is what gets replaced; the rest (a key name, "Bearer ", "https://user:") stays
# so the reader knows what was there.
_PATTERNS = [
    re.compile(r"(?P<secret>hf_[A-Za-z0-9]{20,})"),
    re.compile(r"(?P<secret>\bsk-[A-Za-z0-9_-]{16,})"),  # OpenAI-style API keys, sk-proj-... too
    re.compile(r"(?P<secret>\bgh[pousr]_[A-Za-z0-9]{30,})"),  # GitHub tokens
    re.compile(r"(?i)(\b(?:bearer|basic)\s+)(?P<secret>[A-Za-z0-9._~+/=-]{8,})"),
    # A private key block; one cut short (a truncated output) is redacted to the end of the text.
    re.compile(r"(?P<secret>-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z))", re.S),
    # scheme://user:PASSWORD@host
    re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s/:@'\"]*:)(?P<secret>[^\s/@'\"]+)(?=@)"),
    # KEY=value, "key": value, key: value and --api-key value forms, for key names ending in a secret word.
    re.compile(
        r"(?i)\b([A-Z0-9_]*(?:TOKEN|API_KEYS?|APIKEY|PASSWORD|PASSWD|SECRET)=)(?P<secret>'[^']*'|\"[^\"]*\"|\S+)"
    ),
    re.compile(r"(?i)(\"(?:[a-z0-9_]*_)?(?:token|api_?keys?|password|secret)\"\s*:\s*)(?P<secret>\"[^\"]*\")"),
    re.compile(r"(?im)(^\s*(?:[a-z0-9_]*_)?(?:token|api_?keys?|password|secret)\s*:[ \t]*)(?P<secret>[^\s#]+)"),
    re.compile(r"(?i)(--(?:api-key|token|password)[= ])(?P<secret>'[^']*'|\"[^\"]*\"|\S+)"),
]

# Values that look like a key name but are not secrets (the recipe's documented placeholder).
_PUBLIC_VALUES = {"no-key-required", "", "none"}
# An environment value shorter than this is too short to search for literally without hiding ordinary text.
_MIN_LITERAL = 8


# Secrets this process was given by name rather than found by shape (a keyed lane's API keys: lanebook.lane.keys),
# replaced wherever they appear, like the environment's.
_KNOWN: set[str] = set()


def add_secrets(values) -> None:
    """Have every later redaction in this process replace VALUES (each at least _MIN_LITERAL characters)."""
    _KNOWN.update(v for v in values if len(v) >= _MIN_LITERAL)


def names_secret(name: str) -> bool:
    """Whether a parameter or environment variable name says it holds a secret: hf_token, ssh_key, DB_PASSWORD."""
    return bool(SECRET_NAME_WORDS & set(re.split(r"[_\-.]+", name.lower())))


def environment_secrets(environ: Optional[dict] = None) -> list[str]:
    """The values of secret-named environment variables, and the secrets given by name (add_secrets), longest first
    (so a value containing another goes first)."""
    environ = os.environ if environ is None else environ
    values = {
        v for k, v in environ.items() if names_secret(k) and len(v) >= _MIN_LITERAL and v.lower() not in _PUBLIC_VALUES
    }
    # A secret-named variable may hold several keys on one line (DSPARK_API_KEYS): each is replaced on its own too.
    values |= {part for v in values for part in v.split() if len(part) >= _MIN_LITERAL}
    return sorted(values | _KNOWN, key=len, reverse=True)


def _replace_secret(match: re.Match) -> str:
    secret = match.group("secret")
    # A value already redacted is left as it is, also where the text is JSON and the pattern's \S+ runs on into the
    # string's escapes (`KEY=[REDACTED]\n",`): redacting again must change nothing.
    if secret.strip("'\"").lower() in _PUBLIC_VALUES or secret.startswith(REDACTED):
        return match.group(0)
    start, end = match.start("secret") - match.start(), match.end("secret") - match.start()
    return match.group(0)[:start] + REDACTED + match.group(0)[end:]


def redact(text: str, secrets: Optional[list[str]] = None) -> str:
    """Replace secrets in free text; keeps the key names so the reader knows what was there. SECRETS: the
    environment's (environment_secrets()), when the caller redacting many strings has read them once."""
    for value in environment_secrets() if secrets is None else secrets:
        text = text.replace(value, REDACTED)
    for pattern in _PATTERNS:
        text = pattern.sub(_replace_secret, text)
    return text


def redact_data(value: Any, key: str = "", secrets: Optional[list[str]] = None) -> Any:
    """Redact a JSON-like structure: values under secret-looking keys, and secrets inside strings (the environment
    read once for the whole structure, not once a string)."""
    secrets = environment_secrets() if secrets is None else secrets
    if isinstance(value, dict):
        return {k: redact_data(v, str(k), secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_data(v, key, secrets) for v in value]
    if isinstance(value, str):
        if key and SECRET_KEYS.search(key) and value.lower() not in _PUBLIC_VALUES:
            return REDACTED
        return redact(value, secrets)
    return value


def _redact_notebook_value(value: Any, secrets: list[str], key: str = "") -> Any:
    """redact_data for a notebook's JSON, where a multi-line string is stored as a list of lines (each but the
    last ending in a newline): such a list is joined before matching, so a private key block split over the
    file's lines is still one block, and split again after."""
    if isinstance(value, dict):
        return {k: _redact_notebook_value(v, secrets, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        if len(value) > 1 and all(isinstance(v, str) for v in value) and all(v.endswith("\n") for v in value[:-1]):
            return redact_data("".join(value), key, secrets).splitlines(keepends=True)
        return [_redact_notebook_value(v, secrets, key) for v in value]
    return redact_data(value, key, secrets)


def redact_notebook(text: str) -> str:
    """An executed notebook's JSON with every secret in it redacted: sources, outputs, metadata (the parameters
    papermill records), written back as nbformat writes it. Text with nothing to redact comes back unchanged.
    A file that is not a whole notebook (cut short by a killed writer) is redacted as text."""
    try:
        nb = json.loads(text)
    except ValueError:
        return redact(text)
    if not isinstance(nb, dict):
        return redact(text)
    scrubbed = _redact_notebook_value(nb, environment_secrets())
    if scrubbed == nb:
        return text
    return json.dumps(scrubbed, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


class RedactedStream:
    """A text stream that passes on what it is written with every secret redacted (a run's progress lines and what
    its cells print, on the operator's terminal). Each write is redacted whole: papermill writes an output as it
    arrives, a line or more at a time."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(redact(text))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()
