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

from dataclasses import dataclass
from typing import Optional

LOG, KERNEL = "log", "kernel"  # where a pattern is looked for: a container/launcher log, or dmesg/journalctl -k
FINDING, NOTE = "finding", "note"  # a fault class, or a harmless look-alike


@dataclass(frozen=True)
class Pattern:
    key: str  # the name the doctor's rules use
    stream: str  # LOG | KERNEL
    regex: str  # searched in each line (re.search), compiled once by the doctor


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


# The lines the doctor reads for context (which phase a line falls in), not evidence of any class by themselves.
READY = Pattern("ready", LOG, r"Application startup complete")
_WARMUP_DONE = r"\b(done|complete|completed|finished|passed|failed)\b"
WARMUP_START = Pattern("warmup_start", LOG, r"post-readiness[ -]warmup(?!.*" + _WARMUP_DONE + ")")
WARMUP_END = Pattern("warmup_end", LOG, r"warmup.*" + _WARMUP_DONE)
STOPPED = Pattern("stopped", LOG, r"stop-deepseek-v4-flash-dspark|Container \S+\s+(Stopped|Removed)\b")
DRAFTER_LOAD = Pattern("drafter_load", LOG, r"Loading drafter model")
WARMUP_OFF = Pattern(
    "warmup_off", LOG, r"POST_READINESS_WARMUP_ENABLED=0|post-readiness warmup (disabled|bypassed|skipped)"
)
RANDOM_BENCH = Pattern("random_bench", LOG, r"--dataset-name[ =]random\b|dataset_name['\"]?[:=] ?['\"]?random\b")
CONTEXT = (READY, WARMUP_START, WARMUP_END, STOPPED, DRAFTER_LOAD, WARMUP_OFF, RANDOM_BENCH)

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
)
SHM_TIMEOUT = Pattern("shm_timeout", LOG, r"No available shared memory broadcast block found in \d+ seconds?")
SPEC_LINE = Pattern(
    "spec_line",
    LOG,
    r"SpecDecoding metrics: Mean acceptance length: (?P<mal>[\d.]+),.*?Per-position acceptance rate: "
    r"(?P<pos>[\d., ]+?)(?:, Avg Draft acceptance rate: (?P<avg>[\d.]+)%)?\s*$",
)
ENGINE_STATS = Pattern(
    "engine_stats",
    LOG,
    r"Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, Avg generation throughput: (?P<gen>[\d.]+) tokens/s, "
    r"Running: (?P<running>\d+) reqs?, Waiting: (?P<waiting>\d+) reqs?",
)
NVRM_NOMEM = Pattern("nvrm_nomem", KERNEL, r"NVRM: .*Out of memory \[NV_ERR_NO_MEMORY\]")
FREE_MEM = Pattern("free_mem", LOG, r"^\s*Mem:\s+(?P<total>[\d.]+)(?P<unit>[GMK]i)?\s+(?P<used>[\d.]+)[GMK]?i?\s")
NO_CONTAINER = Pattern("no_container", LOG, r"Error: No such (object|container): (?P<name>\S+)")
IP_LINK = Pattern("ip_link", LOG, r"^\d+: (?P<ifname>[\w.@-]+): <[^>]*> mtu (?P<mtu>\d+)")
# A process row of `top -b` (PID USER PR NI VIRT RES SHR S %CPU %MEM TIME+ COMMAND) whose command is one of vLLM's
# engine processes, titled by vLLM (VLLM::EngineCore, VLLM::Worker_TP0, ...): its %CPU over the frame's interval.
ENGINE_CPU = Pattern(
    "engine_cpu",
    LOG,
    r"^\s*(?P<pid>\d+)\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+[RSDTtZI]\s+(?P<cpu>\d+(?:\.\d+)?)\s+\S+\s+\S+\s+"
    r"(?P<proc>(?:\w+::)?(?:EngineCore|Worker_TP)\S*|VLLM::\S+)",
)
# The tensor-parallel size in the live `vllm serve` command (docker top) or a saved command line.
TP_SIZE = Pattern("tp_size", LOG, r"(?:--tensor-parallel-size|\s-tp)[ =](?P<tp>\d+)\b")


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
        (
            Pattern(
                "kv_short_1m",
                LOG,
                r"max seq len \(1048576\), \((?P<need>[\d.]+) GiB KV cache is needed, which is larger than the "
                r"available KV cache memory \((?P<have>[\d.]+) GiB\)",
            ),
        ),
    ),
    Symptom(
        "P08",
        "A rank bound to the wrong address",
        'NCCL fails at init with "unhandled system error" while the ranks try to connect.',
        "A rank's VLLM_HOST_IP or GLOO/NCCL socket interface points at loopback or the wrong port, so the other node "
        "cannot reach it.",
        "Per-rank VLLM_HOST_IP (each node's fabric IP) and GLOO/NCCL/TP_SOCKET_IFNAME on the fabric interface.",
        "env",
        "`lanebook lint --lane LANE` (P08) and the env of both containers: each rank's own fabric IP, not 127.0.0.1.",
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
        (Pattern("jit_inference", LOG, r"Triton kernel JIT compilation during inference: (?P<kernel>\w+)"), WARMUP_OFF),
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
            ),
            Pattern("port_taken", LOG, r"Bind for [\d.]+:\d+ failed: port is already allocated|address already in use"),
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
        "memory access to the kernels, an NCCL error to the fabric (D05).",
        (
            Pattern(
                "engine_dead",
                LOG,
                r"EngineDeadError|EngineCore encountered a fatal error|Worker proc \S+ died unexpectedly|"
                r"EngineCore failed to start",
            ),
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
        "Is the worker container running, and does `ping`/`nc` from the worker reach the head's fabric IP and port?",
        (Pattern("rendezvous_timeout", LOG, r"DistStoreError|Timed out after \d+ seconds waiting for clients"),),
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
        metrics="accepted / draft tokens between two scrapes, and vllm:spec_decode_num_accepted_tokens_per_pos_total "
        "/ drafts per position",
        source="https://github.com/vllm-project/vllm-ascend/issues/13640",
    ),
    Symptom(
        "D05",
        "RoCE fabric settings differ or drifted",
        "NCCL fails at init (unhandled system error, ibv_modify_qp failed) or completions time out (error 12, "
        "IBV_WC_RETRY_EXC_ERR); the fabric MTU differs between the nodes.",
        "A pinned NCCL_IB_GID_INDEX no longer points at the RoCEv2 IPv4 GID on one node (GID tables reshuffle after "
        "link events), or a reboot left the fabric at a different MTU.",
        "Leave NCCL_IB_GID_INDEX unset (or per rank), set MTU 9000 on both fabric ports, persist it, launch again.",
        "launch",
        "`show_gids` on every node (the index of the v2 row with the fabric IPv4) and `ip link` MTU on both fabric "
        "ports.",
        (
            Pattern(
                "nccl_init_error",
                LOG,
                r"NCCL error.*unhandled system error|ibv_modify_qp failed|Got completion (from peer .*)?with error 12|"
                r"IBV_WC_RETRY_EXC_ERR",
            ),
            IP_LINK,
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
            Pattern(
                "kv_short",
                LOG,
                r"max seq len \((?!1048576\))\d+\), \([\d.]+ GiB KV cache is needed, which is larger than the "
                r"available KV cache memory",
            ),
            Pattern("cuda_oom", LOG, r"torch\.OutOfMemoryError|CUDA out of memory"),
            NVRM_NOMEM,
            DRAFTER_LOAD,
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
        (Pattern("hermes_truncated", LOG, r"Truncated tool call (detected|response detected)"),),
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
            Pattern("aer_fatal", KERNEL, r"AER: (Uncorrectable \(Fatal\)|.*severity=Uncorrected \(Fatal\))"),
            Pattern("soft_lockup", KERNEL, r"watchdog: BUG: soft lockup - CPU#\d+ stuck for \d+s"),
            Pattern("mlx5_recovery", KERNEL, r"mlx5_core .*(mlx5_pci_err_detected|mlx5_pci_slot_reset)"),
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
            Pattern("shard_absent", LOG, r"^shard absent: \S+"),
            Pattern("shard_dangling", LOG, r"^shard link dangling: \S+"),
            Pattern("incomplete_blob", LOG, r"^incomplete blob: \S+\.incomplete\b"),
            Pattern("broken_link", LOG, r"^broken: \S+/snapshots/\S+"),
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
            ),
        ),
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
            ),
            Pattern(
                "spin_fix_off",
                LOG,
                r"\[FAIL\] busy_loop_s not set to 0\.002|Could not locate 'busy_loop_s: float = 1'|"
                r"\[gb10-spinwait\] .*(refusing to patch|not found; skipping)",
            ),
        ),
        metrics="vllm:num_requests_running 0 in both scrapes and vllm:generation_tokens_total not moving (idle) while "
        "the engine processes' CPU is high",
        source="https://github.com/MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark/issues/79",
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
            Pattern("tf32_warning", LOG, r"TensorFloat32 tensor cores for float32 matrix multiplication available"),
            Pattern("mlx5_27w", KERNEL, r"mlx5_core .*27W"),
        ),
        source="https://github.com/vllm-project/vllm/pull/40899",
        kind=NOTE,
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


def symptom_by_id(symptom_id: str) -> Optional[Symptom]:
    return next((s for s in SYMPTOMS if s.id == symptom_id), None)
