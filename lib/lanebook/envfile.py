"""Reading .env.dspark files and Docker Compose variable interpolation, as Compose v2 does them.

Compose reads the env file to interpolate the compose file; only keys named in the service's
``environment:`` map reach the container (the reason seed 000 needs the compose injection line).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .errors import LanebookError


@dataclass(frozen=True)
class EnvEntry:
    key: str
    value: str
    line: int  # 1-based line number in the file
    raw: str


_KEY_RE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s?(.*)$")


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1]
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
    if value.startswith(("'", '"')):
        # A quoted value followed by an inline comment: keep what the quotes hold.
        quote = value[0]
        end = value.find(quote, 1)
        if end > 0:
            return value[1:end]
    # Unquoted: an inline comment needs whitespace before '#'.
    return re.split(r"\s+#", value, maxsplit=1)[0].strip()


def parse_env_text(text: str) -> list[EnvEntry]:
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _KEY_RE.match(raw)
        if not match:
            continue  # Compose ignores lines it cannot read as KEY=VALUE; so do we (lint reports them).
        entries.append(EnvEntry(match.group(1), _unquote(match.group(2)), number, raw))
    return entries


def parse_env_file(path: str | Path) -> list[EnvEntry]:
    try:
        return parse_env_text(Path(path).read_text())
    except FileNotFoundError:
        raise LanebookError(f"env file not found: {path}") from None


def env_map(entries: list[EnvEntry]) -> dict[str, str]:
    """Last assignment wins, as in Compose."""
    return {e.key: e.value for e in entries}


_VAR_RE = re.compile(r"\$(\$|\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}|[A-Za-z_][A-Za-z0-9_]*)")


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
