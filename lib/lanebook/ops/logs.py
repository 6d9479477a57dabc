"""A lane's logs and live process, read as the seed reads them: the log gate, the KV-cache line, fatal runtime
errors, the live `vllm serve` command (its speculative config is read by lanebook.recipe.speculative).

The parsing is pure functions over text (lines_by_pattern, fatal_lines, kv_cache_tokens, serving_command);
scan_log, scan_fatal and live_command fetch that text from a node.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable, Optional

from lanebook.base.checks import ExpectedResult
from lanebook.nodes.ssh import Node, NodeError, q
from lanebook.recipe.speculative import SCHEDULE_KEY
from lanebook.recipe.symptoms import BREAKABLE_ON

if TYPE_CHECKING:
    from lanebook.lane.params import GateParams

# Seed 000 gate: docker logs <container> 2>&1 | grep -E 'BREAKABLE|Breakable CUDA|KV cache size'
GATE_LOG_PATTERNS = ("BREAKABLE", "Breakable CUDA", "KV cache size")
# The gate reads the seed's two breakable forms in any case ("breakable" in every spelling, for grep -E on the node
# and Python's re alike), then keeps the lines that say breakable graphs are on (symptoms.BREAKABLE_ON: the
# auto-enable line, the torch.compile warning, "... enabled", the variable set on), which must not be there.
BREAKABLE_SCAN = "".join(f"[{c.upper()}{c}]" for c in "breakable")
BREAKABLE_ON_RE = re.compile(BREAKABLE_ON.regex)
BREAKABLE_GATE = "log does not enable breakable CUDA graphs"
NO_SUCH_CONTAINER = "No such container"
# The line vLLM sizes its KV cache with: its GPU builds print "GPU KV cache size: N tokens", its CPU build
# "CPU KV cache size: N tokens" (kv_cache_utils.py, same figure, the device named). A lane's gates say which it
# reads (GateParams.kv_cache_line); the GPU lanes keep the GPU line, so a CPU line never passes their gate.
KV_CACHE_LINE = "GPU KV cache size"
KV_CACHE_LINES = (KV_CACHE_LINE, "CPU KV cache size")


def kv_cache_re(line: str = KV_CACHE_LINE) -> re.Pattern:
    return re.compile(re.escape(line) + r":\s*([\d,]+)\s*tokens")


KV_CACHE_RE = kv_cache_re()
# Fatal runtime conditions, by kind, as vLLM and PyTorch log them. The recipe's post-readiness warmup and its
# canaries call a lane clean when its queues drained and no CUDA, NCCL, engine-death or preemption condition
# appeared on either tensor-parallel rank. Extended regular expressions: grep -E reads them on the node,
# Python's re here. Not fatal, so not here: the SHM "No available shared memory broadcast block found in 60
# seconds" lines of a cold bind's autotune, and a single request's "Error in chat completion stream generator".
FATAL_LOG_PATTERNS = {
    "CUDA error": r"CUDA error|out of memory",
    "NCCL error": r"NCCL error",
    # engine core or worker proc
    "engine death": r"EngineDeadError|EngineCore encountered a fatal error|died unexpectedly",
    "preemption": r"is preempted by PreemptionMode",  # KV cache too small for the running batch: recomputed
    "Python crash": r"Fatal Python error",
}


def lines_by_pattern(lines: Iterable[str], patterns: Iterable[str]) -> dict[str, list[str]]:
    """Each pattern (a regular expression) with the lines it matches, in order."""
    lines = list(lines)
    return {p: [line for line in lines if re.search(p, line)] for p in patterns}


def scan_log(node: Node, container: str, patterns: Iterable[str] = GATE_LOG_PATTERNS) -> dict[str, list[str]]:
    """The seed's gate `docker logs C 2>&1 | grep -E 'A|B|…'`, lines sorted by the pattern they match.

    Docker's "No such container" error is grepped too, so a missing container is an error, not a clean log.
    """
    patterns = list(patterns)
    result = node.run(
        f"docker logs {q(container)} 2>&1 | grep -E {q('|'.join(patterns + [NO_SUCH_CONTAINER]))}",
        check=False,
        timeout=120,
    )
    if result.exit_code > 1:
        raise NodeError(
            f"{node.alias}: scanning the log of {container} failed (exit {result.exit_code}): "
            f"{result.stderr.strip()[:200]}"
        )
    lines = result.stdout.splitlines()
    if any(NO_SUCH_CONTAINER in line and container in line for line in lines):
        raise NodeError(f"{node.alias}: no container named {container}")
    return lines_by_pattern(lines, patterns)


def breakable_on_lines(lines: Iterable[str]) -> list[str]:
    """The lines saying breakable CUDA graphs are on (pitfall 1's slow path), in any of the forms vLLM logs it."""
    return [line for line in lines if BREAKABLE_ON_RE.search(line)]


def fatal_lines(found: dict[str, list[str]]) -> dict[str, list[str]]:
    """Scanned lines (by pattern, as scan_log gives them) regrouped by fatal kind; kinds with no line left out."""
    return {kind: found[pattern] for kind, pattern in FATAL_LOG_PATTERNS.items() if found.get(pattern)}


def scan_fatal(node: Node, container: str) -> dict[str, list[str]]:
    """The container's whole log on the node, scanned for FATAL_LOG_PATTERNS: {kind: lines}, empty when clean."""
    return fatal_lines(scan_log(node, container, FATAL_LOG_PATTERNS.values()))


def kv_cache_tokens(lines: Iterable[str], kv_line: str = KV_CACHE_LINE) -> Optional[int]:
    """The last "GPU KV cache size: 2,493,464 tokens" figure in the lines (the latest boot), or None; KV_LINE names
    the line to read ("CPU KV cache size" for vLLM's CPU build)."""
    pattern = kv_cache_re(kv_line)
    found = [m.group(1) for line in lines for m in [pattern.search(line)] if m]
    return int(found[-1].replace(",", "")) if found else None


# vLLM's two ways to start its OpenAI server: the `vllm serve` console script, and the module it runs, as vLLM's CPU
# build is started where its `vllm` script cannot run (`python -m vllm.entrypoints.openai.api_server ...`).
SERVING_RE = re.compile(r"\bvllm\S*\s+serve\b|-m\s+vllm\.entrypoints\.openai\.api_server\b")


def serving_command(top_output: str) -> str:
    """From `docker top` output, the serving process's command line (all processes' if none serves): `vllm serve`
    or `python -m vllm.entrypoints.openai.api_server` (SERVING_RE).

    A shell that exec's vllm can show the same words: the serving process itself is preferred. Processes with the
    same command line (forked ranks) are shown once.
    """
    lines = top_output.splitlines()
    if not lines:
        return ""
    header = lines[0].split()
    if "CMD" not in header:
        raise ValueError(f"unexpected `docker top` output: {lines[0][:200]!r}")
    before = header.index("CMD")
    commands = [parts[before] for line in lines[1:] for parts in [line.split(None, before)] if len(parts) > before]
    serving = [c for c in commands if SERVING_RE.search(c)]
    direct = [c for c in serving if not re.match(r"(\S*/)?(ba)?sh\s+-c\b", c)]
    return "\n".join(dict.fromkeys(direct or serving or commands))


def live_command(node: Node, container: str) -> str:
    """The server's live command line, from `docker top` on the node."""
    output = node.run(f"docker top {q(container)}", timeout=60).stdout
    try:
        return serving_command(output)
    except ValueError as exc:
        raise NodeError(f"{node.alias}: {exc}") from None


def schedule_in_live_command(node: Node, container: str) -> bool:
    """Is the batch-size verify schedule in the running server's command (seed 000: confirm after a rollback)?"""
    return SCHEDULE_KEY in live_command(node, container)


def startup_log_expectations(
    found: dict[str, list[str]], gates: "GateParams"
) -> tuple[list[ExpectedResult], Optional[int]]:
    """The startup-log gate over scanned lines: no line enabling breakable CUDA graphs (seed 000: "must NOT
    auto-enable breakable graphs"), no other forbidden line, every required line (startup complete), and the latest
    "GPU KV cache size" in the lane's band; and that size. The results are named by the step that records them."""
    judged = ExpectedResult.judged
    breakable = breakable_on_lines(found[BREAKABLE_SCAN])
    expectations = [judged("", BREAKABLE_GATE, not breakable, "; ".join(breakable[:1]))]
    expectations += [
        judged("", f"log has no '{line}'", not found[line], "; ".join(found[line][:1])) for line in gates.log_forbidden
    ]
    expectations += [judged("", f"log has '{line}'", bool(found[line])) for line in gates.log_required]
    kv = kv_cache_tokens(found[gates.kv_cache_line], gates.kv_cache_line)
    low, high = gates.kv_cache_tokens
    expectations.append(
        judged(
            "",
            f"{gates.kv_cache_line} in {low:,}–{high:,} tokens",
            kv is not None and low <= kv <= high,
            "" if kv is None else f"{kv:,}",
        )
    )
    return expectations, kv


def check_startup_log(node: Node, container: str, gates: "GateParams") -> tuple[list[ExpectedResult], Optional[int]]:
    """Scan the container's log on the node for the gate's lines and judge them (startup_log_expectations)."""
    found = scan_log(node, container, [BREAKABLE_SCAN, *gates.log_forbidden, *gates.log_required, gates.kv_cache_line])
    return startup_log_expectations(found, gates)
