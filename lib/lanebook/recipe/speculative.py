"""The --speculative-config of a `vllm serve` command line, read one way for the effective configuration, the
live command and the recipe's checks: the JSON object after the flag, as `docker top` shows it or a shell quotes it.
And the K its batch-size schedule verifies at a batch size: pure arithmetic with no pydantic, so the twin's engine
(a process per container start) imports it without the lane model.
"""

from __future__ import annotations

import json
import re
from typing import Optional, Sequence

SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"  # the batch-size verify schedule's key in the config


def speculative_config(command: str) -> Optional[dict]:
    """The JSON object given to --speculative-config in a command line, or None (`docker top` shows the argv joined
    by spaces, unquoted; a shell command line may quote it)."""
    match = re.search(r"--speculative-config[=\s]+['\"]?(?=\{)", command)
    if not match:
        return None
    try:
        config, _end = json.JSONDecoder().raw_decode(command[match.end() :])
    except json.JSONDecodeError:
        return None
    return config if isinstance(config, dict) else None


def k_for_batch(schedule: Optional[Sequence[Sequence[int]]], fixed_k: int, batch: int) -> int:
    """Draft positions the target verifies at a batch size: the schedule's inclusive [start, end, K] range that
    holds it (vLLM's num_speculative_tokens_per_batch_size), else the fixed K."""
    for start, end, k in schedule or ():
        if start <= batch <= end:
            return k
    return fixed_k
