"""`lanebook upgrade`: what moving a lane's checkout to another recipe commit changes, known before anything moves.

Both sides are read the way the rest of lanebook reads a checkout, in memory (the operator's directories are never
written): the lane rendered into each (render.plan_render), each rank's container decided by real Compose
(effective.Effective), the speculative config, lint. The plan says what `vllm serve` gets on each rank, old against
new (`server_differences`, pure); what the pull alone does to the lane's values (keys no longer read, read
otherwise or renamed) and what render writes to keep them; new required keys, new defaults reaching the server and
new lint findings; and a verdict: `same lane`, `changes`, or `blocked` (the new side cannot run the lane as written).
`write_plan` records it as outputs/LANE/UTCSTAMP-upgrade-ID.json, not a run: `recorded_plans` finds them.
Why not a run: docs/decisions.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from lanebook.base.errors import LanebookError
from lanebook.base.files import record_id, utc_stamp, write_atomic
from lanebook.base.paths import outputs_dir
from lanebook.base.redact import redact, redact_data
from lanebook.lane.keys import LaneKeys, lane_keys
from lanebook.lane.params import REAL_FIGURES, TWIN_FIGURES, LaneParams
from lanebook.recipe.compose import ComposeFile
from lanebook.recipe.effective.checkout import ENV_NAME, CheckoutFiles, Location, TextFile
from lanebook.recipe.effective.config import Effective, Setting
from lanebook.recipe.effective.mismatches import env_text, lane_mismatches
from lanebook.recipe.envfile import parse_env_text
from lanebook.recipe.lint import lint_checkout_files
from lanebook.recipe.render import RenderPlan, patch_compose, plan_render
from lanebook.recipe.speculative import speculative_config

SAME, CHANGES, BLOCKED = "same lane", "changes", "blocked"
EXIT_CODES = {SAME: 0, CHANGES: 0, BLOCKED: 1}
RECORD_KIND = "upgrade-plan"
SPECULATIVE_FLAG = "--speculative-config"
# What a new default is, by its name (the kinds the recipe's changes bring: the ones an operator must see).
DEFAULT_KINDS = (
    (re.compile(r"REVISION|--revision"), "revision pin"),
    (re.compile(r"HOTFIX"), "hotfix toggle"),
    (re.compile(r"API_KEY"), "API key"),
)
_REQUIRED_RE = re.compile(r"""^\s*:\s+["']?\$\{([A-Za-z_][A-Za-z0-9_]*):\?""", re.M)


# --- plain data ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankServe:
    """What one rank's container gets: the `vllm serve` argv and the environment."""

    argv: tuple[str, ...]
    environment: Mapping[str, str]


@dataclass(frozen=True)
class ServerSide:
    """What one checkout's lane serves, as the diff reads it."""

    head: RankServe
    worker: RankServe
    image: str  # REF[@DIGEST]
    mounts: Mapping[str, str]  # container path → host source (checkout-relative as ./PATH)


@dataclass(frozen=True)
class Difference:
    """One thing the server gets that differs: None is absent on that side."""

    kind: str  # flag, speculative, environment, image, digest, mount
    name: str
    old: Optional[str]
    new: Optional[str]
    rank: str = "both"  # head, worker, or both


@dataclass(frozen=True)
class LaneValue:
    """A lane value the new checkout, with the env file as the pull leaves it, does not run as the lane says."""

    key: str
    lane: str
    after_pull: str  # what runs instead, and why (`0.835 (the launcher exports ... default)`), or the lane's value
    status: (
        str  # ignored (its line is read no more), overridden (another value wins), renamed (render writes another key)
    )
    detail: str
    render: str = ""  # what render writes for it, KEY=VALUE ('' when nothing)


@dataclass(frozen=True)
class RequiredKey:
    """A key the new launcher requires (`${KEY:?...}`) that the lane file does not set."""

    key: str
    value: Optional[str]  # what the env file gives it (None: unset, so the launcher refuses to start)
    new: bool  # the old launcher did not require it


@dataclass(frozen=True)
class ExampleMoved:
    """A line the recipe's example changed that the env file a pull keeps still sets as before: the operator's value
    stays (nothing the server gets changes), but the recipe now suggests another (e.g. its image pinned by digest)."""

    key: str
    old_example: Optional[str]  # None: the old example had no such line
    new_example: str
    kept: str  # what the kept env file sets, after render
    source: str  # the new example's line, checkout-relative


@dataclass(frozen=True)
class NewDefault:
    """A value the new side's server gets from a default (no env line sets it) that differs from the old side's."""

    kind: str  # revision pin, hotfix toggle, API key, default
    name: str  # the env key or flag
    old: Optional[str]
    new: Optional[str]
    source: str  # where the default is: FILE:LINE, checkout-relative


@dataclass(frozen=True)
class LintNote:
    """A lint finding the new side has that the old side did not."""

    id: str
    severity: str
    message: str
    where: str  # FILE:LINE, checkout-relative


@dataclass
class UpgradePlan:
    """The plan: the lane on the old checkout against the lane on the new one."""

    lane: str
    figures_label: str  # the lane's (LaneParams.figures_label): twin or real lane
    old: str  # where each side was read (a directory, or NODE:PATH)
    new: str
    verdict: str
    blockers: list[str] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    lane_values: list[LaneValue] = field(default_factory=list)
    render_writes: dict[str, str] = field(default_factory=dict)  # env key → value render writes on the new side
    render_diff: str = ""  # the render's diff of the new side (secrets redacted)
    required: list[RequiredKey] = field(default_factory=list)
    new_defaults: list[NewDefault] = field(default_factory=list)
    lint_new: list[LintNote] = field(default_factory=list)
    example_moved: list[ExampleMoved] = field(default_factory=list)
    decided_by: str = ""  # who decided each side's container (real Compose, or lanebook's emulation)
    notices: list[str] = field(default_factory=list)
    created_at: str = ""
    plan_id: str = ""  # set when recorded

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_json(self) -> dict:
        doc = {"kind": RECORD_KIND, **asdict(self)}
        return redact_data(doc)

    @classmethod
    def from_json(cls, data: Any) -> "UpgradePlan":
        """A recorded plan; anything else is one clear error."""
        if not isinstance(data, Mapping) or data.get("kind") != RECORD_KIND:
            raise LanebookError("not an upgrade plan record (its kind is not upgrade-plan)")
        lists = {
            "differences": Difference,
            "lane_values": LaneValue,
            "required": RequiredKey,
            "new_defaults": NewDefault,
            "lint_new": LintNote,
            "example_moved": ExampleMoved,
        }
        names = {f.name for f in fields(cls)}
        try:
            values = {k: v for k, v in data.items() if k in names}
            if "figures_label" not in data and "twin" in data:  # a plan recorded before the label had a name
                values["figures_label"] = TWIN_FIGURES if data["twin"] else REAL_FIGURES
            for key, kind in lists.items():
                values[key] = [kind(**item) for item in data.get(key, [])]
            plan = cls(**values)
        except TypeError as exc:
            raise LanebookError(f"upgrade plan record: {exc}") from None
        if plan.verdict not in EXIT_CODES:
            raise LanebookError(f"upgrade plan record: unknown verdict {plan.verdict!r}")
        return plan


# --- the diff (pure) -----------------------------------------------------------------------------------


def example_moved(
    old_example: Mapping[str, str], new_example: Mapping[str, tuple[str, str]], kept: Mapping[str, str]
) -> list[ExampleMoved]:
    """Keys whose example value moved (new_example: key -> (value, where)) while the kept env file sets them to
    something else: the pull leaves the operator's value in place, and the plan says what the recipe now suggests."""
    return [
        ExampleMoved(key, old_example.get(key), value, kept[key], where)
        for key, (value, where) in new_example.items()
        if old_example.get(key) != value and key in kept and kept[key] != value
    ]


def serve_flags(argv: tuple[str, ...] | list[str]) -> dict[str, str]:
    """`vllm serve MODEL --flag value --switch ...` as {"model": MODEL, "--flag": "value", "--switch": ""}; the
    speculative config is compared field by field instead (speculative_fields)."""
    flags = {"model": argv[1]} if len(argv) > 1 else {}
    index = 2
    while index < len(argv):
        token = argv[index]
        index += 1
        if not token.startswith("--"):
            continue
        name, equals, value = token.partition("=")
        if not equals and index < len(argv) and not argv[index].startswith("--"):
            value, index = argv[index], index + 1
        flags[name] = value
    flags.pop(SPECULATIVE_FLAG, None)
    return flags


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def speculative_fields(argv: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The --speculative-config the argv carries, field by field (values as compact JSON, strings as they are)."""
    config = speculative_config(" ".join(argv)) or {}
    return {key: _shown(value) for key, value in config.items()}


def map_differences(kind: str, rank: str, old: Mapping[str, str], new: Mapping[str, str]) -> list[Difference]:
    """Each name whose value differs (absent on one side is None), in the old side's order, then the new names."""
    names = dict.fromkeys([*old, *new])
    return [Difference(kind, n, old.get(n), new.get(n), rank) for n in names if old.get(n) != new.get(n)]


def _merged(per_rank: list[Difference]) -> list[Difference]:
    """Head and worker differences, one entry (rank both) where both ranks differ the same way."""
    head = {(d.kind, d.name, d.old, d.new) for d in per_rank if d.rank == "head"}
    worker = {(d.kind, d.name, d.old, d.new) for d in per_rank if d.rank == "worker"}
    both = head & worker
    merged, seen = [], set()
    for d in per_rank:
        key = (d.kind, d.name, d.old, d.new)
        if key in both:
            if key not in seen:
                seen.add(key)
                merged.append(Difference(d.kind, d.name, d.old, d.new, "both"))
        else:
            merged.append(d)
    return merged


def _image_parts(image: str) -> dict[str, str]:
    ref, _, digest = image.partition("@")
    return {"image": ref, **({"digest": digest} if digest else {})}


def server_differences(old: ServerSide, new: ServerSide) -> list[Difference]:
    """Everything `vllm serve` gets that differs, per rank (merged where both ranks differ alike): flags, speculative
    config fields, container environment; then the image and its digest, and the mounts by container path."""
    per_rank = []
    for kind, read in (("flag", serve_flags), ("speculative", speculative_fields)):
        for rank in ("head", "worker"):
            per_rank += map_differences(kind, rank, read(getattr(old, rank).argv), read(getattr(new, rank).argv))
    for rank in ("head", "worker"):
        per_rank += map_differences("environment", rank, getattr(old, rank).environment, getattr(new, rank).environment)
    image = [
        Difference("image" if d.name == "image" else "digest", d.name, d.old, d.new)
        for d in map_differences("image", "both", _image_parts(old.image), _image_parts(new.image))
    ]
    return _merged(per_rank) + image + map_differences("mount", "both", old.mounts, new.mounts)


def verdict_of(blockers: list[str], differences: list[Difference]) -> str:
    if blockers:
        return BLOCKED
    return CHANGES if differences else SAME


def default_kind(name: str) -> str:
    return next((kind for pattern, kind in DEFAULT_KINDS if pattern.search(name)), "default")


# --- reading the two sides (Compose runs here) --------------------------------------------------------


def _prefix(files: CheckoutFiles) -> str:
    """How the side's file names start (DIR/ or NODE:PATH/): stripped wherever a plan names a file."""
    name = files.compose.name
    return name[: name.rfind("/") + 1]


def _relative(text: str, prefix: str) -> str:
    return text.replace(prefix, "") if prefix else text


def _where(location: Location, prefix: str) -> str:
    return f"{_relative(location.file, prefix)}:{location.line}"


def _root(files: CheckoutFiles) -> str:
    """The checkout's directory as Compose resolves relative mounts: local, or the node's path."""
    return str(files.directory.resolve()) if files.directory else files.node_checkout.rstrip("/")


def server_side(eff: Effective) -> ServerSide:
    """What an Effective's lane serves, with mounts under the checkout named ./PATH (so two checkouts compare)."""
    root = _root(eff.files)

    def source(path: str) -> str:
        return "./" + path[len(root) + 1 :] if root and path.startswith(root + "/") else path

    return ServerSide(
        RankServe(tuple(eff.spec.argv), dict(eff.spec.environment)),
        RankServe(tuple(eff.worker.argv), dict(eff.worker.environment)),
        eff.spec.image,
        {target: source(src) for src, target in eff.spec.volumes},
    )


def required_keys(files: CheckoutFiles) -> list[str]:
    """The keys a launcher refuses to start without (`: "${KEY:?message}"`), in its order."""
    return list(dict.fromkeys(k for f in files.launcher_files for k in _REQUIRED_RE.findall(f.text)))


@dataclass
class _Side:
    """One side rendered: the plan render makes, or why it cannot be made."""

    plan: Optional[RenderPlan] = None
    problem: str = ""


def _render(params: LaneParams, files: CheckoutFiles, keys: Optional[LaneKeys] = None) -> _Side:
    try:
        side = _Side(plan_render(params, files, keys))
        side.plan.effective.worker  # noqa: B018 - the worker's Compose may refuse what the head's accepts
        return side
    except LanebookError as exc:
        return _Side(problem=str(exc))


def _pulled(params: LaneParams, old_plan: RenderPlan, new: CheckoutFiles) -> CheckoutFiles:
    """The new checkout as a pull leaves it: its own .env.dspark if it has one, else the one the old side runs (a
    pull keeps it: it is the operator's). Its compose file carries render's patch (the speculative config line, the
    environment: injection), which every render writes whatever the env file says, so the lane values the pull
    changes are the env file's."""
    compose = TextFile(new.compose.name, patch_compose(params, ComposeFile(new.compose.text, new.compose.name)))
    env = new.env or TextFile(_prefix(new) + ENV_NAME, old_plan.env)
    return new.replace(compose=compose, env=env)


def _lane_values(params: LaneParams, pulled: Effective, render: Optional[RenderPlan]) -> list[LaneValue]:
    """The lane's values as the pull leaves them: read no more, run otherwise, or read under another key."""
    mismatches = {m.key: m for m in lane_mismatches(params, pulled)}
    dead = {d.key: d for d in pulled.dead_lines if d.key in params.env and d.reason.startswith("the launcher")}
    written = {key: target for target, key in (render.carries if render else {}).items()}
    found = []
    for key in dict.fromkeys([*params.env, *mismatches]):
        target = written.get(key)
        renamed = target is not None and target != key
        if key not in mismatches and key not in dead and not renamed:
            continue
        want = mismatches[key].lane_value if key in mismatches else env_text(params.env[key])
        runs = mismatches[key].running.described() if key in mismatches else f"{want}, the lane's value"
        if key in dead:
            status, detail = "ignored", f"its env line is read no more: {dead[key].reason}"
        elif key in mismatches:
            status, detail = "overridden", f"the new checkout runs {runs}"
        else:
            status, detail = "renamed", f"the new launcher reads it as {target}"
        if renamed and status == "overridden":
            detail += f"; the new launcher reads it as {target}"
        shown = f"{target}={render.effective.setting(key).value}" if target and render else ""
        found.append(LaneValue(key, want, runs, status, detail, shown))
    return found


def _new_defaults(differences: list[Difference], new: Effective, prefix: str) -> list[NewDefault]:
    """The differences whose new value no env line gives: a compose or launcher default the new side brings."""
    found = []
    for d in differences:
        if d.kind not in ("environment", "flag") or d.new is None:
            continue
        if d.kind == "environment":
            setting: Optional[Setting] = new.container_env(d.name)
        else:
            setting = new.model() if d.name == "model" else new.flag(d.name)
        if setting is None or setting.from_env:
            continue
        found.append(NewDefault(default_kind(d.name), d.name, d.old, d.new, _where(setting.where, prefix)))
    return list({(n.kind, n.name): n for n in found}.values())


def _lint_notes(params: LaneParams, old: RenderPlan, new: RenderPlan) -> list[LintNote]:
    """Lint findings of the lane rendered into the new side that the old side did not have."""

    def findings(plan: RenderPlan) -> list[LintNote]:
        prefix = _prefix(plan.effective.files)
        report = lint_checkout_files(params, plan.effective.files, origin="rendered checkout")
        return [
            LintNote(f.id, f.severity, _relative(f.message, prefix), f"{_relative(f.file, prefix)}:{f.line}")
            for f in report.findings
        ]

    before = {(n.id, n.message) for n in findings(old)}
    return [n for n in findings(new) if (n.id, n.message) not in before]


def _label(files: CheckoutFiles) -> str:
    return _prefix(files).rstrip("/") or "."


def plan_upgrade(params: LaneParams, old: CheckoutFiles, new: CheckoutFiles) -> UpgradePlan:
    """The plan for moving LANE from the OLD checkout to the NEW one (local directories, or fetched from a node:
    CheckoutFiles.fetch). Nothing is written anywhere. The old side must run the lane (it is what runs today): a
    LanebookError otherwise; whatever stops the new side is a blocker."""
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    keys = lane_keys(params)  # a keyed lane's keys rendered into both sides alike, and redacted from the plan
    old_side = _render(params, old, keys)
    if old_side.plan is None:
        raise LanebookError(f"the old checkout {_label(old)} cannot run lane {params.name}: {old_side.problem}")
    old_plan = old_side.plan
    blockers = [f"the old checkout: {m.message()}" for m in old_plan.unresolved]
    plan = UpgradePlan(params.name, params.figures_label, _label(old), _label(new), SAME, created_at=created)
    plan.decided_by = old_plan.effective.decided_by
    plan.notices = [n for n in dict.fromkeys([old_plan.effective.notice]) if n]
    new_prefix = _prefix(new)
    try:
        pulled_files = _pulled(params, old_plan, new)
        pulled = Effective(pulled_files)
    except LanebookError as exc:
        plan.blockers = blockers + [f"the new checkout with the lane's env file: {exc}"]
        plan.verdict = BLOCKED
        return plan
    new_side = _render(params, pulled_files, keys)
    render = new_side.plan
    plan.lane_values = _lane_values(params, pulled, render)
    if render is None:
        plan.blockers = blockers + [f"render on the new checkout: {new_side.problem}"]
        plan.verdict = BLOCKED
        return plan
    new_eff = render.effective
    plan.notices = [n for n in dict.fromkeys([old_plan.effective.notice, new_eff.notice]) if n]
    plan.render_writes = {target: env_text(params.env[key]) for target, key in render.carries.items()}
    plan.render_diff = _relative(render.diff, new_prefix)
    blockers += [f"render cannot make the new checkout run it: {m.message()}" for m in render.unresolved]
    if new_eff.spec.entrypoint_error:
        blockers.append(f"the image's entrypoint refuses the new configuration: {new_eff.spec.entrypoint_error[1]}")
    old_required = set(required_keys(old))
    for key in required_keys(new):
        value = new_eff.variable(key)
        shown = value.value if value is not None and value.value else None
        if key not in params.env and (key not in old_required or shown is None):
            plan.required.append(RequiredKey(key, shown, key not in old_required))
        if shown is None:
            blockers.append(f"the new launcher requires {key}, which the env file does not set")
    plan.differences = server_differences(server_side(old_plan.effective), server_side(new_eff))
    plan.new_defaults = _new_defaults(plan.differences, new_eff, new_prefix)
    plan.lint_new = _lint_notes(params, old_plan, render)
    plan.example_moved = _example_moved(old, new, new_eff, new_prefix)
    plan.blockers = blockers
    plan.verdict = verdict_of(blockers, plan.differences)
    return plan


def _example_moved(old: CheckoutFiles, new: CheckoutFiles, new_eff: Effective, prefix: str) -> list[ExampleMoved]:
    """The example lines that moved between the two checkouts, where the kept env file (rendered) sets the key."""
    if old.example is None or new.example is None:
        return []
    before = {e.key: e.value for e in parse_env_text(old.example.text)}
    after = {e.key: (e.value, _where(new.example.at(e.line), prefix)) for e in parse_env_text(new.example.text)}
    kept = {k: s.value for k, s in new_eff.variables.items() if s.value is not None}
    return example_moved(before, after, kept)


def plan_checkouts(params: LaneParams, old_dir: str | Path, new_dir: str | Path) -> UpgradePlan:
    """The plan between two local checkout directories (each must hold the recipe's compose file). Each is read by
    its absolute path: Compose resolves the relative mounts against it, so the two sides name them alike."""
    return plan_upgrade(params, CheckoutFiles.read(_absolute(old_dir)), CheckoutFiles.read(_absolute(new_dir)))


def _absolute(directory: str | Path) -> str | Path:
    try:
        return Path(directory).expanduser().absolute()
    except RuntimeError:  # ~NAME of no such user: CheckoutFiles.read says so
        return directory


# --- the record ----------------------------------------------------------------------------------------


def write_plan(plan: UpgradePlan) -> Path:
    """Record PLAN as outputs/LANE/UTCSTAMP-upgrade-ID.json (atomically, secrets redacted; a name never reused) and
    return its path."""
    plan.plan_id = plan.plan_id or record_id()
    path = outputs_dir() / plan.lane / f"{utc_stamp()}-upgrade-{plan.plan_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(exist_ok=False)  # claim the name: never overwrite an earlier record
    write_atomic(path, json.dumps(plan.to_json(), indent=2) + "\n")
    return path


def read_plan(path: str | Path) -> UpgradePlan:
    try:
        return UpgradePlan.from_json(json.loads(Path(path).read_text()))
    except (OSError, ValueError) as exc:
        raise LanebookError(f"{path}: not a readable upgrade plan ({exc})") from None


def recorded_plans() -> list[tuple[Path, UpgradePlan]]:
    """Every recorded plan under outputs/, oldest first (a file that is not a plan is left out)."""
    found = []
    for path in sorted(outputs_dir().glob("*/*-upgrade-*.json"), key=lambda p: p.name):
        try:
            found.append((path, read_plan(path)))
        except LanebookError:
            continue
    return found


# --- showing it ----------------------------------------------------------------------------------------

ABSENT = "absent"


def shown_value(value: Optional[str]) -> str:
    """A side's value as a plan shows it: absent, (set) for a switch without a value, (empty), else the value."""
    if value is None:
        return ABSENT
    if value == "":
        return "(empty)"
    return value


def difference_line(d: Difference) -> str:
    rank = "" if d.rank == "both" else f" [{d.rank}]"
    old = "(set)" if d.kind == "flag" and d.old == "" else shown_value(d.old)
    new = "(set)" if d.kind == "flag" and d.new == "" else shown_value(d.new)
    return f"{d.kind} {d.name}{rank}: {old} -> {new}"


def plan_text(plan: UpgradePlan, shown: Callable[[str], str] = str) -> str:
    """The plan as text, the verdict last (SHOWN maps local paths where a page shows them)."""
    lines = [f"upgrade plan for lane {plan.lane}: {shown(plan.old)} -> {shown(plan.new)}"]
    if plan.decided_by:
        lines.append(f"decided by: {shown(plan.decided_by)}")
    lines += [f"notice: {n}" for n in plan.notices]
    sections: list[tuple[str, list[str]]] = [
        ("what vllm serve gets", [difference_line(d) for d in plan.differences]),
        (
            "lane values after the pull (before render)",
            [
                f"{v.key} ({v.status}): lane {v.lane}; runs {v.after_pull}; {v.detail}"
                + (f"; render writes {v.render}" if v.render else "")
                for v in plan.lane_values
            ],
        ),
        ("render writes on the new checkout", [f"{k}={v}" for k, v in plan.render_writes.items()]),
        (
            "keys the new launcher requires that the lane does not set",
            [
                f"{r.key}: {'unset' if r.value is None else r.value}" + (" (newly required)" if r.new else "")
                for r in plan.required
            ],
        ),
        (
            "new defaults that reach the server",
            [
                f"{n.kind}: {n.name} {shown_value(n.old)} -> {shown_value(n.new)} ({n.source})"
                for n in plan.new_defaults
            ],
        ),
        (
            "the recipe's example moved; the kept env file keeps its value",
            [
                f"{m.key}: kept {m.kept}; example {shown_value(m.old_example)} -> {m.new_example} ({m.source})"
                for m in plan.example_moved
            ],
        ),
        ("lint finds on the new side only", [f"{n.id} {n.severity} {n.where} {n.message}" for n in plan.lint_new]),
        ("blocked by", plan.blockers),
    ]
    for title, items in sections:
        if items:
            lines += ["", f"{title}:"] + [f"  {shown(redact(item))}" for item in items]
    lines += ["", f"verdict: {plan.verdict}" + (f" ({len(plan.differences)} differences)" if plan.differences else "")]
    return "\n".join(lines)


def print_plan(plan: UpgradePlan) -> None:
    from rich.console import Console
    from rich.markup import escape

    colour = {SAME: "green", CHANGES: "yellow", BLOCKED: "red"}[plan.verdict]
    console = Console(soft_wrap=True, highlight=False)
    *body, last = plan_text(plan).splitlines()
    for line in body:
        console.print(escape(line))
    console.print(f"[{colour}]{escape(last)}[/{colour}]")
