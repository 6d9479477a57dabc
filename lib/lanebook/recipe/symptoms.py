"""Symptom classes: how a cause shows on a running lane (log lines, /metrics, the kernel log, a client's reply).

The pitfall registry (lanebook.recipe.pitfalls) lists these beside the pitfalls: it is the one registry, and
`lanebook doctor`, the book's Symptoms page and the runbooks read them from there. A symptom whose cause the
recipe names carries the pitfall's id (P04, P12, ...) and cites the seed through the pitfall; the rest have ids
D01… and cite, in `source`, the public report the class was learnt from. H-ids are known look-alikes: evidence
that resembles a fault on a healthy lane, reported as a harmless note, never as a finding.

This module is data only: each class's evidence patterns are the exact line shapes the reports show (vLLM's logger
prefix `(EngineCore pid=N) ERROR MM-DD HH:MM:SS [file.py:N] ...` is left out of a pattern so any prefix matches).
The rules that weigh the evidence (before or after readiness, which scrape moved, which node) live in
lanebook.verify.doctor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

LOG, KERNEL = "log", "kernel"  # where a pattern is looked for: a container/launcher log, or dmesg/journalctl -k
FINDING, NOTE = "finding", "note"  # a fault class, or a harmless look-alike


@dataclass(frozen=True)
class Pattern:
    key: str  # the name the doctor's rules use
    stream: str  # LOG | KERNEL (kernel lines are looked for in pasted logs too)
    regex: str  # searched in each folded line (re.search), compiled once by the doctor
    # Literal strings one of which every match contains (lower case for a `(?i)` pattern): the doctor searches a line
    # with this pattern only when it holds one. Empty: searched in every line.
    hints: tuple[str, ...] = ()


@dataclass(frozen=True)
class Figure:
    """A number a report states in words (an acceptance rate, a locked-memory limit, a prompt length) and the band
    that makes it evidence for its symptom: `below` or `at_least` the threshold. The suspected tier reads it."""

    name: str
    regex: str  # group `v` holds the number; searched case-insensitively in the folded text
    below: Optional[float] = None
    at_least: Optional[float] = None

    def fits(self, value: float) -> bool:
        return (self.below is None or value < self.below) and (self.at_least is None or value >= self.at_least)


@dataclass(frozen=True)
class Symptom:
    id: str
    title: str
    seen: str  # what the operator sees
    cause: str  # what it means, in plain words
    fix: str
    runbook: str  # the repair runbook (a name under runbooks/)
    next_check: str  # what tells it apart when it is only suspected
    patterns: tuple[Pattern, ...] = ()
    metrics: str = ""  # the /metrics condition, in words (the doctor computes it from two scrapes)
    source: str = ""  # the public report it was learnt from; empty for a P-id (the pitfall cites its seed)
    kind: str = FINDING
    # How reports put it in words: phrasings, names and metric names gathered from the working half of the reports
    # the class was learnt from (recipe/cases/field.yaml); the suspected tier retrieves over these and `seen`.
    vocabulary: tuple[str, ...] = ()
    figures: tuple[Figure, ...] = ()  # numbers stated in words that point here
    counter: tuple[Figure, ...] = ()  # numbers that say the lane is healthy on this count (a look-alike)


# The lines the doctor reads for context (which phase a line falls in), not evidence of any class by themselves.
READY = Pattern("ready", LOG, r"Application startup complete", ("Application startup",))
# The first line of every vLLM start: a log holding two (a container docker restarted keeps its log) starts again
BOOT = Pattern("boot", LOG, r"vLLM API server version", ("vLLM API server version",))
_WARMUP_DONE = r"\b(done|complete|completed|finished|passed|failed)\b"
WARMUP_START = Pattern("warmup_start", LOG, r"post-readiness[ -]warmup(?!.*" + _WARMUP_DONE + ")", ("post-readiness",))
WARMUP_END = Pattern("warmup_end", LOG, r"warmup.*" + _WARMUP_DONE, ("warmup",))
STOPPED = Pattern(
    "stopped",
    LOG,
    r"stop-deepseek-v4-flash-dspark|Container \S+\s+(Stopped|Removed)\b",
    ("stop-deepseek", "Container "),
)
DRAFTER_LOAD = Pattern("drafter_load", LOG, r"Loading drafter model", ("Loading drafter",))
WARMUP_OFF = Pattern(
    "warmup_off",
    LOG,
    r"POST_READINESS_WARMUP_ENABLED=0|post-readiness warmup (disabled|bypassed|skipped)",
    ("POST_READINESS", "post-readiness"),
)
RANDOM_BENCH = Pattern(
    "random_bench",
    LOG,
    r"--dataset-name[ =]random\b|dataset_name['\"]?[:=] ?['\"]?random\b",
    ("dataset-name", "dataset_name"),
)
# Where the lane was: a line that only a start prints (the engine failing to come up, weights loading, the ranks'
# rendezvous), and one that only a serving lane prints (an answered API request, tokens generated).
STARTING = Pattern(
    "starting",
    LOG,
    r"EngineCore failed to start|Engine core initialization failed|wait_for_engine_startup|init_device|"
    r"Loading (?:safetensors checkpoint shards|weights|model)|Waiting for (?:the )?(?:head|worker|ranks?)|"
    r"init_process_group|Capturing (?:CUDA graphs|cudagraphs)|(?<!Applicati)\bon startup\b",
    (
        "EngineCore failed",
        "Engine core initialization",
        "wait_for_engine",
        "init_device",
        "Loading ",
        "Waiting for",
        "init_process_group",
        "Capturing ",
        " on startup",
    ),
)
SERVING = Pattern("serving", LOG, r'(?:POST|GET) /v1/\S* HTTP/1\.\d" 200', (" /v1/",))
SERVING_TOKENS = Pattern(
    "serving_tokens", LOG, r"Avg generation throughput: (?:[1-9]|0\.[1-9])", ("Avg generation throughput",)
)
# The phase as a post says it in words.
_STARTING_WORDS = (
    "at startup",
    "during startup",
    "startup fail",
    "startup problem",
    "fails to start",
    "fail to start",
    "won't start",
    "no longer start",
    "never came up",
    "never comes up",
    "at init",
    "cold boot",
    "cold load",
    "during initialization",
    "during engine initialization",
    "during initialisation",
    "before any request",
    "before any inference request",
    "no request is served",
    "while loading",
    "during load",
    "during model load",
    "during weight load",
)
STARTING_WORDS = Pattern("starting_words", LOG, "(?i)" + "|".join(map(re.escape, _STARTING_WORDS)), _STARTING_WORDS)
_SERVING_WORDS = (
    "mid-serve",
    "while serving",
    "of serving",
    "of normal serving",
    "serves, then",
    "stability test",
    "load test",
    "stress test",
    "minutes of normal",
    "minutes of serving",
    "hours of serving",
    "hour stability",
)
SERVING_WORDS = Pattern("serving_words", LOG, "(?i)" + "|".join(map(re.escape, _SERVING_WORDS)), _SERVING_WORDS)
REBOOT_WORDS = Pattern(
    "reboot_words",
    LOG,
    r"(?i)\b(?:after|since) (?:a |the |every )?reboot|^-- boot [0-9a-f]{32} --|\bboot -1\b",
    ("reboot", "-- boot", "boot -1"),
)
# Lines that look like an error: what the doctor must explain, or say it cannot (an `unknown` finding).
ERROR_SHAPED = Pattern(
    "error_shaped",
    LOG,
    r"(?i)(?:^|; |`|\*\*)(?:\w+(?:\.\w+)*(?:error|exception)\b|traceback \(most recent call last\))|"
    r"(?:^|; |`|\*\*)\s*\[?(?:error|fatal|critical)\]?:\s|\blevel=(?:error|fatal)\b|device-side assert|"
    r"(?-i:\b(?:ERROR|FATAL|CRITICAL)\b)|[\w.)\]/-]+:(?:\d+:){0,2} ?error:|"
    r"\b(?:error|critical|fatal)\b \d\d-\d\d|"
    r"\b(?:failed|failure|fatal error|cannot allocate|out of memory|timed out|connection refused|segmentation fault|"
    r"core dumped|kernel panic|oops|bug:|nccl warn|xid)\b|"
    # what a program answers when it refuses: an HTTP client-error status (a 5xx is also what /health answers while
    # a healthy server boots), a loader's missing symbol, CUDA's and verbs' error
    # codes, a refused request field, an unrun or rate-limited command, a torch allocation that did not fit
    r"\bhttp/\d(?:\.\d)?\"? 4\d\d\b|^(?:40[0-9]|413|422|429) (?-i:[A-Z][a-z])|undefined symbol|"
    r"\bcudaerror[a-z]|\bibv_wc_\w+_err\b|\bunauthorized\b|\binsufficient\b|\bnot (?:permitted|allowed)\b|"
    r"\bhas no attribute\b|did not run successfully|repeated too quickly|\bno (?:\w+ )?(?:device|interface)s? found\b|"
    r"is not a [\w-]+ command\b|\brequires --[a-z]|tried to allocate",
    (
        "error",
        "exception",
        "traceback",
        "critical",
        "fatal",
        "fail",
        "cannot allocate",
        "out of memory",
        "timed out",
        "refused",
        "segmentation",
        "core dumped",
        "panic",
        "oops",
        "bug:",
        "nccl warn",
        "xid",
        "device-side assert",
        '" 4',
        "http/1.1 4",
        "http/1.0 4",
        "http/2 4",
        "http/2.0 4",
        *(f"{code} " for code in (*range(400, 410), 413, 422, 429)),
        "undefined symbol",
        "cudaerror",
        "ibv_wc_",
        "unauthorized",
        "insufficient",
        "not permitted",
        "not allowed",
        "has no attribute",
        "did not run successfully",
        "repeated too quickly",
        "device found",
        "devices found",
        "interface found",
        "interfaces found",
        "command",
        "requires --",
        "tried to allocate",
    ),
)
# A failure stated in words (a post's prose, a table's cell, inline code): never "healthy", at least `unknown`.
_STATED = (
    "died",
    "dies",
    "dying",
    "hung",
    "hangs",
    "killed",
    "oom",
    "oom-killed",
    "refused",
    "crashed",
    "crashes",
    "timed out",
    "times out",
    "freezes",
    "froze",
    "frozen",
    "stuck",
    "segfault",
    "segfaulted",
    "deadlock",
    "deadlocked",
    "no space left",
    "does not exist",
    "cannot start",
    "can't start",
    "won't start",
    "fails to start",
    "failed to start",
    "never starts",
    "never comes up",
    "never came up",
    "stopped answering",
    "stopped responding",
    "stops answering",
    "stops responding",
    "not responding",
    "unresponsive",
)
# An error-ish word inside inline code (`shm_broadcast: read cancelled`): the post quotes a failing line.
_INLINE_FAILURE = r"`[^`]*(?:cancel|abort|fail|error|exception|timeout|timed out|denied|refused|fatal|dead)[^`]*`"
STATED_FAILURE = Pattern(
    "stated_failure",
    LOG,
    r"(?i)\b(?:" + "|".join(re.escape(w) for w in _STATED) + r")\b|" + _INLINE_FAILURE,
    (*_STATED, "`"),
)
# What a person writes to say something failed, read in prose only (a sentence, a table row: `is_prose`), where a
# healthy log's routine words cannot be: a post that says so is at least `unknown`, never "healthy".
PROSE_FAILURE = Pattern(
    "prose_failure",
    LOG,
    r"(?i)\b(?:fail(?:s|ed|ing|ure)?|errors?(?!-free)|erroring|errored|broken|breaks|crash\w*|abort\w*|panic\w*|hang(?:s|ing)?|"
    r"stall(?:s|ed|ing)?|exit(?:s|ed)? with|exit code|(?:does ?n[o']t|did ?n[o']t|won'?t|not|no longer|stopped) "
    r"(?:work|works|working|load|loads|loading|start|starts|starting|serve|serves|serving|answer|answers|answering|"
    r"respond|responds|responding|show|shows|showing|shown|appear|appears|appearing|return|returns|returning|produce|"
    r"produces|producing|stream|streams|streaming)|unable to|"
    r"no (?:output|response|reply|answer|tokens)|"
    r"can ?n[o']?t|could ?n[o']?t|not found|missing|mismatch\w*|unsupported|not supported|reject(?:s|ed|ing)?|denied|"
    r"out of memory|oom|timeout|garbage|gibberish|slower|slowdown|regress\w*|degraded|wrong|incorrect|invalid|"
    r"unexpected(?:ly)?|unauthori[sz]ed|forbidden|nonsense|leak(?:s|ed|ing)?|"
    r"empty (?:output|response|reply|answer|content|result)s?|[45]\d\d (?:error|response|status|not found)|"
    r"never (?:complete|finish|launch|start|load|return|respond|answer|come)(?:e?s)?|never comes up|refus(?:es|ed|ing)|"
    r"wedge[sd]?|collaps(?:es|ed|ing)|no speedup|(?:zero|near-zero) (?:accept\w*|tokens|output)|random tokens|"
    r"(?:returns?|returned|gets?|got|getting) (?:an? )?(?:HTTP )?[45]\d\d|"
    # what a person says went wrong without a failure word: one thing in place of another, a loop, a limit far
    # under what was promised, a setting that changed nothing
    r"instead of|full of|falls? through|no effect|never (?:runs?|used|joins?|takes? effect|works?|ends?)|"
    r"keeps? (?:looping|restarting|crashing|retrying|reloading|failing|dying|killing)|loops? forever|in a loop|"
    r"(?:is|are|was|were|gets?|got) ignored|over-?allocat\w*|problems?|troubles?|no \w+ (?:can|could) be|"
    r"(?:far|much) (?:smaller|lower|slower|less|fewer)|"
    r"(?:lower|smaller|fewer|slower) than (?:expected|advertised|promised)|"
    # a fatal stop, a traceback or a resource used up, said in words; a device or a network not used or not seen
    r"fatal\w*|tracebacks?|exhausted|outofmemory\w*|badly|"
    r"no (?:gpus?|cuda devices?|devices?) (?:detected|found)|(?:on )?cpu only|only (?:on|uses?) (?:the )?cpu|"
    r"(?:does ?n[o']t|did ?n[o']t|never) (?:use|uses|detect|detects|see|sees)|(?:is|are|comes? back) empty|"
    # an HTTP error status named, output that is mangled or cut, a speed far under the promise, nothing at all
    r"(?:HTTP|status) [45]\d\d|[45]\d\d (?:Bad Request|Too Many Requests|Internal Server Error|Bad Gateway|"
    r"Service Unavailable|Gateway Time-?out)|corrupt(?:s|ed|ing)?|garbled|nonsensical|scrambled|"
    r"(?:at|to) a fraction of|capped at|cut (?:off|short)|crawl(?:s|ed|ing)?|nothing (?:happens|happened)|"
    r"(?:finds?|found) no \w+|no working \w+|stops? waiting|gives? up|gave up|"
    r"never (?:reach(?:es|ed)?|moved?|published|shows? up|showed up|arrives?|arrived)|"
    r"100 ?%[^.]{0,40}\b(?:idle|no (?:requests?|inference|load|traffic))|"
    # trying again and again, a change that changes nothing, falling below a mark, success only on a condition
    r"(?:still|kept) tr(?:ying|ied|ies)|no (?:final |visible )?content|"
    r"(?:produces?|produced|returns?|returned|gives?|gave) (?:0|zero) (?:[\w-]+ )?tokens|"
    r"(?:adds?|added|does|did|changes?|changed) nothing|no \w+ (?:happens|happened|takes place|took place)|"
    r"(?:falls?|fell) below|only (?:succeeds?|succeeded|works?|worked) (?:once|when|if|after|for|with))\b",
    (
        "fail",
        "error",
        "broke",
        "crash",
        "abort",
        "panic",
        "hang",
        "stall",
        "exit",
        "work",
        "load",
        "start",
        "serv",
        "answer",
        "respond",
        "unable",
        "can",
        "could",
        "not found",
        "missing",
        "mismatch",
        "support",
        "reject",
        "denied",
        "out of memory",
        "oom",
        "timeout",
        "garbage",
        "gibberish",
        "slow",
        "regress",
        "degraded",
        "wrong",
        "incorrect",
        "invalid",
        "unexpected",
        "unauthori",
        "forbidden",
        "nonsense",
        "leak",
        "empty",
        "response",
        "status",
        "never",
        "refus",
        "wedge",
        "collaps",
        "speedup",
        "zero",
        "random tokens",
        "show",
        "appear",
        "produc",
        "stream",
        "no output",
        "no re",
        "no answer",
        "ret",
        "get",
        "got",
        "instead of",
        "full of",
        "fall through",
        "falls through",
        "no effect",
        "keep",
        "loop",
        "ignored",
        "allocat",
        "problem",
        "trouble",
        "can be",
        "could be",
        "far ",
        "than ",
        "fatal",
        "traceback",
        "exhausted",
        "outofmemory",
        "badly",
        "detect",
        "found",
        "cpu",
        "use",
        "see",
        "http",
        "bad request",
        "too many",
        "internal server",
        "gateway",
        "unavailable",
        "corrupt",
        "garbled",
        "nonsensical",
        "scrambled",
        "fraction",
        "capped",
        "cut ",
        "crawl",
        "nothing",
        "finds no",
        "waiting",
        "give",
        "gave",
        "100",
        "still tr",
        "kept tr",
        "content",
        "tokens",
        "much ",
        "happen",
        "place",
        "below",
        "only ",
    ),
)
# A rank told to meet its peers at an address only its own machine answers: localhost, 127.0.0.1, or the 127.0.1.1
# Ubuntu's /etc/hosts gives the machine's own name (P08's commonest form on a pair, as the reports show).
MASTER_LOOPBACK = Pattern(
    "master_loopback",
    LOG,
    r"(?i)(?:master[_ -]?addr(?:ess)?|dist[_-]init[_-]addr|--host-ip|VLLM_HOST_IP|GLOO_SOCKET_IFNAME)\W{0,4}"
    r"(?:localhost|127\.0\.[01]\.1)\b|tcp://(?:localhost|127\.0\.[01]\.1):\d+",
    ("master", "dist", "host", "tcp://", "addr"),
)
# Lines that tell a failure apart without being error-shaped: what the case-base retrieval reads beside the
# error-shaped lines and the prose (a warning, a refusal, something missing or unsupported).
_TELLING = (
    "warn",
    "error",
    "fail",
    "fatal",
    "denied",
    "not found",
    "no such",
    "unsupported",
    "not supported",
    "unknown",
    "unrecognized",
    "invalid",
    "cannot",
    "can't",
    "could not",
    "couldn't",
    "unable",
    "timeout",
    "exceed",
    "mismatch",
    "not compatible",
    "incompatible",
    "no space",
    "not defined",
    "does not",
    "missing",
    "abort",
    "exit code",
    "exited",
    "killed",
    "errno",
    "nccl",
    "ibv_",
    "nvrm",
    "xid",
)
# Its hints are the pattern: a line holding one (any case) is telling, so the regex only has to match once they hold.
TELLING = Pattern("telling", LOG, "(?i)^", _TELLING)
CONTEXT = (
    READY,
    BOOT,
    WARMUP_START,
    WARMUP_END,
    STOPPED,
    DRAFTER_LOAD,
    WARMUP_OFF,
    RANDOM_BENCH,
    STARTING,
    SERVING,
    SERVING_TOKENS,
    STARTING_WORDS,
    SERVING_WORDS,
    REBOOT_WORDS,
    ERROR_SHAPED,
    STATED_FAILURE,
    PROSE_FAILURE,
    MASTER_LOOPBACK,
    TELLING,
)

# A startup line saying breakable CUDA graphs are on (P01), in every form the public logs show it, any case:
# vLLM's own "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1. Set VLLM_USE_BREAKABLE_CUDAGRAPH=0 to opt out." and the
# warning that follows it on every rank, "VLLM_USE_BREAKABLE_CUDAGRAPH is set, disabling vLLM's torch.compile
# pipeline" (vllm-project/vllm#49370, DeepSeek-V4-Flash; #41834, its GB10 TP=2 decode regression), forks' "Auto-enabling
# VLLM_USE_BREAKABLE_CUDAGRAPH=1 for DeepSeek V4", "Breakable CUDA graph(s) enabled", and the variable set on in an
# environment dump (`VLLM_USE_BREAKABLE_CUDAGRAPH=1`, `'VLLM_USE_BREAKABLE_CUDAGRAPH': 'true'`). The opt-out
# (`=0`, "disabled", "not enabled") is no such line.
BREAKABLE_ON = Pattern(
    "breakable_on",
    LOG,
    r"(?i)(?<!not )auto-?enabl\w*\W+(?:\S+\W+){0,2}?breakable"
    r"|VLLM_USE_BREAKABLE_CUDAGRAPH['\"]?\s*(?:=|:)\s*['\"]?(?:1|true|yes|on)\b"
    r"|VLLM_USE_BREAKABLE_CUDAGRAPH is set\b"
    r"|breakable[ _-]?cuda[ _-]?graphs?\W+(?:is |are )?(?:auto-?)?enabled"
    r"|\b(?:enabling|using) breakable[ _-]?cuda[ _-]?graphs?",
    ("breakable",),
)
SHM_TIMEOUT = Pattern(
    "shm_timeout", LOG, r"No available shared memory broadcast block found in \d+ seconds?", ("No available shared",)
)
SPEC_LINE = Pattern(
    "spec_line",
    LOG,
    r"SpecDecoding metrics: Mean acceptance length: (?P<mal>[\d.]+),.*?Per-position acceptance rate: "
    r"(?P<pos>[\d., ]+?)(?:, Avg Draft acceptance rate: (?P<avg>[\d.]+)%)?\s*$",
    ("SpecDecoding metrics",),
)
ENGINE_STATS = Pattern(
    "engine_stats",
    LOG,
    r"Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, Avg generation throughput: (?P<gen>[\d.]+) tokens/s, "
    r"Running: (?P<running>\d+) reqs?, Waiting: (?P<waiting>\d+) reqs?",
    ("Avg prompt throughput",),
)
NVRM_NOMEM = Pattern("nvrm_nomem", KERNEL, r"NVRM: .*Out of memory \[NV_ERR_NO_MEMORY\]", ("NV_ERR_NO_MEMORY",))
FREE_MEM = Pattern(
    "free_mem", LOG, r"^\s*Mem:\s+(?P<total>[\d.]+)(?P<unit>[GMK]i)?\s+(?P<used>[\d.]+)[GMK]?i?\s", ("Mem:",)
)
NO_CONTAINER = Pattern("no_container", LOG, r"Error: No such (object|container): (?P<name>\S+)", ("No such",))
IP_LINK = Pattern("ip_link", LOG, r"^\d+: (?P<ifname>[\w.@-]+): <[^>]*> mtu (?P<mtu>\d+)", (" mtu ",))
# A process row of `top -b` (PID USER PR NI VIRT RES SHR S %CPU %MEM TIME+ COMMAND) whose command is one of vLLM's
# engine processes, titled by vLLM (VLLM::EngineCore, VLLM::Worker_TP0, ...): its %CPU over the frame's interval.
ENGINE_CPU = Pattern(
    "engine_cpu",
    LOG,
    r"^\s*(?P<pid>\d+)\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+[RSDTtZI]\s+(?P<cpu>\d+(?:\.\d+)?)\s+\S+\s+\S+\s+"
    r"(?P<proc>(?:\w+::)?(?:EngineCore|Worker_TP)\S*|VLLM::\S+)",
    ("EngineCore", "Worker_TP", "VLLM::"),
)
# The tensor-parallel size in the live `vllm serve` command (docker top) or a saved command line.
TP_SIZE = Pattern(
    "tp_size", LOG, r"(?:--tensor-parallel-size|\s-tp)[ =](?P<tp>\d+)\b", ("-tensor-parallel-size", " -tp")
)

# vLLM's KV-shortfall error, in the wording of each release: kv_cache_utils' check_enough_kv_cache_memory
# ("To serve at least one request with the model's max seq len (N), (X GiB KV cache is needed, which is larger than
# the available KV cache memory (Y GiB)", spelt "models's" in some releases) and the older engine check ("The model's
# max seq len (N) is larger than the maximum number of tokens that can be stored in KV cache (M)"), and the same check
# with nothing left at all ("No available memory for the cache blocks").
KV_SHORT = Pattern(
    "kv_short",
    LOG,
    r"max seq len \((?P<len>\d+)\), \((?P<need>[\d.]+) GiB KV cache is needed, which is larger than the available KV "
    r"cache memory \((?P<have>[\d.]+) GiB\)"
    r"|max seq len \((?P<len2>\d+)\) is larger than the maximum number of tokens that can be stored in KV cache "
    r"\((?P<tokens>\d+)\)|No available memory for the cache blocks",
    ("max seq len", "No available memory for the cache"),
)
# torch's allocator (torch.OutOfMemoryError "CUDA out of memory. Tried to allocate ...") and the CUDA runtime's
# "CUDA error: out of memory" surfaced by a kernel launch or a graph capture.
CUDA_OOM = Pattern(
    "cuda_oom",
    LOG,
    r"torch\.OutOfMemoryError|CUDA out of memory|CUDA error: out of memory",
    ("OutOfMemoryError", "out of memory"),
)
# A CUDA graph being captured: vLLM's capture progress and its memory advice, torch.cuda.graph's capture_end frame.
GRAPH_CAPTURE = Pattern(
    "graph_capture",
    LOG,
    r"Capturing (?:the model for )?(?:CUDA graphs|cudagraphs)|capture_end\(\)|torch\.cuda\.graph\(|capture_model\(\)|"
    r"CUDA graphs can take additional|during (?:CUDA-graph|cudagraph|CUDA graph) capture",
    ("Capturing ", "capture_end", "torch.cuda.graph", "capture_model", "CUDA graphs can take", " capture"),
)
# torch's Gloo (ProcessGroupGloo.cpp, gloo/transport/tcp): a rank that fell back to loopback or could not find the
# interface it was told to bind, and a full-mesh connect that failed at all.
GLOO_LOOPBACK = Pattern(
    "gloo_loopback",
    LOG,
    r"connectFullMesh failed.*remote=\[127\.0\.0\.1\]|Using the loopback address as fallback|"
    r"Unable to find address for: \S+",
    ("connectFullMesh", "loopback address", "Unable to find address"),
)
GLOO_MESH = Pattern("gloo_mesh", LOG, r"Gloo connectFullMesh failed", ("connectFullMesh",))
# c10d's TCPStore socket retrying an address it cannot bind or reach (a rank on the wrong interface).
_SOCKET_RETRY = r"The server socket on \S+ has timed out, will retry|The client socket has failed to connect to"
SOCKET_RETRY = Pattern("socket_retry", LOG, _SOCKET_RETRY, ("server socket on", "client socket has failed"))
# libibverbs through NCCL/UCX: registering or creating a queue for RDMA memory refused (ENOMEM). The locked-memory
# limit (D17) and a kernel that broke registration (D20) both print it; the limit or the kernel versions tell
# them apart.
IBV_NOMEM = Pattern(
    "ibv_nomem",
    LOG,
    r"ibv_\w+(?:\([^)]*\))?(?: failed)?(?: with error)?:? Cannot allocate memory|ibv_reg_mr\w* (?:ENOMEM|failed)",
    ("ibv_",),
)
MEMLOCK = Pattern(
    "memlock",
    LOG,
    r"(?i)(?:ulimit -l|max locked memory|memlock)\D{0,30}?(?P<kb>\d+|unlimited)",
    ("ulimit -l", "max locked memory", "memlock"),
)
KERNEL_NAMED = Pattern(
    "kernel_named",
    LOG,
    r"(?i)\b(?P<version>\d\.\d+\.\d+-\d+)-(?:nvidia|generic)\b|kernel\D{0,30}?\b(?P<v2>\d\.\d+\.\d+-\d+)\b",
    ("-nvidia", "-generic", "kernel"),
)
# The CUDA runtime finding no code for this GPU, a kernel built for another SM, or a checkpoint missing what the
# recipe's speculative config needs: the image or the weights are not the ones the recipe expects.
IMAGE_MISMATCH = Pattern(
    "image_mismatch",
    LOG,
    r"no kernel image is available for execution on the device|This kernel only supports sm_?\d+|"
    r"Model config must specify .* for parallel drafting|"
    r"(?:is|are) not supported (?:on|for) (?:sm_?|compute capability )\d+",
    ("no kernel image", "kernel only supports", "Model config must specify", "not supported"),
)
# vLLM's startup admission (worker utils request_memory): free memory below what gpu_memory_utilization asks for.
FREE_ADMISSION = Pattern(
    "free_admission",
    LOG,
    r"Free memory on device (?:\S+ )?\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less than desired GPU "
    r"memory utilization",
    ("Free memory on device",),
)
# POSIX shared memory gone from under a process: vLLM's ring buffer attach, a /dev/shm segment, logind's sessions.
SHM_GONE = Pattern(
    "shm_gone",
    LOG,
    r"ATTACH_MISSING|could not open shared memory segment|No such file or directory: '/dev/shm/|"
    r"FileNotFoundError: .*/dev/shm/",
    ("ATTACH_MISSING", "shared memory segment", "/dev/shm/"),
)
REMOVE_IPC = Pattern("remove_ipc", LOG, r"RemoveIPC\s*=\s*yes|\bRemoved session \d+", ("RemoveIPC", "Removed session"))
KERNEL_VERSION = Figure("kernel version", r"\bkernel[^.;]{0,40}?\b(?P<v>\d)\.\d+\.\d+-\d+")


SYMPTOMS: tuple[Symptom, ...] = (
    # --- the recipe's pitfalls as they show at run time (source: the pitfall's seed) ----------------------
    Symptom(
        "P01",
        "Breakable CUDA graphs enabled",
        'The startup log says breakable CUDA graphs are on: "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1", '
        '"VLLM_USE_BREAKABLE_CUDAGRAPH is set, disabling vLLM\'s torch.compile pipeline", "Breakable CUDA graphs '
        'enabled".',
        "The container did not get VLLM_USE_BREAKABLE_CUDAGRAPH=0, so the Anemll image runs the slow decode path.",
        "Set VLLM_USE_BREAKABLE_CUDAGRAPH=0 in the env file and pass it in the compose environment: map, then restart.",
        "env",
        "Check the live container's environment for VLLM_USE_BREAKABLE_CUDAGRAPH.",
        (BREAKABLE_ON,),
        vocabulary=(
            "breakable cudagraph auto-enables",
            "breakable CUDA graphs",
            "VLLM_USE_BREAKABLE_CUDAGRAPH=0",
            "disabling vLLM's torch.compile pipeline",
            "decode throughput drops",
            "degrades as output grows",
            "max_tokens",
            "breakable on",
            "breakable off",
            "throughput raised",
        ),
    ),
    Symptom(
        "P04",
        "Sticky UMA memory after stop",
        "`free` after a stop still shows many GiB used with no container running.",
        "Unified memory the stopped lane held was not given back (page cache and driver allocations stay).",
        "Drop the page cache on every node (or reboot) before launching again; never `docker system prune -af`.",
        "stop",
        "Run `docker ps` and `free -g` on every node: with no container, used memory should fall to a few GiB.",
        (FREE_MEM, NO_CONTAINER),
        vocabulary=("used memory after stop", "memory not given back", "free -g", "no container running"),
    ),
    Symptom(
        "P07",
        "KV cache too small for 1M context",
        "Startup stops with \"To serve at least one request with the model's max seq len (1048576), (… GiB KV cache is "
        'needed, which is larger than the available KV cache memory (… GiB)".',
        "GPU_MEMORY_UTILIZATION leaves too little KV room for MAX_MODEL_LEN=1048576 (0.80 on the operators' pair).",
        "GPU_MEMORY_UTILIZATION=0.85 (the profile key the launcher reads), clean SHM and page cache, launch again.",
        "env",
        "Compare the two GiB figures in the message: a small gap is the 0.80 vs 0.85 case.",
        (KV_SHORT,),
        vocabulary=("max model len 1048576", "1M context", "GPU_MEMORY_UTILIZATION 0.80", "KV cache memory"),
    ),
    Symptom(
        "P08",
        "A rank bound to the wrong address",
        'NCCL fails at init with "unhandled system error" while the ranks try to connect.',
        "A rank's VLLM_HOST_IP or GLOO/NCCL socket interface points at loopback or the wrong port, so the other node "
        "cannot reach it.",
        "Per-rank VLLM_HOST_IP (each node's RoCE IP) and GLOO/NCCL/TP_SOCKET_IFNAME on the RoCE interface.",
        "env",
        "`lanebook lint --lane LANE` (P08) and the env of both containers: each rank's own RoCE IP, not 127.0.0.1.",
        (GLOO_LOOPBACK, GLOO_MESH, SOCKET_RETRY),
        vocabulary=(
            "Gloo connectFullMesh failed",
            "remote 127.0.0.1 loopback",
            "Using the loopback address as fallback",
            "GLOO_SOCKET_IFNAME",
            "NCCL_SOCKET_IFNAME",
            "VLLM_HOST_IP",
            "interface",
            "bind",
            "rendezvous never binds",
            "tunnel interface VPN",
            "unable to resolve hostname",
            "exclusion list concrete interface name",
        ),
    ),
    Symptom(
        "P10",
        "Thinking turned on by a string",
        "A reply that should have no reasoning carries reasoning text, and its content is empty.",
        'chat_template_kwargs.thinking was sent as the string "false": any non-empty string turns thinking on.',
        "Send thinking: false as a JSON boolean in the request and in Hermes extra_body.",
        "gates",
        'The request body: `"thinking": "false"` (quoted) is this pitfall; a boolean false points elsewhere (D08).',
    ),
    Symptom(
        "P11",
        "Cold bind SHM timeouts",
        'SHM "No available shared memory broadcast block found in 60 seconds" lines before "Application startup '
        'complete".',
        "A cold bind (TileLang/autotune, weight loading) keeps one rank busy for minutes; the other rank's broadcast "
        "waits and logs each minute. Harmless while the start is still in progress.",
        "Wait for Application startup complete and a live /v1/models (WAIT_ATTEMPTS=120 × WAIT_SECONDS=15).",
        "launch",
        "If no Application startup complete follows within ~15 minutes, treat it as a hang (D01).",
        (SHM_TIMEOUT,),
        kind=NOTE,
    ),
    Symptom(
        "P12",
        "First-use JIT during inference",
        'Worker logs "Triton kernel JIT compilation during inference: KERNEL. This causes a latency spike".',
        "A request shape the warmup did not touch compiles a kernel while serving: a latency event on the first burst.",
        "Keep POST_READINESS_WARMUP_ENABLED=1 so the bounded warmup compiles the production shapes before traffic.",
        "warmup",
        "Was the post-readiness warmup enabled and did it finish? A JIT for a shape it does not cover is a blip only.",
        (
            Pattern(
                "jit_inference",
                LOG,
                r"Triton kernel JIT compilation during inference: (?P<kernel>\w+)",
                ("Triton kernel",),
            ),
            WARMUP_OFF,
        ),
    ),
    Symptom(
        "P13",
        "Legacy serving unit active",
        "A legacy/Aiden serving unit is active, or compose cannot bind the API port because it is taken.",
        "An older serving unit holds the GPU or port 8888 and fights the compose project.",
        "Stop and mask the legacy units on every node, then launch again.",
        "launch",
        "`systemctl list-units --state=active | grep -i -E 'aiden|legacy|vllm'` and `ss -ltnp | grep 8888` on the "
        "head.",
        (
            Pattern(
                "legacy_unit",
                LOG,
                r"(?i)\b(aiden|legacy)[\w.-]*\.service\b.*\b(active \(running\)|active\s+running|Started)\b",
                (".service",),
            ),
            Pattern(
                "port_taken",
                LOG,
                r"Bind for [\d.]+:\d+ failed: port is already allocated|address already in use",
                ("port is already allocated", "address already in use"),
            ),
        ),
    ),
    Symptom(
        "P15",
        "Long cold prefill over memory",
        "The kernel log shows NVRM NV_ERR_NO_MEMORY while the lane serves; the head may hard-reset.",
        "A very long cold prompt (≥128k) pushed unified memory past what the driver could allocate.",
        "Step long probes up gradually and watch the console; keep ≥128k cold needles off the sole production head.",
        "diagnose",
        "The prompt length of the requests in flight just before the NVRM line (journal of the previous boot too).",
        (NVRM_NOMEM,),
        vocabulary=(
            "long prefill",
            "token prefill",
            "hard-resets",
            "head hard reset",
            "long context prompt",
            "NV_ERR_NO_MEMORY",
            "shorter prompts complete",
            "worker stays online",
        ),
        figures=(Figure("prompt length", r"(?P<v>\d+)\s*[Kk][- ]token", at_least=128),),
    ),
    Symptom(
        "P16",
        "Head died mid-TP, worker orphaned",
        "The worker rank logs that its peer went away (connection reset, broken pipe, TCPStore) while it keeps "
        "running.",
        "The head (rank 0) died; a worker (rank 1..N-1) still holds its GPU memory and will block the next launch.",
        "Stop every orphaned worker at once; clean SHM and page cache on every node; restore from the head.",
        "stop",
        "`docker ps` on each worker: a vLLM container still up with the head's container gone is the orphan.",
        (
            Pattern(
                "peer_lost",
                LOG,
                r"Connection reset by peer|Broken pipe|recvValue failed|TCPStore.*(closed|failed)|"
                r"heartbeat monitor|Failed to recv|peer closed",
                (
                    "Connection reset",
                    "Broken pipe",
                    "recvValue",
                    "TCPStore",
                    "heartbeat",
                    "Failed to recv",
                    "peer closed",
                ),
            ),
        ),
    ),
    # --- classes learnt from public reports (D…) ----------------------------------------------------------
    Symptom(
        "D01",
        "TP pair hang",
        'After readiness, SHM "No available shared memory broadcast block found in 60 seconds" lines repeat; '
        "requests stay Running while generation stops; /health can still answer 200.",
        "One rank stopped making progress (a wedged worker, a stuck collective) and the other waits on it forever.",
        "Stop the lane on every node, clean SHM and page cache, launch again; keep the worker's log for the report.",
        "stop",
        "Two /metrics scrapes a few seconds apart: vllm:num_requests_running > 0 with vllm:generation_tokens_total "
        "not moving is a hang; moving tokens mean a slow compile (P12) instead.",
        (SHM_TIMEOUT, ENGINE_STATS),
        vocabulary=(
            "hang",
            "stuck",
            "load test gets stuck",
            "stops producing",
            "stability test",
            "nothing generated",
            "No available shared memory broadcast block",
            "requests stay running",
        ),
        metrics="vllm:num_requests_running > 0 in both scrapes while vllm:generation_tokens_total does not move",
        source="https://github.com/vllm-project/vllm/pull/41834",
    ),
    Symptom(
        "D02",
        "Engine died",
        'The API log shows "EngineDeadError" or "EngineCore encountered a fatal error", or a worker "died '
        'unexpectedly".',
        "The engine core or a TP worker process exited mid-serve (a CUDA fault, an all-reduce error, a JIT failure); "
        "every request in flight fails.",
        "Stop every node, clean SHM and page cache, launch again; read the first ERROR above the EngineDeadError for "
        "the root cause.",
        "launch",
        "The first traceback before the EngineDeadError: a Triton JIT line just before it points to P12, an illegal "
        "memory access to the kernels, an NCCL error to the RoCE link (D05).",
        (
            Pattern(
                "engine_dead",
                LOG,
                r"EngineDeadError|EngineCore encountered a fatal error|Worker proc \S+ died unexpectedly|"
                r"EngineCore failed to start",
                ("EngineDeadError", "EngineCore encountered", "died unexpectedly", "EngineCore failed"),
            ),
        ),
        vocabulary=(
            "died mid-serve",
            "after minutes of normal serving",
            "worker exits",
            "EngineDeadError",
            "engine core died",
            "stops serving",
            "every request fails",
        ),
        source="https://github.com/eugr/spark-vllm-docker/issues/348",
    ),
    Symptom(
        "D03",
        "Rank 1 never joins",
        "Startup waits on the rendezvous and fails: DistStoreError, or a timeout with fewer clients joined than the "
        "world size.",
        "The worker rank never reached the head's store: it was not started, or it cannot reach the head's address.",
        "Start the worker through the launcher (never by hand), check each rank's VLLM_HOST_IP and socket IFNAMEs, "
        "launch again from the head.",
        "launch",
        "Is the worker container running, and does `ping`/`nc` from the worker reach the head's RoCE IP and port?",
        (
            Pattern(
                "rendezvous_timeout",
                LOG,
                r"DistStoreError|Timed out after \d+ seconds waiting for clients",
                ("DistStoreError", "waiting for clients"),
            ),
        ),
        vocabulary=(
            "rank 1 never joins",
            "clients joined",
            "TCP rendezvous",
            "world_size=2",
            "no-Ray cluster",
            "worker never reached the head",
        ),
        source="https://github.com/eugr/spark-vllm-docker/issues/336",
    ),
    Symptom(
        "D04",
        "Low speculative acceptance",
        "SpecDecoding metrics show a mean acceptance length far under the drafter's normal (~4 at K=5), or "
        "per-position acceptance near zero.",
        "The drafter proposes tokens the target rejects: mismatched or wrongly loaded draft weights, or a broken "
        "draft path; decode falls back toward one token per step.",
        "Check that the drafter matches the target weights (same release), restore the recipe's SPECULATIVE_CONFIG, "
        "launch again.",
        "env",
        "Measure with natural prompts at temperature 0 (the count canary): if acceptance recovers, the workload "
        "(random-token prompts) was the cause, not the lane.",
        (SPEC_LINE,),
        vocabulary=(
            "speculative acceptance",
            "draft acceptance collapses",
            "mean acceptance length",
            "per-position acceptance",
            "num_speculative_tokens",
            "drafter",
            "DSpark",
            "MTP",
            "acceptance rate",
            "speculation net-harmful",
        ),
        figures=(
            Figure("acceptance %", r"acceptance\D{0,40}?(?P<v>\d+(?:\.\d+)?)\s*%", below=30.0),
            Figure(
                "acceptance rate",
                r"acceptance (?:rate )?(?:falls )?(?:from [\d.]+ )?(?:\w+ ){0,4}to (?P<v>0\.\d+)",
                below=0.3,
            ),
            Figure("mean acceptance length", r"mean acceptance length\D{0,12}(?P<v>\d+(?:\.\d+)?)", below=1.6),
            Figure(
                "acceptance in words",
                r"acceptance (?:sat|stayed|stuck) at (?:a |about )?(?P<v>quarter|third|fifth)",
                below=30.0,
            ),
        ),
        counter=(
            Figure("acceptance %", r"acceptance\D{0,40}?(?P<v>\d+(?:\.\d+)?)\s*%", at_least=40.0),
            Figure("mean acceptance length", r"mean acceptance length\D{0,12}(?P<v>\d+(?:\.\d+)?)", at_least=2.5),
        ),
        metrics="accepted / draft tokens between two scrapes, and vllm:spec_decode_num_accepted_tokens_per_pos_total "
        "/ drafts per position",
        source="https://github.com/vllm-project/vllm-ascend/issues/13640",
    ),
    Symptom(
        "D05",
        "RoCE link settings differ or drifted",
        "NCCL fails at init (unhandled system error, ibv_modify_qp failed) or completions time out (error 12, "
        "IBV_WC_RETRY_EXC_ERR); the RoCE link's MTU differs between the nodes.",
        "A pinned NCCL_IB_GID_INDEX no longer points at the RoCEv2 IPv4 GID on one node (GID tables reshuffle after "
        "link events), or a reboot left the RoCE link at a different MTU.",
        "Leave NCCL_IB_GID_INDEX unset (or per rank), set MTU 9000 on both RoCE ports, persist it, launch again.",
        "launch",
        "`show_gids` on every node (the index of the v2 row with the RoCE IPv4) and `ip link` MTU on both RoCE ports.",
        (
            Pattern(
                "nccl_init_error",
                LOG,
                r"NCCL error.*unhandled system error|ibv_modify_qp failed|Got completion (from peer .*)?with error 12|"
                r"IBV_WC_RETRY_EXC_ERR",
                ("NCCL error", "ibv_modify_qp", "error 12", "IBV_WC_RETRY"),
            ),
            IP_LINK,
        ),
        vocabulary=(
            "NCCL_IB_GID_INDEX",
            "GID index",
            "RoCE",
            "RoCEv2",
            "show_gids",
            "MTU",
            "error 12 timeout",
            "NICs cannot talk",
            "fabric",
        ),
        source="https://github.com/tonyd2wild/DeepSeek-v4-Flash-Vision-Exp-DSpark-1M-NVFP4-KV-2x-DGX-Spark/pull/40",
    ),
    Symptom(
        "D06",
        "Out of memory at startup",
        "Startup dies with CUDA out of memory, a KV cache too small for the max seq len, or an NVRM NV_ERR_NO_MEMORY "
        'right after "Loading drafter model...".',
        "Weights, drafter and KV reservation do not fit the node's unified memory with what is already held (page "
        "cache, a previous lane, another process).",
        "Clean SHM and page cache on every node, check nothing else holds memory, then launch with the lane's "
        "GPU_MEMORY_UTILIZATION (lower MAX_MODEL_LEN only as a last resort).",
        "launch",
        "`free -g` on every node just before the launch: several GiB already used means P04 (sticky memory) first.",
        (
            KV_SHORT,
            CUDA_OOM,
            NVRM_NOMEM,
            DRAFTER_LOAD,
        ),
        vocabulary=(
            "out of memory at startup",
            "gpu-memory-utilization",
            "gpu_memory_utilization",
            "KV cache is needed",
            "max seq len",
            "max_model_len",
            "Engine core initialization failed",
            "run out of memory during startup",
            "Failed core proc(s)",
        ),
        source="https://github.com/eugr/spark-vllm-docker/issues/336",
    ),
    Symptom(
        "D07",
        "Tool call cut by max_tokens",
        'A reply ends with finish_reason "length" (or "tool_calls") and a tool call whose arguments are not complete '
        'JSON; Hermes says "Truncated tool call detected".',
        "Reasoning and the tool call's arguments used up max_tokens: the call was cut mid-argument.",
        "Send an explicit, larger max_tokens from the client (the agent's provider profile), or turn thinking off "
        "with a JSON boolean.",
        "gates",
        "The reply's usage.completion_tokens: equal to the request's max_tokens confirms the cap.",
        (
            Pattern(
                "hermes_truncated", LOG, r"Truncated tool call (detected|response detected)", ("Truncated tool call",)
            ),
        ),
        source="https://github.com/NousResearch/hermes-agent/issues/93156",
    ),
    Symptom(
        "D08",
        "Empty content while thinking never closes",
        'A reply has reasoning text but empty or null content; finish_reason is "length".',
        "The reasoning block never closed before max_tokens ran out, so nothing reached content.",
        "Raise max_tokens for reasoning requests, or send thinking: false as a JSON boolean where no reasoning is "
        "wanted.",
        "gates",
        'finish_reason: "length" is the cap; "stop" with reasoning and no content points to thinking turned on by '
        "a string (P10) or a parser fault (D10).",
        source="https://github.com/vllm-project/vllm/issues/52640",
    ),
    Symptom(
        "D09",
        "Driver allocation failure after a kernel change",
        "NVRM NV_ERR_NO_MEMORY in the kernel log within seconds of the ranks' NCCL rendezvous, before any request; "
        "the host can wedge without an OOM kill.",
        "A kernel update under an unchanged driver package broke unified-memory allocation on GB10.",
        "Boot the previous kernel (the one the lane last ran on) and hold the kernel package until it is validated.",
        "rollback",
        "`uname -r` against the kernel of the last good boot (`journalctl --list-boots`, `journalctl -k -b -1`).",
        (NVRM_NOMEM,),
        vocabulary=(
            "NV_ERR_NO_MEMORY",
            "within seconds of the NCCL rendezvous",
            "before any request",
            "kernel update",
            "driver package unchanged",
            "engine initialization",
            "no request is served",
            "host wedge",
        ),
        figures=(KERNEL_VERSION,),
        source="https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1358",
    ),
    Symptom(
        "D10",
        "Markers leak into the reply",
        "A reply's content or reasoning holds raw model markers: <｜DSML｜…> tool-call markup or </think>.",
        "The tool-call or reasoning parser did not take the markup out: the parser flags are missing, or the model "
        "emitted malformed markup the parser could not read.",
        "Serve with --tool-call-parser deepseek_v4 --reasoning-parser deepseek_v4 (the recipe's command) and restart.",
        "gates",
        "The live `vllm serve` command: are both parser flags there? If so, the leak is the parser's, not the lane's.",
        source="https://github.com/vllm-project/vllm/issues/40801",
    ),
    Symptom(
        "D11",
        "One decode lane starved by long prefills",
        "Concurrent requests decode at very different rates (one crawls) while the server reports no preemption and "
        "no waiting queue.",
        "A long chunked prefill takes the step's token budget; every decoding request gets one token per step while "
        "it runs.",
        "Bound long prefill chunks (--long-prefill-token-threshold) and keep very long cold prompts out of "
        "interactive slots.",
        "speed",
        "vllm:num_preemptions_total between two scrapes: preemptions mean KV pressure, not starvation.",
        (ENGINE_STATS,),
        metrics="vllm:num_preemptions_total does not move while per-request decode rates spread",
        source="https://github.com/vllm-project/vllm/issues/54919",
    ),
    Symptom(
        "D12",
        "PCIe AER fault and soft lockups",
        'The kernel log shows "AER: Uncorrectable (Fatal) error", mlx5 PCI error recovery, and "watchdog: BUG: soft '
        'lockup - CPU#N stuck".',
        "The ConnectX-7 PCIe link failed; AER recovery wedged and locked CPUs, so the API went down with it.",
        "Reboot the node; if it recurs, reseat/check the CX-7 and its firmware before serving again.",
        "diagnose",
        "Whether the AER lines come before the first failed request (hardware first) or after it.",
        (
            Pattern(
                "aer_fatal",
                KERNEL,
                r"AER: (?:Multiple )?Uncorrect\w* \(Fatal\)|severity=Uncorrected \(Fatal\)",
                ("(Fatal)",),
            ),
            Pattern("soft_lockup", KERNEL, r"watchdog: BUG: soft lockup - CPU#\d+ stuck for \d+s", ("soft lockup",)),
            Pattern(
                "mlx5_recovery",
                KERNEL,
                r"mlx5_core .*(mlx5_pci_err_detected|mlx5_pci_slot_reset)",
                ("mlx5_pci_err_detected", "mlx5_pci_slot_reset"),
            ),
        ),
        vocabulary=(
            "PCIe AER fatal",
            "ConnectX-7",
            "PCI error recovery",
            "soft lockup",
            "device recovery failed",
            "Transaction Layer",
        ),
        source="https://github.com/MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark/issues/146",
    ),
    Symptom(
        "D13",
        "Weights incomplete on a node",
        "A node's copy of the model lacks a shard its model.safetensors.index.json names (absent, or its snapshot "
        "link dangling), or holds *.incomplete blobs from an interrupted download.",
        "A download or copy stopped part way: the snapshot has fewer shards than the index maps, so the rank on that "
        "node cannot load every tensor (it fails at load, or loads with tensors missing).",
        "Run the `weights` runbook: it verifies every node, resumes the copy from the head with rsync --partial and "
        "deletes only *.incomplete files, never weights.",
        "weights",
        "`lanebook run weights --lane LANE` verifies each node's tree shard by shard before it copies anything.",
        (
            Pattern("shard_absent", LOG, r"^shard absent: \S+", ("shard absent",)),
            Pattern("shard_dangling", LOG, r"^shard link dangling: \S+", ("shard link",)),
            Pattern("incomplete_blob", LOG, r"^incomplete blob: \S+\.incomplete\b", ("incomplete blob",)),
            Pattern("broken_link", LOG, r"^broken: \S+/snapshots/\S+", ("broken: ",)),
        ),
        source="https://github.com/tenstorrent/tt-inference-server/issues/4986",
    ),
    Symptom(
        "D14",
        "A node cannot be reached over SSH",
        "Every read on a node fails before it runs: the SSH connection is refused, times out or finds no route.",
        "The node is down, its sshd is not running, or the address the lane file gives is not the node's.",
        "Bring the node back (power, network, `systemctl start ssh`), check its address in the lane file, then run "
        "`status`.",
        "status",
        "`ssh NODE true` from this machine, and `ping` the node's address: no answer at all means the node or the "
        "network is down; a refused connection means sshd is not running.",
        (
            Pattern(
                "ssh_unreachable",
                LOG,
                r"^(?P<node>\S+) \([^)]*\) unreachable: |ssh: connect to host (?P<host>\S+) port \d+: "
                r"(Connection refused|Connection timed out|No route to host)",
                (" unreachable: ", "ssh: connect to host"),
            ),
        ),
        vocabulary=("ssh connection timed out", "image distribution failed", "host unreachable", "port 22"),
        source="https://github.com/spark-arena/sparkrun/issues/157",
    ),
    Symptom(
        "D15",
        "Engine processes spin-wait on the CPU",
        "With TP≥2, the vLLM engine processes (VLLM::EngineCore, VLLM::Worker_TP*) hold 3-4 CPU cores at ~100% "
        "(~300-400% CPU together), even with no request running; the SoC runs hot (up to ~95 °C, hard shutdown at "
        "104.8 °C) while the GPU stays cooler.",
        "vLLM's shared-memory message queue (shm_broadcast SpinCondition) spins in sched_yield for busy_loop_s (1 s) "
        "after each read before it sleeps; decode steps arrive well within 1 s, so the readers never sleep and the "
        "cores burn at full clock for nothing. The mp executor (TP≥2) forms this path; TP=1 does not.",
        "Apply the recipe's GB10 spin-wait hotfix (busy_loop_s 1 s -> 2 ms, run by the compose entrypoint; "
        "DSPARK_SKIP_SPIN_WAIT_HOTFIX / DSPARK_SKIP_SPINWAIT_HOTFIX must not be 1), or on a vLLM that exposes the "
        "window set VLLM_MQ_SPIN_SECONDS=0.002; then stop and launch again through the launcher.",
        "launch",
        "`mpstat -P ALL 1 5` on the node (3-4 cores pinned near 100% while the rest idle is the spin), the SoC "
        "temperature against the GPU's, and the container log for the hotfix's line (`[OK] busy_loop_s = 0.002`); "
        "then read again with the queues idle: engine processes still hot with nothing running is the spin.",
        (
            ENGINE_CPU,
            TP_SIZE,
            Pattern(
                "spin_fix_on",
                LOG,
                r"\[OK\] busy_loop_s (= 0\.002|1 -> 0\.002)|\[skip\] busy_loop_s already set to 0\.002|"
                r"\[gb10-spinwait\] (patched busy_loop_s|already applied)|VLLM_MQ_SPIN_SECONDS=(0|0?\.\d+)\b",
                ("busy_loop_s", "gb10-spinwait", "VLLM_MQ_SPIN_SECONDS"),
            ),
            Pattern(
                "spin_fix_off",
                LOG,
                r"\[FAIL\] busy_loop_s not set to 0\.002|Could not locate 'busy_loop_s: float = 1'|"
                r"\[gb10-spinwait\] .*(refusing to patch|not found; skipping)",
                ("busy_loop_s", "gb10-spinwait"),
            ),
        ),
        metrics="vllm:num_requests_running 0 in both scrapes and vllm:generation_tokens_total not moving (idle) while "
        "the engine processes' CPU is high",
        source="https://github.com/MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark/issues/79",
    ),
    Symptom(
        "D16",
        "Host IPC removed under the lane",
        "A rank cannot attach the shared-memory ring buffer or a /dev/shm segment that existed a moment before "
        '(ATTACH_MISSING, "could not open shared memory segment", No such file or directory under /dev/shm), often '
        "when an ssh session of the same user closes.",
        "systemd-logind with RemoveIPC=yes (Ubuntu's default) deletes every IPC object a user owns when that user's "
        "last login session ends; a lane running as a login user loses its /dev/shm segments mid-start or mid-serve.",
        "Set RemoveIPC=no in /etc/systemd/logind.conf and restart systemd-logind (or `loginctl enable-linger` the "
        "lane's user), then stop the lane on every node and launch again.",
        "launch",
        "`loginctl show-user $USER --property=Linger` and `grep RemoveIPC /etc/systemd/logind.conf` on every node; "
        "`journalctl -u systemd-logind` for a Removed session at the time of the failure.",
        (SHM_GONE, REMOVE_IPC),
        vocabulary=(
            "RemoveIPC",
            "systemd-logind",
            "logind removes IPC",
            "shared memory segment removed",
            "/dev/shm",
            "ssh session logout",
            "loginctl enable-linger",
            "login user",
            "shm segment deleted",
        ),
        source="https://github.com/vllm-project/vllm/issues/54259",
    ),
    Symptom(
        "D17",
        "RDMA locked-memory limit too low",
        'NCCL/UCX cannot register RDMA memory or create a completion queue: "Call to ibv_reg_mr… failed with error '
        'Cannot allocate memory", "ibv_create_cq() failed: Cannot allocate memory"; `ulimit -l` shows a small '
        "number (64, 8192) instead of unlimited.",
        "The process (or its container) may lock only a few MiB, and RDMA memory registration needs locked pages.",
        "Give the containers `ulimits: memlock: -1` (docker `--ulimit memlock=-1`) and the user an unlimited memlock "
        "in /etc/security/limits.conf, then launch again.",
        "launch",
        "`ulimit -l` inside the running container on every node (and `docker inspect` its Ulimits): anything but "
        "unlimited is this; unlimited points at the kernel instead (D20).",
        (IBV_NOMEM, MEMLOCK),
        vocabulary=(
            "ulimit -l",
            "max locked memory",
            "memlock",
            "limits.conf",
            "--ulimit memlock=-1",
            "ibv_reg_mr",
            "ibv_create_cq",
            "Cannot allocate memory",
            "locked memory limit",
        ),
        figures=(
            Figure(
                "locked-memory limit",
                r"(?:ulimit -l|max locked memory|lock only|can lock)\D{0,30}?(?P<v>\d+)",
                below=1_000_000,
            ),
        ),
        source="https://github.com/NVIDIA/nccl-tests/issues/206",
    ),
    Symptom(
        "D18",
        "CUDA-graph capture out of memory",
        "Startup gets past the KV-cache allocation and then dies while capturing CUDA graphs: "
        "torch.OutOfMemoryError or "
        '"CUDA error: out of memory" under capture_end / capture_model, right after "Capturing CUDA graphs".',
        "The graphs' own memory was not (or not enough) reserved when the KV pool was sized, so the capture runs out "
        "of what gpu_memory_utilization left.",
        "Lower GPU_MEMORY_UTILIZATION a step (0.98 -> 0.97, or the recipe's value), or capture fewer sizes "
        "(cudagraph_capture_sizes), then launch again.",
        "env",
        "The last lines before the OOM: a capture progress bar or capture_end frame is this; an OOM while loading "
        "weights is D06.",
        (CUDA_OOM, GRAPH_CAPTURE),
        vocabulary=(
            "CUDA graph capture",
            "out of memory while capturing",
            "capture_model",
            "capture_end",
            "cudagraph memory estimate",
            "profile_cudagraph_memory",
            "graph capture OOM",
            "gpu-memory-utilization too high",
            "cudagraph_capture_sizes",
            "enforce eager",
        ),
        source="https://github.com/vllm-project/vllm/issues/57475",
    ),
    Symptom(
        "D19",
        "Image or checkpoint does not match the recipe",
        'Startup fails on code that is not there for this GPU or this checkpoint: "no kernel image is available for '
        'execution on the device", "This kernel only supports sm120", or "Model config must specify … for parallel '
        'drafting".',
        "The container image was built for another GPU architecture (GB10 is sm_121), or the weights are not the "
        "checkpoint the recipe's speculative config was written for.",
        "Use the image and the checkpoint the recipe names (the lane file's image and MODEL), or build the image for "
        "sm_121; then launch again.",
        "rollback",
        "`docker image inspect` on each node against the lane file's image, and the checkpoint's config.json against "
        "the recipe's model: a different build or model is this.",
        (IMAGE_MISMATCH,),
        vocabulary=(
            "no kernel image is available",
            "sm_121",
            "SM12.1",
            "sm120",
            "built for",
            "CUDA arch",
            "image does not match",
            "checkpoint",
            "parallel drafting",
            "mask_token_id",
            "NVFP4 checkpoint",
            "wrong image",
            "arch list",
        ),
        source="https://github.com/eugr/spark-vllm-docker/issues/143",
    ),
    Symptom(
        "D20",
        "A kernel or driver update broke the RoCE link",
        'After an update and a reboot the lane no longer starts: NCCL init fails with ibv_reg_mr_iova2 "Cannot '
        'allocate memory" (ENOMEM) on every rank, or GPU Direct RDMA is disabled; the same image ran before, and '
        "booting the previous kernel works.",
        "A kernel (7.0.0-1019-nvidia, HWE 7.0.0-31) or driver-module change under an unchanged image regressed RDMA "
        "memory registration.",
        "Boot the last kernel the lane ran on (GRUB's previous entry), hold the kernel packages, and report the "
        "versions; launch again.",
        "rollback",
        "`uname -r` now against the last good boot (`journalctl --list-boots`, `journalctl -k -b -1 | head -1`) and "
        "`apt history`: a new kernel since the last good start is this.",
        (IBV_NOMEM, KERNEL_NAMED),
        vocabulary=(
            "kernel regression",
            "kernel update",
            "system update",
            "unattended-upgrades",
            "booting back",
            "works with 6.17",
            "ibv_reg_mr_iova2 ENOMEM",
            "NCCL ENOMEM at init",
            "GPU Direct RDMA Disabled",
            "nvidia-peermem",
            "DGX OS upgrade",
            "rebooting",
            "previous kernel",
        ),
        figures=(KERNEL_VERSION,),
        source="https://github.com/MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks/issues/14",
    ),
    Symptom(
        "D21",
        "Page cache refuses the start on unified memory",
        'Startup refuses to begin or dies while loading weights although nothing else runs: "Free memory on device '
        '(X/121.69 GiB) on startup is less than desired GPU memory utilization", or loading slows and dies at 70-97 % '
        "with buff/cache near the memory size.",
        "On unified memory the GPU's free memory is MemFree: clean page cache (the checkpoint just read or copied) "
        "counts as used, so vLLM's admission check and its memory profile see too little.",
        "Drop the page cache on every node just before the launch (`sync; echo 3 | sudo tee /proc/sys/vm/drop_caches`, "
        "or evict the checkpoint's pages), then launch again.",
        "launch",
        "`free -g` on every node: a large buff/cache with little used by processes is this; memory used by a process "
        "that should not run points at D22 or P04.",
        (FREE_ADMISSION,),
        vocabulary=(
            "page cache",
            "drop_caches",
            "buff/cache",
            "MemFree",
            "MemAvailable",
            "unified memory",
            "UMA",
            "cold load",
            "weight loading",
            "cudaMemGetInfo",
            "reclaimable",
            "posix_fadvise",
            "KV-cache budget negative",
            "cached attempt passes",
            "non-torch memory",
        ),
        figures=(Figure("buff/cache", r"buff/cache\D{0,12}(?P<v>\d+)", at_least=20),),
        source="https://github.com/vllm-project/vllm/issues/48140",
    ),
    Symptom(
        "D22",
        "Orphaned workers hold memory after the container is gone",
        "After `docker rm -f` (or a stop) nvidia-smi still lists VLLM::Worker / EngineCore processes holding many GiB "
        "that `docker ps` does not show; the next start fails for free memory.",
        "A worker or engine child process outlived its container (or a container outlived its job) and keeps its "
        "memory until it is killed.",
        "Find the processes (`nvidia-smi --query-compute-apps=pid,used_memory,name --format=csv`, `ps -eo "
        "pid,cmd | grep VLLM`) on every node and kill them, then run `stop` and launch again.",
        "stop",
        "nvidia-smi's compute processes against `docker ps` on every node: a vLLM process with no container is this.",
        (FREE_ADMISSION,),
        vocabulary=(
            "orphaned",
            "orphan",
            "docker rm -f",
            "invisible to docker ps",
            "visible in nvidia-smi",
            "kill -9",
            "still holding",
            "VLLM::Worker processes remain",
            "container was never deleted",
            "cancelled job",
            "SIGKILL",
        ),
        source="https://github.com/vllm-project/vllm-omni/issues/2317",
    ),
    Symptom(
        "D23",
        "Autotune choices differ across ranks",
        "With TP, ranks pick different kernel tactics for the same shape: per-rank autotune caches differ, the capture "
        "hangs at a fixed step on a straggler rank, or decode is slower by the slowest rank's tactic.",
        "FlashInfer's autotuner times tactics on each rank alone; timing noise makes the ranks choose differently, "
        "and collectives that need the same sizes on every rank wait forever or run at the slowest rank's pace.",
        "Turn the autotune off (--no-enable-flashinfer-autotune) or load one shared tuned config on every rank, then "
        "launch again.",
        "launch",
        "Compare the per-rank autotune caches (the same file on each node): any difference is this.",
        vocabulary=(
            "autotune",
            "autotuner",
            "tactic",
            "divergent tactics",
            "per rank",
            "across ranks",
            "straggler rank",
            "tactic caches",
            "symmetric memory",
            "choose_one",
            "set_autotune_process_group",
            "tile size",
        ),
        source="https://github.com/flashinfer-ai/flashinfer/issues/3186",
    ),
    # --- look-alikes (H…): recognised and reported as harmless ---------------------------------------------
    Symptom(
        "H01",
        "Warnings every healthy start prints",
        "UserWarnings like TensorFloat32 not enabled, and the mlx5 27 W power notice in the kernel log.",
        "They appear on every healthy start and say nothing about this lane's health.",
        "Nothing to do.",
        "status",
        "",
        (
            Pattern(
                "tf32_warning",
                LOG,
                r"TensorFloat32 tensor cores for float32 matrix multiplication available",
                ("TensorFloat32",),
            ),
            Pattern("mlx5_27w", KERNEL, r"mlx5_core .*27W", ("27W",)),
            Pattern("few_sms", LOG, r"Not enough SMs to use max_autotune_gemm", ("Not enough SMs",)),
        ),
        source="https://github.com/vllm-project/vllm/pull/40899",
        kind=NOTE,
        vocabulary=("TensorFloat32", "Not enough SMs to use max_autotune_gemm", "warning", "what the warning means"),
    ),
    Symptom(
        "H02",
        "Random-token benchmark prompts",
        "Low acceptance while a benchmark with random-token prompts runs (--dataset-name random).",
        "Random tokens are not text a drafter can predict: acceptance falls for the workload, not for the lane.",
        "Measure acceptance with natural prompts (the count canary, the code and prose workloads).",
        "speed",
        "",
        (RANDOM_BENCH,),
        source="https://github.com/vllm-project/vllm/issues/52536",
        kind=NOTE,
    ),
    Symptom(
        "H03",
        "Memory dip during warmup",
        "`free` shows memory used high while the post-readiness warmup runs.",
        "The warmup's bounded prefill and C4/C6 shapes allocate activations for a moment; it is given back after.",
        "Nothing to do; read memory again after the warmup has finished.",
        "warmup",
        "",
        (FREE_MEM,),
        source="no public report: the recipe's post-readiness warmup (seed 000) and lanebook's reading of it",
        kind=NOTE,
    ),
)
