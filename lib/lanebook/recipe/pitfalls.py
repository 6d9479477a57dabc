"""The pitfall registry: seed 000's seventeen pitfalls (P01–P17, in the seed's order), lanebook's own checks (S…),
and the symptom classes `lanebook doctor` reads a running lane for (lanebook.recipe.symptoms: P-ids, D…, H…).

One entry per pitfall holds its id, title, the seed's lesson in our words, severity, where it is met
(`lint` when it can be checked from files, and the runbooks that meet it on a live lane), the fix, and
for static pitfalls the check. `lanebook lint`, the runbooks' troubleshooting tables, the book and the
twin all read this one list, so a lesson is written once.

Checks take the lint input (lanebook.recipe.lint.LintInput: the checkout's effective configuration — each value
as the launcher, Compose and the image give it, with the line that wins — the lane it should run and the
lane's client settings) and yield Hits; lint turns them into findings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

from lanebook.lane.changes import ALLOW_FLAG, ALLOW_PARAMETER
from lanebook.lane.params import KEY_VARIABLES, KEYLESS_VALUES, RANK_KEYS, RECIPE_SCRIPTS
from lanebook.recipe.casebase import case_cause, registry_symptoms
from lanebook.recipe.effective.checkout import Location
from lanebook.recipe.effective.mismatches import to_number
from lanebook.recipe.symptoms import SYMPTOMS as _SYMPTOMS
from lanebook.recipe.symptoms import Symptom

if TYPE_CHECKING:
    from lanebook.recipe.lint import LintInput

ONE_M = 1048576
GOOD_MEMORY = 0.85  # the setting that held 1M context on the seed's pair (0.80 failed)
# Addresses no other node can reach. The twin gives each rank its own loopback address (127.0.0.2, .3),
# which keeps the per-rank rule, so those pass.
LOOPBACK = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
BREAKABLE = "VLLM_USE_BREAKABLE_CUDAGRAPH"
SOCKET_IFNAMES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
THINKING_KEYS = {"thinking", "enable_thinking"}
# `"thinking": "false"` inside JSON, also with the shell's \" escapes as compose command lines carry them.
STRING_THINKING_RE = re.compile(r'\\?"(enable_thinking|thinking)\\?"\s*:\s*\\?"')


@dataclass(frozen=True)
class Hit:
    where: Location
    message: str
    severity: Optional[str] = None  # None: the pitfall's own severity


@dataclass(frozen=True)
class Pitfall:
    id: str
    title: str
    text: str  # the seed's lesson, in our words
    severity: str  # "error" | "warning"
    where: str  # "lint" and/or the runbooks that meet it, comma-separated
    fix: str
    check: Optional[Callable[["LintInput"], Iterator[Hit]]] = None
    seed: str = ""  # where the lesson comes from; empty for P-ids: seed 000's pitfall of the same number

    @property
    def runbooks(self) -> list[str]:
        return [w for w in self.where.split(", ") if w != "lint"]

    @property
    def origin(self) -> str:
        """The write-up (or the piece of the recipe) the lesson was learnt from, as the book shows it."""
        return self.seed or f"seed 000 (the recipe), pitfall {int(self.id[1:])}"


def schedule_problems(schedule: Any, max_num_seqs: Optional[int], k: Optional[int], block_size: int) -> list[str]:
    """What is wrong with a num_speculative_tokens_per_batch_size schedule ([] when it is valid).

    vLLM reads inclusive [start_bs, end_bs, K] ranges; the recipe needs them to cover batch sizes 1..MAX_NUM_SEQS
    exactly once, in order, with every K at most num_speculative_tokens and the drafter block size.
    """
    triples = isinstance(schedule, (list, tuple)) and all(
        isinstance(r, (list, tuple)) and len(r) == 3 and all(isinstance(x, int) and not isinstance(x, bool) for x in r)
        for r in schedule
    )
    if not triples or not schedule:
        return [
            "num_speculative_tokens_per_batch_size must be a non-empty list of [start_bs, end_bs, K] integers (got "
            f"{schedule!r})"
        ]
    problems = []
    expected = 1
    for start, end, kk in schedule:
        rng = f"[{start},{end},{kk}]"
        if start > end:
            problems.append(f"range {rng} starts after it ends")
        if start < expected:
            problems.append(f"range {rng} overlaps the batch sizes before it (next free size is {expected})")
        elif start > expected:
            problems.append(
                f"range {rng} leaves batch sizes {expected}–{start - 1} uncovered (ranges must be contiguous from 1)"
            )
        expected = max(expected, end + 1)
        if kk < 1:
            problems.append(f"range {rng}: K must be at least 1")
        if k is not None and kk > k:
            problems.append(f"range {rng}: K={kk} is above num_speculative_tokens {k}")
        if kk > block_size:
            problems.append(f"range {rng}: K={kk} is above the drafter block size {block_size}")
    if max_num_seqs is not None and expected - 1 != max_num_seqs:
        problems.append(f"the ranges end at batch size {expected - 1} but MAX_NUM_SEQS is {max_num_seqs}")
    return problems


# --- checks -------------------------------------------------------------------------------------


def check_breakable(inp: "LintInput") -> Iterator[Hit]:
    own = inp.env(BREAKABLE)
    if own is None:
        yield Hit(
            inp.env_missing_at,
            f"the env file does not set {BREAKABLE}=0: Anemll 0.1.1 then auto-enables the slow breakable-graph path",
        )
    elif own.value != "0":
        yield Hit(
            own.where, f"{BREAKABLE}={own.value}: it must be 0, or Anemll 0.1.1 runs the slow breakable-graph path"
        )
    if BREAKABLE not in inp.compose.environment:
        yield Hit(
            inp.compose_at(inp.compose.environment_line),
            f"the environment: map of service {inp.compose.service_name} does not pass {BREAKABLE} into the "
            f'container (Compose passes only keys listed there); add {BREAKABLE}: "${{{BREAKABLE}:-0}}"',
        )
    else:
        passed = inp.effective(BREAKABLE)
        if passed.value != "0":
            yield Hit(
                passed.where,
                f"the compose environment passes {BREAKABLE}={passed.value!r} into the container; it must resolve to 0",
            )


def _batch_check(bad: int, why: str) -> Callable[["LintInput"], Iterator[Hit]]:
    def check(inp: "LintInput") -> Iterator[Hit]:
        batch = inp.flag("--max-num-batched-tokens", "MAX_NUM_BATCHED_TOKENS")
        if batch is not None and to_number(batch.value) == bad:
            yield Hit(batch.where, f"MAX_NUM_BATCHED_TOKENS resolves to {bad}: {why}; stay on 8192")

    return check


def check_snapshot_mounts(inp: "LintInput") -> Iterator[Hit]:
    for raw, line in inp.compose.volumes():
        source = (inp.resolve(raw) or raw).split(":", 1)[0]
        if re.search(r"/snapshots(/|$)", source):
            yield Hit(
                inp.compose_at(line),
                f"volume {raw} mounts a snapshot dir ({source}): its files are symlinks "
                "into blobs/, which this bind leaves out; mount the full hub model dir or the HF cache",
            )


def check_memory(inp: "LintInput") -> Iterator[Hit]:
    length = inp.flag("--max-model-len", "MAX_MODEL_LEN")
    if length is None or (to_number(length.value) or 0) < ONE_M:
        return
    util = inp.flag("--gpu-memory-utilization", "GPU_MEMORY_UTILIZATION")
    figures = "0.80 left ~7.16 GiB KV vs 7.54 GiB needed on the operators' pair; 0.85 boots"
    value = to_number(util.value) if util else None
    if value is not None and value < GOOD_MEMORY:
        if util.via:
            how = f" ({util.via})"
        elif not util.from_env:
            how = " (the env file does not set GPU_MEMORY_UTILIZATION, so the compose default applies)"
        else:
            how = ""
        yield Hit(
            util.where,
            f"GPU_MEMORY_UTILIZATION resolves to {util.value}{how} with MAX_MODEL_LEN {length.value}: {figures}",
            severity=None if value <= 0.80 else "warning",
        )


def check_loopback(inp: "LintInput") -> Iterator[Hit]:
    for key in SOCKET_IFNAMES:
        for name, setting in ((key, inp.effective(key)), (f"WORKER_{key}", inp.env(f"WORKER_{key}"))):
            if setting is not None and setting.value == "lo":
                yield Hit(
                    setting.where,
                    f"{name} resolves to lo: Gloo/NCCL would bind loopback; use the RoCE interface (bond0)",
                )
    head, worker = inp.effective("VLLM_HOST_IP"), inp.env("WORKER_VLLM_HOST_IP")
    for name, setting in (("VLLM_HOST_IP", head), ("WORKER_VLLM_HOST_IP", worker)):
        if setting is not None and setting.value.lower() in LOOPBACK:
            yield Hit(
                setting.where,
                f"{name}={setting.value}: a rank on loopback cannot be reached by the other node; "
                "set each rank's own RoCE IP",
            )
    if inp.multinode and (head is None or not head.value):
        yield Hit(
            head.where if head else inp.env_missing_at,
            "VLLM_HOST_IP is empty on a multi-node lane: distributed setup may bind the wrong address; set each "
            "rank's RoCE IP",
        )
    if head is not None and worker is not None and head.value and head.value == worker.value:
        yield Hit(
            worker.where, f"VLLM_HOST_IP and WORKER_VLLM_HOST_IP are both {head.value}: each rank needs its own IP"
        )


def serves_keyed(inp: "LintInput") -> bool:
    """Whether the lane serves with an API key: its file's auth:, or a key variable the env file sets."""
    if inp.params is not None and inp.params.keyed:
        return True
    return any((setting := inp.env(v)) is not None and (setting.value or "").strip() for v in KEY_VARIABLES)


def check_api_key(inp: "LintInput") -> Iterator[Hit]:
    """P09: a keyless lane's Hermes block says api_key no-key-required, never "none"; a keyed lane's gives a key
    (key_env, or an api_key that is a key), never a keyless value."""
    keyed = serves_keyed(inp)
    leaves = {path: (value, where) for path, value, where in inp.clients}
    key_envs = [p for p, (v, _) in leaves.items() if p.rsplit(".", 1)[-1] == "key_env" and v]
    for path, (value, where) in leaves.items():
        if path.rsplit(".", 1)[-1] != "api_key" or not isinstance(value, str):
            continue
        keyless = value.strip().lower() in KEYLESS_VALUES
        if not keyed and value.strip().lower() == "none":
            yield Hit(where, f'{path} is "none": Hermes needs api_key: no-key-required for a keyless server')
        elif keyed and keyless and not key_envs:
            yield Hit(where, f"{path} is {value!r} but the lane serves with an API key: every Hermes request gets 401")
    params = inp.params
    if (
        params is not None
        and params.keyed
        and not params.hermes_key_env
        and not any(p.rsplit(".", 1)[-1] == "api_key" for p in leaves)
    ):
        yield Hit(
            inp.lane_at("hermes"),
            f"lane {params.name} serves with an API key ({params.auth.variable}) but its Hermes block is keyless: name "
            "the variable Hermes reads the key from (hermes.key_env)",
        )


WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", ""}


def check_open_keyless(inp: "LintInput") -> Iterator[Hit]:
    """S09: a lane's API served on every address of its head with no key (a lane linted, not files alone)."""
    if inp.params is None:
        return
    host = inp.flag("--host", "VLLM_HOST")
    if host is None or host.value is None or host.value.strip() not in WILDCARD_HOSTS or serves_keyed(inp):
        return
    yield Hit(
        host.where,
        f"vllm serve listens on all addresses (--host {host.value}) with no API key: anyone on the network can "
        "use the lane",
    )


def check_thinking(inp: "LintInput") -> Iterator[Hit]:
    for path, value, where in inp.clients:
        if path.rsplit(".", 1)[-1] in THINKING_KEYS and isinstance(value, str):
            yield Hit(
                where,
                f"{path} is the string {value!r}: the chat template tests truthiness, so any non-empty "
                "string turns thinking on; use a JSON boolean",
            )
    for where, text in inp.text_lines():
        match = STRING_THINKING_RE.search(text)
        if match:
            yield Hit(
                where,
                f"{match.group(1)} is given as a JSON string here: any non-empty string turns thinking on; "
                "use true/false",
            )


def check_draft_k(inp: "LintInput") -> Iterator[Hit]:
    spec = inp.speculative()
    if spec.k is not None and spec.k > inp.block_size:
        yield Hit(
            spec.k_where,
            f"num_speculative_tokens resolves to {spec.k}, above the drafter block size "
            f"{inp.block_size}: the extra draft positions bring no speed; keep K=5 and use the 5/4/3 schedule",
        )


def check_schedule(inp: "LintInput") -> Iterator[Hit]:
    spec = inp.speculative()
    if spec.schedule is None:
        return
    seqs = inp.flag("--max-num-seqs", "MAX_NUM_SEQS")
    max_seqs = to_number(seqs.value) if seqs else None
    problems = schedule_problems(spec.schedule, int(max_seqs) if max_seqs else None, spec.k, inp.block_size)
    if problems:
        yield Hit(spec.schedule_where, "batch-size schedule: " + "; ".join(problems))


def check_speculative_config(inp: "LintInput") -> Iterator[Hit]:
    spec = inp.speculative()
    if spec.error:
        yield Hit(spec.where, spec.error)


def check_env_lines(inp: "LintInput") -> Iterator[Hit]:
    for where, text in inp.unreadable_env:
        yield Hit(where, f"Compose cannot read this line as KEY=VALUE and skips it: {text.strip()[:80]}")


def check_lane_values(inp: "LintInput") -> Iterator[Hit]:
    for mismatch, fix in inp.mismatches:
        decided = "decided on this line" if mismatch.running.where.line else "no line sets it"
        yield Hit(mismatch.running.where, f"{mismatch.message()}, {decided}; {fix}")


def check_dead_lines(inp: "LintInput") -> Iterator[Hit]:
    for dead in inp.dead_lines:
        winner = dead.winner
        at = f"{winner.where.file}:{winner.where.line}" if winner.where.line else winner.where.file
        differs = winner.value != dead.value
        runs = f"so the server runs {winner.value}" if differs else "the same value, so this line is only misleading"
        yield Hit(
            dead.where,
            f"{dead.key}={dead.value} here is dead: {dead.reason} ({at}), {runs}",
            severity="error" if differs else None,
        )


def check_entrypoint(inp: "LintInput") -> Iterator[Hit]:
    error = inp.entrypoint_error
    if error:
        code, message = error
        yield Hit(
            inp.compose_at(
                inp.compose.command_lines()[0][0] if inp.compose.command_lines() else inp.compose.service_line
            ),
            f"the image's command script exits {code} before vllm serve starts: {message}",
        )


def check_one_change(inp: "LintInput") -> Iterator[Hit]:
    against = inp.rollback
    if against is None:
        return
    if against.problem:
        yield Hit(
            against.where,
            f"the rollback lane cannot be read, so whether this lane changes runtime and weights at once is not "
            f"known: {against.problem}",
            severity="warning",
        )
    elif against.change is not None and against.change.changes_both:
        if against.allowed:
            yield Hit(
                against.where,
                f"{against.change.describe()}; allowed by the operator ({ALLOW_FLAG}): a failure has two suspects",
                severity="warning",
            )
        else:
            yield Hit(
                against.where,
                f"{against.change.describe()}: seed 000 says do not change runtime and weights the same weekend; "
                f"promote one change first, or go ahead knowingly with `lanebook promote {ALLOW_FLAG}` "
                f"(a runbook: -p {ALLOW_PARAMETER}=true)",
            )


NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def _count(n: int) -> str:
    return NUMBER_WORDS.get(n, str(n))


def _names_worker(entry: str, worker: Any) -> bool:
    """Whether a WORKER_HOSTS entry reaches WORKER (a lane node): its RoCE IP or its host, with or without user@."""
    return entry.rpartition("@")[2] in (worker.roce_ip, worker.host)


def check_rank_keys(inp: "LintInput") -> Iterator[Hit]:
    """A lane of more than two nodes (or one carrying the four-node keys): NNODES and TP_SIZE are its node count,
    WORKER_HOSTS and WORKER_IPS its workers in rank order, and its launcher is not the recipe's two-node one."""
    params = inp.params
    if params is None or not params.rank_shaped:
        return
    want, nodes = params.rank_values(), len(params.nodes)
    shape = f"the lane has {_count(nodes)} nodes (the head and {_count(nodes - 1)} worker{'s' if nodes > 2 else ''})"
    order = ", ".join(f"{w.alias} {w.roce_ip}" for w in params.workers)
    for key in RANK_KEYS:
        setting = inp.env(key)
        if setting is None or setting.value is None:
            yield Hit(inp.env_missing_at, f"{key} is not set, but {shape}: set {key}={want[key]!r}")
            continue
        words = setting.value.split()
        if key in ("NNODES", "TP_SIZE"):
            if to_number(setting.value) != nodes:
                yield Hit(setting.where, f"{key}={setting.value}, but {shape}: set {key}={nodes}")
        elif key == "WORKER_IPS" and words != want[key].split():
            yield Hit(
                setting.where,
                f"WORKER_IPS={setting.value!r} does not list the workers' RoCE IPs in rank order ({order}): "
                f"set WORKER_IPS={want[key]!r}",
            )
        elif key == "WORKER_HOSTS" and (
            len(words) != len(params.workers) or not all(map(_names_worker, words, params.workers))
        ):
            yield Hit(
                setting.where,
                f"WORKER_HOSTS={setting.value!r} does not name the workers in rank order ({order}): "
                f"set WORKER_HOSTS={want[key]!r}",
            )
    if len(params.workers) < 2:
        return
    launcher = params.launcher
    for role, script in (("start", launcher.start), ("status", launcher.status), ("stop", launcher.stop)):
        if script in RECIPE_SCRIPTS:
            idle = _count(nodes - 2)
            yield Hit(
                inp.lane_at("launcher", role),
                f"launcher.{role} is the recipe's {script.removeprefix('./')}, which knows only WORKER_HOST: a "
                f"{_count(nodes)}-node lane launched by it would start a TP2 pair and leave {idle} Sparks idle; name "
                "the lane's own launcher scripts (start: ./start-tp4.sh, status: ./status-tp4.sh, stop: ./stop-tp4.sh)",
            )


# --- the registry --------------------------------------------------------------------------------

PITFALLS: tuple[Pitfall, ...] = (
    Pitfall(
        "P01",
        "Breakable CUDA graphs not disabled",
        "Without VLLM_USE_BREAKABLE_CUDAGRAPH=0 the Anemll 0.1.1 image auto-enables breakable CUDA graphs, the slow "
        "decode path. The env file alone is not enough: Compose passes only the keys named in the service's "
        "environment: map, so the compose file needs the injection line as well.",
        "error",
        "lint, env, gates, status, speed",
        "VLLM_USE_BREAKABLE_CUDAGRAPH=0 in .env.dspark on every node and VLLM_USE_BREAKABLE_CUDAGRAPH: "
        '"${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}" under environment: (`lanebook env render` writes both); the log '
        'must not say "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1".',
        check_breakable,
    ),
    Pitfall(
        "P02",
        "Batch 16384",
        "MAX_NUM_BATCHED_TOKENS=16384 measured a single-stream regression on the count canary.",
        "error",
        "lint, env, speed",
        "Keep MAX_NUM_BATCHED_TOKENS=8192.",
        _batch_check(16384, "it measured a single-stream regression on the count canary"),
    ),
    Pitfall(
        "P03",
        "Batch 8216",
        "8216 lands the six-sequence scheduler budget exactly on 8192 after the draft reserve. It initialised "
        "cleanly but regressed count, code and structured-JSON probes in the matched canary, and was rejected.",
        "error",
        "lint, env, speed, diagnose",
        "Keep MAX_NUM_BATCHED_TOKENS=8192.",
        _batch_check(8216, "it regressed count, code and structured JSON in the matched canary and was rejected"),
    ),
    Pitfall(
        "P04",
        "Sticky UMA memory after stop",
        "After a stop, free memory can stay ~10–16 GiB short with no container running.",
        "error",
        "stop, launch, rollback, diagnose",
        "Drop the page cache on every node (or reboot) before the next launch. Never `docker system prune -af`: "
        "it deletes the Anemll image.",
    ),
    Pitfall(
        "P05",
        "Dual-WAN download",
        "Pulling the ~160 GB of weights on every node over the WAN wastes hours and disk.",
        "warning",
        "weights",
        "Download once on the head, then rsync the hub model dir to every worker over the RoCE link.",
    ),
    Pitfall(
        "P06",
        "Snapshot-only mounts",
        "A snapshot dir holds symlinks into blobs/; binding only snapshots/REV breaks them inside the container.",
        "error",
        "lint, weights",
        "Mount the full hub model dir (blobs + snapshots + refs) or the whole HF cache.",
        check_snapshot_mounts,
    ),
    Pitfall(
        "P07",
        "Memory 0.80 at 1M context",
        "GPU_MEMORY_UTILIZATION=0.80 with MAX_MODEL_LEN=1048576 failed on the operators' pair: ~7.16 GiB KV available "
        "vs 7.54 GiB needed (estimated max length ~953,088). 0.85 came up cleanly.",
        "error",
        "lint, env, launch, gates",
        "GPU_MEMORY_UTILIZATION=0.85 for the 1M profile; where the launcher exports it from the profile key, "
        "GPU_MEMORY_UTILIZATION_TEXT=0.85 (`lanebook env render` writes the key the launcher reads).",
        check_memory,
    ),
    Pitfall(
        "P08",
        "Gloo / host IP on loopback",
        "If the distributed setup binds 127.0.0.1 the ranks cannot reach each other across nodes.",
        "error",
        "lint, env, launch",
        ("A per-rank VLLM_HOST_IP (each node's RoCE IP) and GLOO/NCCL/TP_SOCKET_IFNAME on the RoCE interface (bond0)."),
        check_loopback,
    ),
    Pitfall(
        "P09",
        'Hermes api_key "none"',
        'Hermes\' provider block needs api_key: no-key-required for a keyless server; "none" is not that value. A '
        "keyed lane's block needs its key (Hermes reads it from the variable key_env names), never no-key-required.",
        "error",
        "lint, gates",
        "Keyless lane: api_key: no-key-required in providers.spark-ds4. Keyed lane: key_env: NAME there (the lane "
        "file's hermes.key_env), with NAME=KEY in the Hermes host's environment or ~/.hermes/.env.",
        check_api_key,
    ),
    Pitfall(
        "P10",
        "thinking as a string",
        "chat_template_kwargs.thinking must be a JSON boolean: the template tests truthiness, so the string "
        '"false" turns thinking on.',
        "error",
        "lint, gates",
        "thinking: false (a boolean) in request and Hermes extra_body.",
        check_thinking,
    ),
    Pitfall(
        "P11",
        "Cold start takes 8–15 minutes",
        'A cold bind often takes 8–15 minutes; SHM "60 seconds" lines during TileLang/autotune are usually not fatal.',
        "warning",
        "launch, status, rollback",
        'Wait for "Application startup complete" and a live /v1/models (WAIT_ATTEMPTS=120 × WAIT_SECONDS=15); do '
        "not abort on the first SHM timeout.",
    ),
    Pitfall(
        "P12",
        "First-use inference JIT",
        "Readiness does not compile every production shape: an untouched request shape triggers Triton/JIT "
        "compilation during inference, turning the first production burst into a latency event.",
        "warning",
        "launch, warmup, speed",
        "Keep the bounded post-readiness warmup enabled (POST_READINESS_WARMUP_ENABLED=1); treat cold-bind proof as "
        "pending until observed.",
    ),
    Pitfall(
        "P13",
        "Legacy serving units",
        "Older serving units (Aiden/legacy) left active fight the compose project for the GPUs.",
        "error",
        "launch, rollback",
        "Mask the lane's legacy units on every node before compose up.",
    ),
    Pitfall(
        "P14",
        "K above the drafter block size",
        "The Flash drafter's dspark_block_size is 5: K=7 is not free speed.",
        "error",
        "lint, env, speed",
        "Keep the draft maximum at K=5 (MTP_NUM_TOKENS=5); shorten verification under load with the 5/4/3 schedule.",
        check_draft_k,
    ),
    Pitfall(
        "P15",
        "Unwatched long cold needles",
        "Unwatched ≥128k synthetic cold needles on the sole production head can hard-hang the box.",
        "error",
        "speed, diagnose, warmup",
        "Step long probes up gradually and watch the console.",
    ),
    Pitfall(
        "P16",
        "Head dies mid-TP",
        "When the head dies mid-TP a worker is left orphaned, holding its GPU.",
        "error",
        "diagnose, status, stop, rollback",
        "Stop every orphaned worker at once; clean SHM and page cache on every node, then restore from the head.",
    ),
    Pitfall(
        "P17",
        "Marketing the synthetic ceiling",
        "The ~94 t/s count stream is real but is not Hermes chat; agent/code work lives in the 47–70 t/s band.",
        "warning",
        "speed",
        "Publish code/prose bands (median, min–max), never the single best synthetic run.",
    ),
    Pitfall(
        "S01",
        "Invalid batch-size schedule",
        "num_speculative_tokens_per_batch_size ranges must cover batch sizes 1..MAX_NUM_SEQS contiguously, once, "
        "with every K at most num_speculative_tokens and the drafter block size 5.",
        "error",
        "lint, env",
        "Use the measured schedule [[1,1,5],[2,4,4],[5,6,3]] for MAX_NUM_SEQS=6.",
        check_schedule,
        seed="seed 000 (the recipe), its 5/4/3 verify schedule; vLLM's inclusive [start_bs, end_bs, K] ranges",
    ),
    Pitfall(
        "S02",
        "Unreadable SPECULATIVE_CONFIG",
        "The compose command must hold one SPECULATIVE_CONFIG assignment that becomes valid JSON inside the container.",
        "error",
        "lint, env",
        "Restore the recipe's one-line SPECULATIVE_CONFIG (`lanebook env render` writes it).",
        check_speculative_config,
        seed="seed 000 (the recipe), its one-line SPECULATIVE_CONFIG compose change",
    ),
    Pitfall(
        "S03",
        "Unreadable env-file line",
        "Compose skips an env-file line it cannot read as KEY=VALUE, so that setting never applies; a line whose key "
        "holds a space makes Docker Compose v2 refuse the whole file (lint then stops with Compose's message).",
        "warning",
        "lint, env",
        "Write it as KEY=VALUE (or comment it out with #).",
        check_env_lines,
        seed="no seed: how Docker Compose reads an env file",
    ),
    Pitfall(
        "S04",
        "Lane value not what runs",
        "The lane file is the operator's truth: every value it sets must be what the server runs. A line of the env "
        "file can be undone before it gets there: the recipe's current launcher exports GPU_MEMORY_UTILIZATION from "
        "its profile key (GPU_MEMORY_UTILIZATION_TEXT, or _VISION with ENABLE_VL_SIDECAR=1) and DSPARK_MODEL from "
        "ABLITERATED; Compose passes only the keys its environment: map names and keeps a flag the command "
        "hard-codes; the image's command script builds the speculative config itself.",
        "error",
        "lint, env, launch, rollback",
        "`lanebook env render --lane LANE --checkout DIR` writes the key that decides each value (the profile key, "
        "not GPU_MEMORY_UTILIZATION); where it cannot, edit the line lint names. After launch the live command must "
        "carry the lane's flags.",
        check_lane_values,
        seed="no seed: the recipe's own launcher, Compose file and image, read at the recipe's published commit",
    ),
    Pitfall(
        "S05",
        "Dead env line",
        "A line whose key a later line sets again, or that the launcher overrides (GPU_MEMORY_UTILIZATION in a "
        "checkout whose launcher reads the profile key), never reaches the server and misleads whoever reads it.",
        "warning",
        "lint, env",
        "Delete the line, or set the key that wins (the finding names it).",
        check_dead_lines,
        seed="no seed: the recipe's own launcher and env example, read at the recipe's published commit",
    ),
    Pitfall(
        "S06",
        "Entrypoint refuses the configuration",
        "The image's command script validates some variables (DRAFT_SAMPLE_METHOD, DEFAULT_THINKING, the API keys) "
        "and exits before `vllm serve` when one is wrong, so the container never serves.",
        "error",
        "lint, launch",
        "Set the variable to one of the values the message lists.",
        check_entrypoint,
        seed="no seed: the image's command script, read at the recipe's published commit",
    ),
    Pitfall(
        "S07",
        "Runtime and weights changed at once",
        "A lane changes one thing against its rollback lane: seed 000 swapped to the 0731 weights on a known-good "
        "Anemll checkout and says not to change runtime and weights the same weekend. A lane whose image and "
        "weights both differ from its rollback lane's leaves a failure with two suspects, and a rollback that "
        "undoes both.",
        "error",
        "lint, env, launch",
        "Promote one change at a time: keep the rollback lane's image (or weights) and change the other, then the "
        "rest once the first has held. To go ahead knowingly: `lanebook promote --allow-runtime-and-weights` (a "
        "runbook: `-p allow_runtime_and_weights=true`).",
        check_one_change,
        seed='seed 000 (the recipe), "What we run": do not change runtime and weights the same weekend',
    ),
    Pitfall(
        "S08",
        "A multi-node lane whose TP keys disagree with its nodes",
        "The recipe's launcher and compose are two-node only (WORKER_HOST, --tensor-parallel-size 2, --nnodes 2). A "
        "lane of more Sparks runs a four-node checkout of its own, whose launcher reads NNODES, TP_SIZE, WORKER_HOSTS "
        "and WORKER_IPS (space-separated, in rank order) and whose compose passes --tensor-parallel-size ${TP_SIZE} "
        "and --nnodes ${NNODES}: keys that disagree with the lane's nodes start a smaller TP group, or a rank on the "
        "wrong node, and the recipe's start-deepseek-v4-flash-dspark.sh starts only WORKER_HOST, so a four-node "
        "lane launched by it would start a TP2 pair and leave two Sparks idle.",
        "error",
        "lint, env, launch",
        "Set NNODES and TP_SIZE to the node count and WORKER_HOSTS and WORKER_IPS to the workers' RoCE IPs in the "
        "order `nodes:` lists them, and name the four-node launcher scripts under `launcher:` (./start-tp4.sh, "
        "./status-tp4.sh, ./stop-tp4.sh).",
        check_rank_keys,
        seed="no seed: public four-Spark profiles of this model (MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks, "
        ".env.tp4.example: start-tp4.sh, NNODES=4, TP_SIZE=4, WORKER_HOSTS, WORKER_IPS)",
    ),
    Pitfall(
        "S09",
        "The API on every address with no key",
        "The lane files serve on the head's LAN (VLLM_HOST 0.0.0.0) so Hermes and other machines reach it; with "
        "neither VLLM_API_KEY nor DSPARK_API_KEYS set, anyone who reaches the port can run inference on the pair. "
        "vLLM's key check covers only /v1, /v2 and /inference: a keyed lane still wants network-level access control.",
        "warning",
        "lint, env",
        "Key the lane: auth: {DSPARK_API_KEYS: {key_file: ~/.config/lanebook/LANE.keys}} in its lane file (mode "
        "0600; render writes the keys into .env.dspark, every lanebook client sends them), or serve on one trusted "
        "address (VLLM_HOST) behind a firewall.",
        check_open_keyless,
        seed="no seed: the recipe's env example, API auth (MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark, "
        "env.dspark.example: VLLM_API_KEY / DSPARK_API_KEYS, keyless routes outside /v1, /v2, /inference)",
    ),
)

_BY_ID = {p.id: p for p in PITFALLS}


def pitfall(pitfall_id: str) -> Pitfall:
    return _BY_ID[pitfall_id]


# How causes show on a running lane. A symptom with a pitfall's id is that pitfall seen at run time and cites the
# pitfall's seed; the D-ids cite the public report they were learnt from (D24 on: the case base's causes with two or
# more reports, from its causes table); H-ids are harmless look-alikes.
SYMPTOMS: tuple[Symptom, ...] = tuple(
    replace(s, source=s.source or _BY_ID[s.id].origin) if s.id in _BY_ID else s for s in _SYMPTOMS
) + tuple(s for s in registry_symptoms())
_SYMPTOM_BY_ID = {s.id: s for s in SYMPTOMS}


def symptom(symptom_id: str) -> Symptom:
    """The registry symptom SYMPTOM_ID; a case-only cause of the case base (one report) by its key, as a symptom."""
    found = _SYMPTOM_BY_ID.get(symptom_id)
    if found is None:
        cause = case_cause(symptom_id)
        if cause is None:
            raise KeyError(symptom_id)
        found = cause.symptom()
    return found


def for_runbook(runbook: str) -> list[Pitfall]:
    """The pitfalls a runbook meets, in registry order (its troubleshooting table)."""
    return [p for p in PITFALLS if runbook in p.runbooks]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(pitfalls: list[Pitfall]) -> str:
    """Symptom | Cause | Fix, a row a pitfall: what the operator sees (its id and title), why (the lesson), and
    what to do."""
    rows = ["| Symptom | Cause | Fix |", "|---|---|---|"]
    rows += [f"| **{p.id}** {_cell(p.title)} | {_cell(p.text)} | {_cell(p.fix)} |" for p in pitfalls]
    return "\n".join(rows) + "\n"


TROUBLESHOOTING_HEADING = "## Troubleshooting"


def troubleshooting_markdown(runbook: str) -> str:
    """A runbook's troubleshooting section, the Markdown cell after its last step (where NVIDIA's playbooks put it):
    written from the registry into the notebook (tools/sync_troubleshooting.py), so a run that stops at a failed
    step still shows it, and tests/test_runbook_shape.py keeps it equal to the registry."""
    pitfalls = for_runbook(runbook)
    table = markdown_table(pitfalls) if pitfalls else f"No registered pitfall is met in `{runbook}`.\n"
    return (
        f"{TROUBLESHOOTING_HEADING}\nWhat goes wrong at this stage and what to do, from the pitfall registry\n"
        "(`lanebook.recipe.pitfalls`: the same entries lint and the book use; edit the registry, not this cell).\n\n"
        + table
    ).rstrip("\n")
