"""Secret redaction for everything we log, record or publish (commands, params, outputs)."""
from __future__ import annotations

import re
from typing import Any

REDACTED = "[REDACTED]"

# Key names whose values are secrets wherever they appear (env assignments, params, JSON).
# A key that ENDS in one of these words: HF_TOKEN, api_key, DSPARK_API_KEYS; not max_tokens or MAX_NUM_BATCHED_TOKENS.
SECRET_KEYS = re.compile(r"(?i)(?:^|[_-])(token|api[_-]?keys?|apikey|password|passwd|secret|authorization)$")

_PATTERNS = [
    re.compile(r"hf_[A-Za-z0-9]{20,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    # KEY=value, "key": value, key: value and --api-key value forms, for key names ending in a secret word.
    re.compile(r"(?i)\b([A-Z0-9_]*(?:TOKEN|API_KEYS?|APIKEY|PASSWORD|PASSWD|SECRET)=)('[^']*'|\"[^\"]*\"|\S+)"),
    re.compile(r"(?i)(\"(?:[a-z0-9_]*_)?(?:token|api_?keys?|password|secret)\"\s*:\s*)(\"[^\"]*\")"),
    re.compile(r"(?im)(^\s*(?:[a-z0-9_]*_)?(?:token|api_?keys?|password|secret)\s*:[ \t]*)([^\s#]+)"),
    re.compile(r"(?i)(--(?:api-key|token|password)[= ])('[^']*'|\"[^\"]*\"|\S+)"),
]

# Values that look like a key name but are not secrets (the recipe's documented placeholder).
_PUBLIC_VALUES = {"no-key-required", "", "none"}


def redact(text: str) -> str:
    """Replace secrets in free text; keeps the key names so the reader knows what was there."""
    for pattern in _PATTERNS:
        if pattern.groups >= 2:
            text = pattern.sub(lambda m: m.group(1) + (m.group(2) if m.group(2).strip("'\"") in _PUBLIC_VALUES else REDACTED), text)
        elif pattern.groups == 1:
            text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
        else:
            text = pattern.sub(REDACTED, text)
    return text


def redact_data(value: Any, key: str = "") -> Any:
    """Redact a JSON-like structure: values under secret-looking keys, and secrets inside strings."""
    if isinstance(value, dict):
        return {k: redact_data(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_data(v, key) for v in value]
    if isinstance(value, str):
        if key and SECRET_KEYS.search(key) and value not in _PUBLIC_VALUES:
            return REDACTED
        return redact(value)
    return value
