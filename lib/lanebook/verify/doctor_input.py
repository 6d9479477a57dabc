"""Reading what an operator pastes into `lanebook doctor --logs`: text folded into logical log lines before any rule
runs.

A post is log lines mixed with prose, quoted, fenced, prefixed by Compose or a rank, coloured, and wrapped by a chat
window. Folding takes off what wraps a message (ANSI colours, quote markers and `|` gutters, Markdown fences and table
pipes, Compose's `service-1  | `, `(Worker_TP1 pid=N)`, `[rank8]:`, journal and dmesg stamps) and joins a message cut
over several lines, so the same message reads the same however it was pasted. Every logical line keeps where it was
read (its first physical line) and its original text for the report's evidence.

A cut can fall inside a word ("KV cach" / "e is needed") or between two (the space dropped by a soft wrap); the
logical line keeps both readings (`text` joined with a space, `alt` joined with nothing) and a rule matches either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

MAX_JOINED = 24  # physical lines one logical line may take
WRAPPED_AT = 40  # a physical line shorter than this was not cut by a window
HARD_WRAP = 60  # a line this long cut without a sentence's end continues whatever its next line starts with

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
QUOTE = re.compile(r"^\s*(?:(?:>|▎|▍|▌|│|┃)\s?)+")
FENCE = re.compile(r"^\s*(?:`{3,}|~{3,})[\w+-]*\s*$")
TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$")
COMPOSE = re.compile(r"^[A-Za-z0-9][\w.-]*\s+\|\s?(?=\S)")
GUTTER = re.compile(r"^\|\s")
STAMPS = re.compile(
    r"^(?:"
    r"\[\s*\d+\.\d+\]\s*"  # dmesg
    r"|\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s+"  # ISO stamp
    r"|(?:[A-Z][a-z]{2}\s+\d{1,2}\s+\d\d:\d\d:\d\d)\s+[\w.-]+\s+[\w./@-]+(?:\[\d+\])?:\s+"  # journal / syslog
    r"|\d+(?:\.\d+)?:\s+[\w.-]+:\s+(?:kern|user|daemon):\s+\w+\s*:\s+\[[^\]]*\]:\s+"  # remote kernel log
    r")"
)
PROCESS = re.compile(
    r"^(?:\((?:[\w.:-]+(?:\s+[\w.:=-]+)*?)\s+pid=\d+(?:,\s*ip=[\w.:]+)?\)\s*|\[rank\d+\]:\s*|\(raylet\)\s*)+"
)
# A physical line that begins a record of its own, never the tail of the line before it.
NEW_RECORD = re.compile(
    r"^(?:(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b|[IWEF]\d{4}\s|Traceback|File \"|During handling|"
    r"The above exception|\w+(?:\.\w+)*(?:Error|Exception|Warning|Exit)\b:?|\d+:\s|\S+:\d+:\d+\s|NCCL\b|NVRM:|"
    r"\[[\w .:/-]{1,30}\]\s|\$\s|#\s|[-*+]\s|\d+\.\s|[A-Z][a-z]\w*:\s|"
    r"\d+\s+\S+\s+(?:\d+|rt)\s+-?\d+\s+\S+\s+\S+\s+\S+\s+[RSDTtZI]\s)"  # a `top -b` process row
)
SENTENCE_END = re.compile(r"[.!?:;)]\s*$")
LOG_RECORD = re.compile(
    r"^(?:INFO|WARNING|WARN|DEBUG)\b|\b(?:INFO|WARNING|DEBUG) \d\d-\d\d \d\d:|^[{\[]|^\S+=|^[\w./-]+:\s"
)
WORD = re.compile(r"[A-Za-z]{2,}")
FUNCTION_WORD = re.compile(r"(?i)\b(?:the|a|an|is|are|was|with|and|to|of|after|when|but|on|it|its|this|that|so|then)\b")


@dataclass(frozen=True)
class Line:
    """One logical line: where it was read (source, 1-based number of its first physical line), the folded text the
    rules read, the same with a mid-word join (`alt`, empty when there was no join) and the original text."""

    source: str
    line: int
    text: str
    raw: str = ""
    alt: str = ""

    @property
    def quoted(self) -> str:
        """The text a report quotes as evidence: the original as pasted."""
        return self.raw or self.text


def _unwrap(physical: str) -> tuple[str, bool]:
    """The message inside one physical line, and whether the line holds no log text at all (a fence, a table rule)."""
    text = ANSI.sub("", physical).rstrip("\r\n")
    if FENCE.match(text) or TABLE_RULE.match(text):
        return "", True
    quoted = QUOTE.match(text)
    if quoted:
        text = text[quoted.end() :]
        if FENCE.match(text) or TABLE_RULE.match(text):
            return "", True
    stripped = text.strip()
    if stripped.startswith("|") and stripped.endswith("|") and stripped.count("|") >= 2:
        text = " ; ".join(cell.strip() for cell in stripped[1:-1].split("|"))
    elif GUTTER.match(text):
        text = text[2:]
    compose = COMPOSE.match(text)
    if compose:
        text = text[compose.end() :]
    for _ in range(2):  # a stamp before a prefix and a prefix before a stamp
        stamp = STAMPS.match(text)
        if stamp:
            text = text[stamp.end() :]
        process = PROCESS.match(text)
        if process:
            text = text[process.end() :]
    return text, False


def _continues(previous: str, previous_width: int, text: str, indented: bool) -> bool:
    """Whether `text` is the rest of the message `previous` began (cut by a window, or an indented continuation)."""
    if not previous or not text or NEW_RECORD.match(text) or SENTENCE_END.search(previous):
        return False
    first = text[0]
    if indented:
        return not first.isdigit()
    if previous_width < WRAPPED_AT:
        return False
    return first.islower() or first in ",.;)]}'\"/_-=" or previous[-1] in ",(-/=_" or previous_width >= HARD_WRAP


def fold(source: str, text: str) -> list[Line]:
    """The logical lines of one pasted text (a file, a post), each placed at its first physical line."""
    return list(_fold(source, text))


def _fold(source: str, text: str) -> Iterator[Line]:
    start, parts, cuts, raws, widths = 0, [], [], [], 0
    for n, physical in enumerate(text.splitlines(), 1):
        if not physical:
            if parts:
                yield _logical(source, start, parts, cuts, raws)
                parts, cuts, raws = [], [], []
            continue
        message, blank = _unwrap(physical)
        if blank:
            if parts:
                yield _logical(source, start, parts, cuts, raws)
                parts, cuts, raws = [], [], []
            continue
        indented = message[:2] == "  " or message[:1] == "\t"
        body = message.strip()
        if not body:
            continue
        if parts and len(parts) < MAX_JOINED and _continues(parts[-1], widths, body, indented):
            parts.append(body)
            cuts.append(message)
            raws.append(physical)
            widths = len(physical)
            continue
        if parts:
            yield _logical(source, start, parts, cuts, raws)
        start, parts, cuts, raws = n, [message.rstrip() if indented else body], [message.lstrip()], [physical]
        widths = len(physical)
    if parts:
        yield _logical(source, start, parts, cuts, raws)


def _logical(source: str, start: int, parts: list[str], cuts: list[str], raws: list[str]) -> Line:
    """One logical line: `text` joins the parts with a space, `alt` joins the messages exactly as cut."""
    if len(parts) == 1:
        return Line(source, start, parts[0], raws[0] if raws[0] != parts[0] else "")
    return Line(source, start, " ".join(parts), "\n".join(raws), "".join(cuts).strip())


def is_prose(at: Line) -> bool:
    """Whether a logical line is what a person wrote (a sentence, a table row) rather than a routine log record: the
    suspected tier reads these and the error-shaped lines, never a healthy log's INFO lines."""
    text = at.text
    return not LOG_RECORD.search(text) and len(WORD.findall(text)) >= 4 and bool(FUNCTION_WORD.search(text))
