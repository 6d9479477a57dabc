"""Folding pasted text into logical log lines (lanebook.verify.doctor_input): what wraps a message comes off, a message
cut over lines is joined, each logical line keeps its place and its original text. The property: a defining message
wrapped by a window, quoted, fenced, coloured or prefixed gives the doctor the same confirmed finding as the clean
line (fixed draws, as tests/test_input_properties.py; LANEBOOK_FUZZ=1 draws afresh)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lanebook.verify.doctor import diagnose, read_lines
from lanebook.verify.doctor_input import fold, is_prose

EXAMPLES = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=os.environ.get("LANEBOOK_FUZZ") != "1",
)

# One defining line per class, in the wording of the code that prints it (vLLM's kv_cache_utils and engine core,
# torch's Gloo, libibverbs through NCCL, the CUDA runtime, c10d's store, NCCL's IB transport, vLLM's config checks).
DEFINING = {
    "P07": "(EngineCore pid=316) ERROR 09-06 16:12:52 [core.py:708] ValueError: To serve at least one request with the "
    "model's max seq len (1048576), (46.52 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(41.07 GiB). Based on the available memory, the estimated maximum model length is 924288. Try increasing "
    "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
    "D06": "(EngineCore pid=88) ERROR 09-06 16:12:52 [core.py:708] ValueError: To serve at least one request with the "
    "model's max seq len (262144), (12.20 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(9.75 GiB). Based on the available memory, the estimated maximum model length is 209408.",
    "P08": "[rank1]:[E1204 22:50:01.164295950 ProcessGroupGloo.cpp:145] Gloo connectFullMesh failed with "
    "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152] timed out connecting: SO_ERROR: Connection refused, "
    "remote=[127.0.0.1]:29500 (rank=1, size=2, local=[127.0.0.1])",
    "D03": "(APIServer pid=71) torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/2 "
    "clients joined.",
    "D05": "spark2:1202:1290 [0] transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion from peer 10.0.0.1<38560> "
    "with error 12, opcode 0, len 0, vendor err 129",
    "D19": "(Worker_TP0 pid=554) ERROR 09-06 16:12:52 [multiproc_executor.py:944] RuntimeError: This kernel only "
    "supports sm120.",
}

PREFIXES = ["", "vllm-dspark-1  | ", "ds4-worker-1 | ", "Dec 04 22:50:01 spark1 docker[2211]: ", "[ 1234.567890] "]
QUOTES = ["", "> ", ">> ", "▎ ", "| "]
COLOURS = [("", ""), ("\x1b[31m", "\x1b[0m"), ("\x1b[1;33m", "\x1b[0m")]


def cut(text: str, width: int) -> list[str]:
    """A chat window's hard wrap at `width` characters; a cut is moved past a sentence's end (a line that ends a
    sentence reads as a line of its own, by design)."""
    rows, rest = [], text
    while len(rest) > width:
        at = width
        while at < len(rest) and rest[at - 1] in ".!?:;)":
            at += 1
        rows.append(rest[:at])
        rest = rest[at:]
    return rows + [rest] if rest else rows


def confirmed(text: str) -> set[str]:
    return set(diagnose(read_lines("post.md", text)).ids("confirmed"))


@EXAMPLES
@given(
    cause=st.sampled_from(sorted(DEFINING)),
    width=st.integers(min_value=60, max_value=140),
    wrapped=st.booleans(),
    prefix=st.sampled_from(PREFIXES),
    quote=st.sampled_from(QUOTES),
    colour=st.sampled_from(COLOURS),
    fenced=st.booleans(),
    every_line=st.booleans(),
)
def test_a_pasted_message_gives_the_same_finding_as_the_clean_line(
    cause, width, wrapped, prefix, quote, colour, fenced, every_line
):
    clean = DEFINING[cause]
    assert confirmed(clean) == {cause}
    rows = cut(prefix + clean, width) if wrapped else [prefix + clean]
    rows = [quote + (colour[0] + row + colour[1] if n == 0 or every_line else row) for n, row in enumerate(rows)]
    if fenced:
        rows = [quote + "```text", *rows, quote + "```"]
    post = "Our head says this when we start the pair:\n\n" + "\n".join(rows) + "\n\nAny idea?\n"
    assert confirmed(post) == {cause}


def test_prefixes_quotes_fences_and_colours_come_off_and_the_original_stays():
    text = "\n".join(
        [
            "> ```",
            "> vllm-dspark-1  | (Worker_TP1 pid=77) [rank1]:\x1b[31mERROR\x1b[0m 12-04 10:00:00 [x.py:1] boom",
            "> ```",
            "| id | value |",
            "|---|---|",
            "| a | b |",
        ]
    )
    lines = fold("post.md", text)
    assert [(at.line, at.text) for at in lines] == [
        (2, "ERROR 12-04 10:00:00 [x.py:1] boom"),
        (4, "id ; value"),
        (6, "a ; b"),
    ]
    assert lines[0].quoted == text.splitlines()[1]


def test_a_message_cut_mid_word_is_joined_both_ways_and_placed_at_its_first_line():
    rows = [
        "(EngineCore pid=316) ValueError: To serve at least one request with the model's max seq len (100000), (4.26 "
        "GiB KV cach",
        "e is needed, which is larger than the available KV cache memory (4.25 GiB). Based on the avai",
        "lable memory, the estimated maximum model length is 99840.",
    ]
    (line,) = fold("post.md", "\n".join(rows))
    assert line.line == 1 and "KV cache is needed" in line.alt and line.quoted == "\n".join(rows)
    assert diagnose([line]).ids("confirmed") == ["D06"]


def test_separate_records_stay_separate():
    rows = [
        "(APIServer pid=1) INFO 12-04 10:00:00 [api_server.py:1] vLLM API server version 0.25.2 starting on port 8888",
        "(APIServer pid=1) ERROR 12-04 10:00:01 [core.py:1] EngineCore failed to start.",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/x.py", line 5, in f',
        "RuntimeError: boom",
        "   1234 root      20   0   12.3g   2.1g  10000 R 330.0   1.7  10:01.00 VLLM::Worker_TP0",
    ]
    assert len(fold("log", "\n".join(rows))) == len(rows)


def test_prose_is_told_from_log_records():
    prose, record = fold("post.md", "We run the pair and decode falls as the output grows.\nINFO 12-04 10:00:00 [a] ok")
    assert is_prose(prose) and not is_prose(record)
