"""Reading .env.dspark files and Docker Compose variable interpolation, as Compose v2 and the launcher do them.

Compose reads the env file to interpolate the compose file; only keys named in the service's
``environment:`` map reach the container (the reason the recipe needs the compose injection line for
VLLM_USE_BREAKABLE_CUDAGRAPH). The recipe's launcher sources a normalized copy of the file (a UTF-8
byte-order mark and CR line ends stripped), so an env file edited on Windows reads the same; we
read it the same way, keeping the line numbers of the operator's file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from lanebook.base.errors import LanebookError
from lanebook.base.files import read_text


@dataclass(frozen=True)
class EnvEntry:
    key: str
    value: str  # unquoted, before interpolation
    line: int  # 1-based line number in the file
    raw: str
    quote: str = ""  # the value's quoting: "" (none), '"' or "'" (single quotes keep $ literal)


_KEY_RE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s?(.*)$")


def _unquote(value: str) -> tuple[str, str]:
    """(value, quote character) of an assignment's right-hand side."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("\\'", "'"), "'"  # Compose reads \' in single quotes as a quote
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\"), '"'
    if value.startswith(("'", '"')):
        # A quoted value followed by an inline comment: keep what the quotes hold.
        quote = value[0]
        end = value.find(quote, 1)
        if end > 0:
            return value[1:end], quote
    # Unquoted: an inline comment needs whitespace before '#'.
    return re.split(r"\s+#", value, maxsplit=1)[0].strip(), ""


def normalized_lines(text: str) -> list[str]:
    """The file's lines as the launcher reads them: a leading byte-order mark and each line's trailing CR removed."""
    return [line.removesuffix("\r") for line in text.removeprefix("\ufeff").split("\n")]


def parse_env_text(text: str) -> list[EnvEntry]:
    entries = []
    for number, raw in enumerate(normalized_lines(text), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _KEY_RE.match(raw)
        if not match:
            continue  # skipped here (lint warns, S03); Docker Compose v2 refuses the whole file (compose_cli says so)
        value, quote = _unquote(match.group(2))
        entries.append(EnvEntry(match.group(1), value, number, raw, quote))
    return entries


def unreadable_lines(text: str) -> list[tuple[int, str]]:
    """(line, text) of each line that is neither blank, a comment, nor a KEY=VALUE assignment."""
    readable = {e.line for e in parse_env_text(text)}
    return [
        (n, line)
        for n, line in enumerate(normalized_lines(text), start=1)
        if line.strip() and not line.strip().startswith("#") and n not in readable
    ]


def parse_env_file(path: str | Path) -> list[EnvEntry]:
    return parse_env_text(read_text(path, "env file"))


def env_map(entries: list[EnvEntry]) -> dict[str, str]:
    """Last assignment wins, as in Compose (values as written, not interpolated)."""
    return {e.key: e.value for e in entries}


def resolve_env(entries: list[EnvEntry], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables an env file defines, in order: unquoted and double-quoted values interpolate ${VAR}
    from the lines above and the environment (HF_CACHE=${HOME}/.cache/huggingface), single-quoted ones
    stay literal; the last assignment of a key wins."""
    resolved: dict[str, str] = {}
    for entry in entries:
        scope = {**(environ or {}), **resolved}
        resolved[entry.key] = entry.value if entry.quote == "'" else interpolate(entry.value, scope)
    return resolved


_VAR_RE = re.compile(r"\$(\$|\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}|[A-Za-z_][A-Za-z0-9_]*)")
_REF_RE = re.compile(r"(?<!\$)\$\{?([A-Za-z_][A-Za-z0-9_]*)")  # a variable reference, not a $$ escape


def references(text: str) -> list[str]:
    """The variables a Compose value names, in order (`${A:-${B}}` names A, then B; `$${A}` names none)."""
    return _REF_RE.findall(text.replace("$$", ""))


def interpolate(text: str, variables: Mapping[str, str]) -> str:
    """Compose interpolation: ${V}, ${V:-d}, ${V-d}, ${V:+a}, ${V+a}, ${V:?e}, $V; $$ becomes $."""

    def resolve(match: re.Match) -> str:
        body = match.group(1)
        if body == "$":
            return "$"
        if not body.startswith("{"):
            return variables.get(body, "")
        inner = body[1:-1]
        op = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)(:-|-|:\+|\+|:\?|\?)?(.*)$", inner, re.S)
        if not op:
            raise LanebookError(f"invalid interpolation format: ${{{inner}}}")
        name, operator, arg = op.group(1), op.group(2), op.group(3)
        value = variables.get(name)
        if operator is None:
            return value or ""
        arg = interpolate(arg, variables)
        if operator == ":-":
            return value if value else arg
        if operator == "-":
            return value if value is not None else arg
        if operator == ":+":
            return arg if value else ""
        if operator == "+":
            return arg if value is not None else ""
        if not value:  # :? and ?
            raise LanebookError(f"required variable {name} is missing a value: {arg}")
        return value

    return _VAR_RE.sub(resolve, text)
