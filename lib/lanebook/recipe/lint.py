"""`lanebook lint`: check a checkout against the pitfall registry and against the lane it should run.

Every value is read as the checkout runs it (lanebook.recipe.effective), and each finding names the line that wins for
it: the env line, the launcher's profile key or the compose line. The ways in: two files as they are
(`lint_env_and_compose`), a checkout's files against a lane (`lint_checkout_files`), a lane on lanebook's reference
checkout without connecting (`lint_lane_on_reference`), and what the lane will run (`lint_what_lane_runs`). Every
report lists the files it linted; one linted with a lane also holds it against its rollback lane (S07).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from lanebook.base import yamltext
from lanebook.base.errors import LanebookError, LaneError
from lanebook.base.files import read_text
from lanebook.lane.changes import LaneChange, change_from_rollback
from lanebook.lane.params import LaneParams, lane_path, load_lane
from lanebook.recipe.compose import ComposeFile
from lanebook.recipe.effective.checkout import REFERENCE, START_NAME, CheckoutFiles, Location, TextFile, sourced_names
from lanebook.recipe.effective.config import RANK_FLAGS, DeadLine, Effective, Setting
from lanebook.recipe.effective.mismatches import KV_DTYPE_FLAG, KV_DTYPE_KEY, Mismatch, lane_mismatches, rank_mismatches
from lanebook.recipe.envfile import interpolate, parse_env_text, unreadable_lines
from lanebook.recipe.pitfalls import PITFALLS
from lanebook.recipe.render import RenderPlan, plan_render


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


@dataclass(frozen=True)
class Linted:
    file: str
    source: str  # "lane file", "local checkout", "head over ssh", "reference checkout" or "given file"

    def to_json(self) -> dict:
        return {"file": self.file, "source": self.source}


@dataclass
class LintReport:
    findings: list[Finding]
    linted: list[Linted] = field(default_factory=list)
    note: str = ""  # why the files linted are not the lane's own checkout
    notice: str = ""  # who decided the effective configuration, when it was not Docker Compose (compose_cli)

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    def to_json(self) -> dict:
        doc = {
            "ok": self.ok,
            "findings": [f.to_json() for f in self.findings],
            "linted": [item.to_json() for item in self.linted],
        }
        if self.note:
            doc["note"] = self.note
        if self.notice:
            doc["notice"] = self.notice
        return doc

    def errors_summary(self) -> str:
        """The errors, one `ID message` each, or which files were linted when there is none (a check's detail)."""
        return "; ".join(f"{f.id} {f.message}" for f in self.findings if f.severity == "error") or self.linted_summary()

    def linted_summary(self) -> str:
        """Which files were linted, and from where (a runbook shows it beside its verdict)."""
        files = ", ".join(f"{item.file} ({item.source})" for item in self.linted)
        return f"linted {files}" + (f"; {self.note}" if self.note else "")


@dataclass(frozen=True)
class AgainstRollback:
    """The lane against its rollback lane (S07): what it changes, or why that could not be read, and whether the
    operator allowed changing runtime and weights at once."""

    where: Location  # the lane file's rollback: line
    change: Optional[LaneChange] = None
    problem: str = ""  # the rollback lane could not be loaded
    allowed: bool = False


def against_rollback(params: LaneParams, doc: Optional[CommentedMap], file: str, allowed: bool) -> AgainstRollback:
    where = Location(file, _line(doc, "rollback"))
    try:
        return AgainstRollback(where, change_from_rollback(params), allowed=allowed)
    except LaneError as exc:
        return AgainstRollback(where, problem=str(exc), allowed=allowed)


@dataclass
class LintInput:
    """What the checks read: the checkout's effective configuration, and the lane it should run."""

    eff: Effective
    block_size: int = 5
    lane_speculative: Optional[Speculative] = None  # a lane linted from its file: schedule and K from that file
    clients: list[tuple[str, Any, Location]] = field(default_factory=list)  # Hermes / request settings (dotted path)
    nodes: Optional[int] = None  # a lane's node count (files: compose's --nnodes)
    mismatches: list[tuple[Mismatch, str]] = field(default_factory=list)  # lane values not run, with what fixes each
    rollback: Optional[AgainstRollback] = None  # a lane's: it against its rollback lane
    params: Optional[LaneParams] = None  # the lane linted (its nodes and launcher), None for files alone
    lane_file: str = ""  # where the lane's own keys are named
    lane_doc: Optional[CommentedMap] = None

    def lane_at(self, *keys: str) -> Location:
        """The lane file's line of KEYS (the deepest present)."""
        return Location(self.lane_file, _line(self.lane_doc, *keys))

    @property
    def compose(self) -> ComposeFile:
        return self.eff.compose

    @property
    def env_missing_at(self) -> Location:
        return self.eff.missing_at

    @property
    def dead_lines(self) -> list[DeadLine]:
        return self.eff.dead_lines

    @property
    def entrypoint_error(self) -> Optional[tuple[int, str]]:
        return self.eff.spec.entrypoint_error

    @property
    def unreadable_env(self) -> list[tuple[Location, str]]:
        env = self.eff.env_file
        return [(env.at(n), text) for n, text in unreadable_lines(env.text)] if env else []

    def env(self, key: str) -> Optional[Setting]:
        """A variable as the env file and the launcher give it (None when nothing sets it)."""
        return self.eff.variable(key)

    def compose_at(self, line: int) -> Location:
        return self.eff.compose_at(line)

    def resolve(self, text: str) -> Optional[str]:
        """Compose interpolation with the checkout's variables (None when Compose would refuse it)."""
        try:
            return interpolate(text, {k: s.value for k, s in self.eff.variables.items() if s.value is not None})
        except LanebookError:
            return None

    def effective(self, key: str) -> Optional[Setting]:
        """The value the container sees for KEY: through the compose environment: map, else the env file's."""
        return self.eff.container_env(key) or self.env(key)

    def flag(self, flag: str, key: str) -> Optional[Setting]:
        """The value `vllm serve` gets for a flag (the variable KEY when the compose command lacks the flag)."""
        return self.eff.flag(flag) or self.env(key)

    @property
    def multinode(self) -> bool:
        if self.nodes is not None:
            return self.nodes > 1
        nnodes = self.eff.flag("--nnodes")
        return nnodes is not None and (nnodes.value or "1") not in ("", "1")

    def text_lines(self) -> list[tuple[Location, str]]:
        """Env assignments and compose lines, for checks that look for a pattern anywhere."""
        env = self.eff.env_file
        lines = [(env.at(e.line), f"{e.key}={e.value}") for e in self.eff.entries] if env else []
        return lines + [(self.compose_at(n), text) for n, text in enumerate(self.compose.lines, start=1)]

    def speculative(self) -> Speculative:
        if self.lane_speculative:
            return self.lane_speculative
        spec = self.eff.speculative
        if spec.config is None:
            return Speculative(spec.where, error=spec.error)
        return Speculative(
            spec.where,
            spec.config["num_speculative_tokens"],
            spec.k_where,
            spec.config.get("num_speculative_tokens_per_batch_size"),
            spec.where,
        )


def run_checks(inp: LintInput) -> list[Finding]:
    """Every static check of the registry, in registry order; one finding per (id, file, line)."""
    seen, findings = set(), []
    for pitfall in PITFALLS:
        for hit in pitfall.check(inp) if pitfall.check else ():
            key = (pitfall.id, hit.where.file, hit.where.line)
            if key not in seen:
                seen.add(key)
                findings.append(
                    Finding(pitfall.id, hit.severity or pitfall.severity, hit.message, hit.where.file, hit.where.line)
                )
    return findings


def _load_yaml(path: Path) -> Any:
    try:
        return yamltext.load(path.read_text(), "rt")
    except FileNotFoundError:
        raise LanebookError(f"file not found: {path}") from None
    except YAMLError as exc:
        raise LanebookError(yamltext.problem(path, exc)) from None


def _leaves(node: Any, path: str, file: str) -> list[tuple[str, Any, Location]]:
    """Every scalar under a round-trip YAML node as (dotted path, value, location)."""
    if isinstance(node, CommentedMap):
        children = [
            (f"{path}.{key}" if path else str(key), value, node.lc.key(key)[0] + 1) for key, value in node.items()
        ]
    elif isinstance(node, CommentedSeq):
        children = [(f"{path}[{i}]", value, node.lc.item(i)[0] + 1) for i, value in enumerate(node)]
    else:
        return []
    found = []
    for sub, value, line in children:
        found += (
            _leaves(value, sub, file)
            if isinstance(value, (CommentedMap, CommentedSeq))
            else [(sub, value, Location(file, line))]
        )
    return found


def _linted(files: CheckoutFiles, source: str) -> list[Linted]:
    return [Linted(f.name, source) for f in (files.env or files.example, files.compose, *files.launcher_files) if f]


def given_files(env_path: str | Path, compose_path: str | Path) -> CheckoutFiles:
    """An env file and a compose file as a checkout; a start script beside the compose file (and what it sources)
    is read too, since it tells which overrides the launcher makes."""
    env = TextFile(str(env_path), read_text(env_path, "env file"))
    compose = TextFile(str(compose_path), read_text(compose_path, "compose file"))
    directory = Path(compose_path).parent
    start = (
        TextFile(str(directory / START_NAME), read_text(directory / START_NAME, "start script"))
        if (directory / START_NAME).is_file()
        else None
    )
    sourced = (
        tuple(
            TextFile(str(directory / n), read_text(directory / n, "sourced script"))
            for n in sourced_names(start.text)
            if (directory / n).is_file()
        )
        if start
        else ()
    )
    return CheckoutFiles(compose, env, start=start, sourced=sourced)


def lint_env_and_compose(
    env_path: str | Path, compose_path: str | Path, hermes_config: str | Path | None = None
) -> LintReport:
    """Lint an env file and a compose file as they are (and a Hermes config.yaml, for P09/P10, when given)."""
    files = given_files(env_path, compose_path)
    clients = _leaves(_load_yaml(Path(hermes_config)), "", str(hermes_config)) if hermes_config else []
    eff = Effective(files)
    findings = run_checks(LintInput(eff, clients=clients))
    return LintReport(findings, _linted(files, "given file"), notice=eff.notice)


def _lane_source(params: LaneParams, source: str | Path | None) -> tuple[str, Optional[CommentedMap]]:
    """The lane's file and its round-trip document, when the lane is exactly what that file holds."""
    try:
        path = Path(source) if source else lane_path(params.name)
        same = load_lane(path).model_dump() == params.model_dump()  # the values, wherever each was loaded from
    except LaneError:
        return f"lane {params.name} (not from a lane file)", None
    if not same:
        return f"lane {params.name} (in memory, differs from {path})", None
    return str(path), _load_yaml(path)


def _line(doc: Optional[CommentedMap], *keys: str) -> int:
    """The line of the deepest of KEYS present in the lane document (0 when none is)."""
    line, node = 0, doc
    for key in keys:
        if not isinstance(node, CommentedMap) or key not in node:
            break
        line, node = node.lc.key(key)[0] + 1, node[key]
    return line


def _clients(doc: Optional[CommentedMap], file: str) -> list[tuple[str, Any, Location]]:
    return [
        leaf for key in ("hermes", "request") if doc is not None and key in doc for leaf in _leaves(doc[key], key, file)
    ]


def _fixes(mismatches: list[Mismatch], plan: Optional[RenderPlan], why_not: str) -> list[tuple[Mismatch, str]]:
    """Each mismatch with what resolves it: the line `env render` writes, or that render cannot."""
    if plan is None:
        return [(m, f"`lanebook env render` cannot patch this checkout ({why_not})") for m in mismatches]
    unresolved = {m.key for m in plan.unresolved}
    written = {key: target for target, key in plan.carries.items()}
    fixed = []
    for mismatch in mismatches:
        key = mismatch.key
        if key in RANK_FLAGS.values():
            fix = (
                f"`lanebook env render` cannot change this: the compose command writes {key} "
                f"{mismatch.running.value} literally (the recipe's two-node shape); "
                f"a lane of {mismatch.lane_value} nodes "
                f"runs a checkout whose compose reads {key} ${{{_rank_key(key)}}}"
                if not mismatch.running.from_env
                else f"set the lane's {_rank_key(key)} to its node count, {mismatch.lane_value}"
            )
        elif key in unresolved:
            fix = "`lanebook env render` cannot change this: edit the line that wins"
        elif key.startswith("speculative."):
            fix = "`lanebook env render` rewrites the SPECULATIVE_CONFIG line from the lane"
        elif key == KV_DTYPE_KEY:
            fix = f"`lanebook env render` writes the compose command's {KV_DTYPE_FLAG} {mismatch.lane_value}"
        elif key in written:
            fix = f"`lanebook env render` writes {written[key]}={plan.effective.setting(key).value}"
        else:
            fix = f"`lanebook env render` makes the compose environment: map pass {key}"
        fixed.append((mismatch, fix))
    return fixed


def _rank_key(flag: str) -> str:
    return next(key for key, named in RANK_FLAGS.items() if named == flag)


def lint_checkout_files(
    params: LaneParams,
    files: CheckoutFiles,
    source: str | Path | None = None,
    origin: str = "local checkout",
    *,
    allow_runtime_and_weights: bool = False,
) -> LintReport:
    """Lint a checkout's files as they are against LANE (SOURCE: the lane's file, default params/NAME.yaml). Each lane
    value the checkout does not run is an error (S04) naming both values, the line that wins, and what `lanebook env
    render` would write (or that it cannot fix it); a checkout with no .env.dspark yet is linted as render would leave
    it. ALLOW_RUNTIME_AND_WEIGHTS: the operator allowed a lane that changes both against its rollback lane (S07
    warns)."""
    file, doc = _lane_source(params, source)
    try:
        plan, why_not = plan_render(params, files), ""
    except LanebookError as exc:  # a compose file render cannot patch: lint still reports what it runs
        plan, why_not = None, str(exc)
    findings: list[Finding] = []
    eff = Effective(files)
    if files.env is None and plan is not None:
        start = f"copies {Path(files.example.name).name} and writes" if files.example else "writes"
        findings.append(
            Finding(
                "S04",
                "error",
                f"the checkout has no .env.dspark, and its launcher refuses to start "
                f"without one; linted as `lanebook env render` would leave it ({start} "
                f"the lane's values)",
                plan.effective.missing_at.file,
                0,
            )
        )
        eff = plan.effective
    inp = LintInput(
        eff,
        block_size=params.speculative.drafter_block_size,
        clients=_clients(doc, file),
        nodes=len(params.nodes),
        mismatches=_fixes(lane_mismatches(params, eff) + rank_mismatches(params, eff), plan, why_not),
        rollback=against_rollback(params, doc, file, allow_runtime_and_weights),
        params=params,
        lane_file=file,
        lane_doc=doc,
    )
    linted = [Linted(file, "lane file"), *_linted(files, origin)]
    return LintReport(findings + run_checks(inp), linted, notice=eff.notice)


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


FOUR_NODE_REFERENCE = "reference checkout, four-node shape"


def reference_for(params: LaneParams) -> tuple[CheckoutFiles, str]:
    """lanebook's reference checkout for LANE, and how a report names it: the recipe's current shape; for a lane of
    the four-node shape (lane.params.RANK_KEYS) the same files with the compose command reading
    --tensor-parallel-size ${TP_SIZE} and --nnodes ${NNODES}, as such a checkout's compose does."""
    reference = CheckoutFiles.read(REFERENCE)
    if not params.rank_shaped:
        return reference, "reference checkout"
    text = reference.compose.text
    for key, flag in RANK_FLAGS.items():  # the recipe writes them literally; the four-node shape reads the env file
        text = re.sub(rf"(?m)^(\s*{re.escape(flag)}) 2$", rf"\1 ${{{key}}}", text)
    return reference.replace(compose=TextFile(reference.compose.name, text)), FOUR_NODE_REFERENCE


def lint_lane_on_reference(
    params: LaneParams, source: str | Path | None = None, *, allow_runtime_and_weights: bool = False
) -> LintReport:
    """Lint a lane without connecting anywhere: its values rendered into lanebook's reference checkout.

    Findings on a value the lane sets name its line in the lane file (SOURCE, default params/NAME.yaml); the
    rest name the reference files' own lines."""
    file, doc = _lane_source(params, source)
    reference, shape = reference_for(params)
    plan = plan_render(params, reference)
    example = reference.example
    keys = {e.line: e.key for e in parse_env_text(plan.env)}
    env_back = _map_back(example.text.splitlines(), plan.env.splitlines())

    def env_at(line: int) -> Location:
        key = keys.get(line)
        lane_key = plan.carries.get(key, key) if key else None
        if line == 0 or lane_key in params.env:
            return Location(file, _line(doc, "env", lane_key) if lane_key in params.env else _line(doc, "env"))
        return Location(example.name, env_back(line))

    compose_back = _map_back(reference.compose.text.splitlines(), plan.compose.splitlines())
    files = reference.replace(
        compose=TextFile(
            reference.compose.name, plan.compose, lambda n: Location(reference.compose.name, compose_back(n))
        ),
        env=TextFile(example.name, plan.env, env_at),
    )
    eff = Effective(files)
    schedule = params.speculative.schedule
    mtp = Location(file, _line(doc, "env", "MTP_NUM_TOKENS"))
    inp = LintInput(
        eff,
        block_size=params.speculative.drafter_block_size,
        lane_speculative=Speculative(
            Location(file, _line(doc, "speculative")),
            params.num_speculative_tokens,
            mtp,
            None if schedule is None else [list(r) for r in schedule],
            Location(file, _line(doc, "speculative", "schedule")),
        ),
        clients=_clients(doc, file),
        nodes=len(params.nodes),
        mismatches=[
            (m, "`lanebook env render` cannot change this on a checkout of this shape")
            for m in lane_mismatches(params, eff) + rank_mismatches(params, eff)
        ],
        rollback=against_rollback(params, doc, file, allow_runtime_and_weights),
        params=params,
        lane_file=file,
        lane_doc=doc,
    )
    linted = [Linted(file, "lane file"), Linted(reference.compose.name, shape), Linted(example.name, shape)]
    note = (
        f"the lane's own launcher scripts ({params.launcher.start}, {params.launcher.status}, "
        f"{params.launcher.stop}) are in no reference: what they export to each rank is checked only against "
        "its checkout"
        if shape == FOUR_NODE_REFERENCE
        else ""
    )
    return LintReport(run_checks(inp), linted, note=note, notice=eff.notice)


def lint_what_lane_runs(
    params: LaneParams,
    checkout: str | Path | None = None,
    *,
    dry_run: bool = False,
    source: str | Path | None = None,
    allow_runtime_and_weights: bool = False,
) -> LintReport:
    """Lint what LANE will run: its checkout (CHECKOUT, a local copy, else read from the head over SSH).

    A dry run opens no connection, and a head that cannot be reached (or has no checkout) leaves nothing to
    read: then the lane file is linted against the reference checkout (lint_lane_on_reference) and the report
    says why."""
    allowed = {"allow_runtime_and_weights": allow_runtime_and_weights}
    if checkout is not None:
        return lint_checkout_files(params, CheckoutFiles.read(checkout), source, "local checkout", **allowed)
    if dry_run:
        reason = "dry run: no connection opened"
    else:
        from lanebook.nodes.ssh import LaneNodes as Connected

        try:
            with Connected(params) as connected:
                files = CheckoutFiles.fetch(connected.head, params.checkout)
            return lint_checkout_files(params, files, source, "head over ssh", **allowed)
        except LanebookError as exc:  # unreachable, no checkout there, or the twin is down
            reason = f"the head's checkout could not be read: {exc}"
    report = lint_lane_on_reference(params, source, **allowed)
    report.note = "; ".join(
        part
        for part in (f"{reason}; linted the lane file against lanebook's reference checkout instead", report.note)
        if part
    )
    return report


def print_report(report: LintReport) -> None:
    """One line per finding (`ID severity FILE:LINE message`), the files linted, then a summary line."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(soft_wrap=True, highlight=False)
    for f in report.findings:
        style = "red" if f.severity == "error" else "yellow"
        console.print(f"[{style}]{f.id} {f.severity}[/{style}] {escape(f.file)}:{f.line} {escape(f.message)}")
    if report.note:
        console.print(f"note: {escape(report.note)}")
    if report.notice:
        console.print(f"notice: {escape(report.notice)}")
    for item in report.linted:
        console.print(f"linted: {escape(item.file)} ({item.source})")
    errors = sum(f.severity == "error" for f in report.findings)
    verdict = "[green]ok[/green]" if report.ok else "[red]fail[/red]"
    console.print(f"{verdict}: {errors} error(s), {len(report.findings) - errors} warning(s)")
