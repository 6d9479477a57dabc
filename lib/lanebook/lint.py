"""`lanebook lint`: check an env/compose pair, or a lane, against the pitfall registry (SPEC section 7).

Values are resolved as Compose and the container would: a vllm serve flag or a container variable is
read from the compose file and interpolated with the env file, and each finding names the line that
supplies the value (the env line when the env file sets it, the compose line when its default
applies). A lane is linted from its own file (env values, Hermes block, request body, schedule, each
named by its line in params/LANE.yaml) plus the compose patch `env render` would make to the twin's
template of the recipe's compose file, whose findings name the template's lines.
"""
from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Optional

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from .compose import COMPOSE_NAME, ComposeFile, load_compose
from .envfile import interpolate, parse_env_file
from .errors import LaneError, LanebookError
from .params import LaneParams, lane_path, load_lane
from .pitfalls import PITFALLS, Location
from .render import env_text, patch_compose

TEMPLATE = Path(__file__).parent / "reference" / COMPOSE_NAME  # the recipe checkout's compose, in its shape
_REF_RE = re.compile(r"(?<!\$)\$\{?([A-Za-z_][A-Za-z0-9_]*)")  # a Compose variable reference, not a $$ escape
_SHELL_ESCAPE_RE = re.compile(r'\\([\\"$`])')  # what a backslash escapes inside shell double quotes


@dataclass(frozen=True)
class Setting:
    value: str
    where: Location
    from_env: bool  # the env file supplies it (False: a compose default or literal)


@dataclass(frozen=True)
class Speculative:
    where: Location  # the SPECULATIVE_CONFIG line (or the lane's speculative: block)
    k: Optional[int] = None
    k_where: Optional[Location] = None
    schedule: Any = None
    schedule_where: Optional[Location] = None
    error: Optional[str] = None


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str
    message: str
    file: str
    line: int

    def to_json(self) -> dict:
        return {"id": self.id, "severity": self.severity, "message": self.message, "file": self.file, "line": self.line}


@dataclass
class LintReport:
    findings: list[Finding]

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    def to_json(self) -> dict:
        return {"ok": self.ok, "findings": [f.to_json() for f in self.findings]}


@dataclass
class LintInput:
    """Everything the checks read, each value with the file and line it comes from."""
    env_settings: dict[str, Setting]
    env_missing_at: Location  # where a key the env file lacks is reported
    compose: ComposeFile
    compose_line_map: Callable[[int], int] = lambda line: line  # patched line → the line of the file to name
    block_size: int = 5
    lane_speculative: Optional[Speculative] = None  # a lane's schedule and K come from its own file
    clients: list[tuple[str, Any, Location]] = field(default_factory=list)  # Hermes / request settings (dotted path)
    unreadable_env: list[tuple[Location, str]] = field(default_factory=list)
    nodes: Optional[int] = None  # a lane's node count (files: compose's --nnodes)

    def env(self, key: str) -> Optional[Setting]:
        return self.env_settings.get(key)

    def compose_at(self, line: int) -> Location:
        return Location(self.compose.path, self.compose_line_map(line))

    @cached_property
    def _env_values(self) -> dict[str, str]:
        return {k: s.value for k, s in self.env_settings.items()}

    def resolve(self, text: str) -> Optional[str]:
        """Compose interpolation with the env file's values (None when Compose would refuse it)."""
        try:
            return interpolate(text, self._env_values)
        except LanebookError:
            return None

    def _supplied(self, raw: str, line: int) -> Setting:
        """A compose value resolved, located at the env line that supplies it: the first variable it names that
        the env file sets non-empty, else the first the env file sets at all, else the compose line."""
        value = self.resolve(raw) or ""
        named = [self.env_settings[n] for n in _REF_RE.findall(raw) if n in self.env_settings]
        own = next((s for s in named if s.value), named[0] if named else None)
        return Setting(value, own.where, True) if own else Setting(value, self.compose_at(line), False)

    def effective(self, key: str) -> Optional[Setting]:
        """The value the container sees for KEY: through the compose environment: map, else the env file's."""
        item = self.compose.environment.get(key)
        return self._supplied(item.raw, item.line) if item else self.env(key)

    def flag(self, flag: str, key: str) -> Optional[Setting]:
        """The value of a vllm serve flag (the env value of KEY when the compose command lacks the flag)."""
        found = self.compose.flag(flag)
        return self._supplied(*found) if found else self.env(key)

    @property
    def multinode(self) -> bool:
        if self.nodes is not None:
            return self.nodes > 1
        nnodes = self.compose.flag("--nnodes")
        return bool(nnodes) and (self.resolve(nnodes[0]) or "1") not in ("", "1")

    def text_lines(self) -> list[tuple[Location, str]]:
        """Env assignments and compose lines, for checks that look for a pattern anywhere."""
        lines = [(s.where, f"{k}={s.value}") for k, s in self.env_settings.items()]
        return lines + [(self.compose_at(n), text) for n, text in enumerate(self.compose.lines, start=1)]

    def speculative(self) -> Speculative:
        return self.lane_speculative or self._compose_speculative

    @cached_property
    def _compose_speculative(self) -> Speculative:
        """The SPECULATIVE_CONFIG the container builds: compose-interpolated, then shell-expanded with its environment."""
        found = self.compose.speculative_assignments()
        if len(found) != 1:
            where = self.compose_at(found[1][0] if found else self.compose.service_line)
            return Speculative(where, error=f"expected one SPECULATIVE_CONFIG assignment in the command of service "
                                            f"{self.compose.service_name}, found {len(found)}")
        line, match = found[0]
        where, body = self.compose_at(line), match.group(1)
        container = {k: self.resolve(item.raw) or "" for k, item in self.compose.environment.items()}
        try:
            text = _SHELL_ESCAPE_RE.sub(r"\1", interpolate(interpolate(body, self._env_values), container))
            config = json.loads(text)
        except (LanebookError, ValueError) as exc:
            return Speculative(where, error=f"SPECULATIVE_CONFIG does not become valid JSON in the container ({exc})")
        k = config.get("num_speculative_tokens") if isinstance(config, dict) else None
        if not isinstance(k, int) or isinstance(k, bool):
            return Speculative(where, error=f"SPECULATIVE_CONFIG has no integer num_speculative_tokens (got {text})")
        mtp = self.effective("MTP_NUM_TOKENS")
        k_where = mtp.where if mtp is not None and "MTP_NUM_TOKENS" in body else where
        return Speculative(where, k, k_where, config.get("num_speculative_tokens_per_batch_size"), where)


def run_checks(inp: LintInput) -> LintReport:
    """Every static check of the registry, in registry order; one finding per (id, file, line)."""
    seen, findings = set(), []
    for pitfall in PITFALLS:
        for hit in pitfall.check(inp) if pitfall.check else ():
            key = (pitfall.id, hit.where.file, hit.where.line)
            if key not in seen:
                seen.add(key)
                findings.append(Finding(pitfall.id, hit.severity or pitfall.severity, hit.message,
                                        hit.where.file, hit.where.line))
    return LintReport(findings)


def _load_yaml(path: Path) -> Any:
    try:
        return YAML().load(path.read_text())
    except FileNotFoundError:
        raise LanebookError(f"file not found: {path}") from None
    except YAMLError as exc:
        raise LanebookError(f"{path}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None


def _leaves(node: Any, path: str, file: str) -> list[tuple[str, Any, Location]]:
    """Every scalar under a round-trip YAML node as (dotted path, value, location)."""
    if isinstance(node, CommentedMap):
        children = [(f"{path}.{key}" if path else str(key), value, node.lc.key(key)[0] + 1) for key, value in node.items()]
    elif isinstance(node, CommentedSeq):
        children = [(f"{path}[{i}]", value, node.lc.item(i)[0] + 1) for i, value in enumerate(node)]
    else:
        return []
    found = []
    for sub, value, line in children:
        found += _leaves(value, sub, file) if isinstance(value, (CommentedMap, CommentedSeq)) else [(sub, value, Location(file, line))]
    return found


def lint_files(env_path: str | Path, compose_path: str | Path, hermes_config: str | Path | None = None) -> LintReport:
    """Lint an env file and a compose file (and a Hermes config.yaml, for P09/P10, when given)."""
    env_file = str(env_path)
    entries = parse_env_file(env_path)
    settings = {e.key: Setting(e.value, Location(env_file, e.line), True) for e in entries}
    readable = {e.line for e in entries}
    unreadable = [(Location(env_file, n), text) for n, text in enumerate(Path(env_path).read_text().splitlines(), start=1)
                  if text.strip() and not text.strip().startswith("#") and n not in readable]
    clients = _leaves(_load_yaml(Path(hermes_config)), "", str(hermes_config)) if hermes_config else []
    return run_checks(LintInput(settings, Location(env_file, 0), compose=load_compose(compose_path),
                                clients=clients, unreadable_env=unreadable))


def _map_back(old_lines: list[str], new_lines: list[str]) -> Callable[[int], int]:
    """Line n of a patched text → the line of the original it came from (an inserted line → the line it follows)."""
    opcodes = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_opcodes()

    def back(line: int) -> int:
        for _tag, i1, i2, j1, j2 in opcodes:
            if j1 <= line - 1 < j2:
                offset = line - 1 - j1
                return i1 + offset + 1 if offset < i2 - i1 else i1
        return line
    return back


def _lane_source(lane: LaneParams, source: str | Path | None) -> tuple[str, Optional[CommentedMap]]:
    """The lane's file and its round-trip document, when the lane is exactly what that file holds."""
    try:
        path = Path(source) if source else lane_path(lane.name)
        same = load_lane(path) == lane
    except LaneError:
        return f"lane {lane.name} (not from a lane file)", None
    if not same:
        return f"lane {lane.name} (in memory, differs from {path})", None
    return str(path), _load_yaml(path)


def _line(doc: Optional[CommentedMap], *keys: str) -> int:
    """The line of the deepest of KEYS present in the lane document (0 when none is)."""
    line, node = 0, doc
    for key in keys:
        if not isinstance(node, CommentedMap) or key not in node:
            break
        line, node = node.lc.key(key)[0] + 1, node[key]
    return line


def lint_lane(lane: LaneParams, source: str | Path | None = None) -> LintReport:
    """Lint a lane: its own values, named by their lines in its lane file (SOURCE, default params/NAME.yaml),
    plus the compose patch render would apply to the twin's template of the recipe's compose file."""
    file, doc = _lane_source(lane, source)
    settings = {k: Setting(env_text(v), Location(file, _line(doc, "env", k)), True) for k, v in lane.env.items()}
    clients = [leaf for key in ("hermes", "request") if doc is not None and key in doc
               for leaf in _leaves(doc[key], key, file)]
    template = load_compose(TEMPLATE)
    compose = ComposeFile(patch_compose(lane, template), TEMPLATE)
    schedule = lane.speculative.schedule
    inp = LintInput(
        settings, Location(file, _line(doc, "env")), compose, compose_line_map=_map_back(template.lines, compose.lines),
        block_size=lane.speculative.drafter_block_size,
        lane_speculative=Speculative(Location(file, _line(doc, "speculative")), lane.num_speculative_tokens,
                                     settings["MTP_NUM_TOKENS"].where, None if schedule is None else [list(r) for r in schedule],
                                     Location(file, _line(doc, "speculative", "schedule"))),
        clients=clients, nodes=len(lane.nodes))
    return run_checks(inp)


def print_report(report: LintReport) -> None:
    """One line per finding (`ID severity FILE:LINE message`), then a summary line."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(soft_wrap=True, highlight=False)
    for f in report.findings:
        style = "red" if f.severity == "error" else "yellow"
        console.print(f"[{style}]{f.id} {f.severity}[/{style}] {escape(f.file)}:{f.line} {escape(f.message)}")
    errors = sum(f.severity == "error" for f in report.findings)
    verdict = "[green]ok[/green]" if report.ok else "[red]fail[/red]"
    console.print(f"{verdict}: {errors} error(s), {len(report.findings) - errors} warning(s)")
