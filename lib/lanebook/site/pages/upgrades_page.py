"""The upgrade plans: an index of every recorded plan, and a page per plan with the before/after table an operator
reviews before saying yes to moving a lane's checkout (lanebook.recipe.upgrade_plan writes the records).

Pure over the plans: the book stages each as upgrades/LANE-STEM (STEM is the record's UTCSTAMP-upgrade-ID), reached
from the index, not the sidebar. Paths of the machine that planned are shown as a page shows them (base.paths).
"""

from __future__ import annotations

from dataclasses import dataclass

from lanebook.base.paths import shown_paths
from lanebook.recipe.upgrade_plan import BLOCKED, CHANGES, SAME, UpgradePlan, shown_value
from lanebook.site.pages.markup import badge, figures_badge, md_table, wide

VERDICT_BADGES = {SAME: "pass", CHANGES: "warning", BLOCKED: "fail"}
RANKS = {"both": "head and worker", "head": "head", "worker": "worker"}


@dataclass(frozen=True)
class PublishedPlan:
    plan: UpgradePlan
    doc: str  # its page, without suffix: upgrades/LANE-STEM


def plan_doc(lane_name: str, stem: str) -> str:
    return f"upgrades/{lane_name}-{stem}"


def verdict_badge(verdict: str) -> str:
    return badge(verdict, VERDICT_BADGES.get(verdict, "unknown"))


def _code(value: str) -> str:
    return "`" + value.replace("`", "'") + "`"


def _value(value: str | None, switch: bool = False) -> str:
    if switch and value == "":
        return "set"
    return _code(value) if value else shown_value(value)


def _section(title: str, intro: str, body: str) -> list[str]:
    return [f"## {title}\n", intro + "\n", body]


def upgrade_page(plan: UpgradePlan) -> str:
    """One plan: what the server gets before and after, what the pull does to the lane's values, what render writes,
    what the new launcher requires and brings, new lint findings, and the verdict."""
    parts = [
        "---\norphan: true\n---\n",
        f"# Upgrade plan · {plan.lane} · {plan.created_at}\n",
        f"{figures_badge(plan.figures_label)} {verdict_badge(plan.verdict)}\n",
        f"From the checkout `{shown_paths(plan.old)}` to `{shown_paths(plan.new)}`, the lane rendered into each "
        f"(nothing written to either), each side's container as {shown_paths(plan.decided_by) or 'Compose'} decides "
        f"it with that side's launcher exports. Record `{plan.plan_id}`.\n",
    ]
    parts += [f"Notice: {shown_paths(n)}\n" for n in plan.notices]
    if plan.blockers:
        parts += _section(
            "Blocked",
            "The new checkout cannot run the lane as its file says:",
            "".join(f"- {b}\n" for b in plan.blockers),
        )
    rows = [
        [
            d.kind,
            _code(d.name),
            RANKS.get(d.rank, d.rank),
            _value(d.old, d.kind == "flag"),
            _value(d.new, d.kind == "flag"),
        ]
        for d in plan.differences
    ]
    parts += _section(
        "What vllm serve gets",
        "Before is the lane on the old checkout, after the lane on the new one, both as render leaves them."
        if rows
        else "Nothing the server gets changes: flags, speculative config, environment, image and mounts are the same.",
        wide(md_table(["kind", "name", "rank", "before", "after"], rows)) if rows else "",
    )
    if plan.lane_values:
        parts += _section(
            "The lane's values after the pull",
            "The new checkout with the env file the lane has now, before render writes anything:",
            wide(
                md_table(
                    ["key", "lane", "runs after the pull", "why", "render writes"],
                    [
                        [_code(v.key), _code(v.lane), v.after_pull, f"{v.status}: {v.detail}", v.render]
                        for v in plan.lane_values
                    ],
                )
            ),
        )
    if plan.render_writes:
        parts += _section(
            "What render writes",
            "So that the lane runs as its file says on the new checkout:",
            "".join(f"- `{k}={v}`\n" for k, v in plan.render_writes.items()),
        )
    if plan.required:
        rows = [[_code(r.key), _value(r.value), "yes" if r.new else "no"] for r in plan.required]
        parts += _section(
            "Keys the new launcher requires",
            "Required by the new launcher and not set by the lane file:",
            md_table(["key", "the env file gives", "newly required"], rows),
        )
    if plan.new_defaults:
        rows = [[n.kind, _code(n.name), _value(n.old), _value(n.new), n.source] for n in plan.new_defaults]
        parts += _section(
            "New defaults that reach the server",
            "Values no env line sets: the new checkout's compose file or launcher decides them.",
            wide(md_table(["kind", "name", "before", "after", "default at"], rows)),
        )
    if plan.example_moved:
        rows = [
            [_code(m.key), _value(m.kept), _value(m.old_example), _value(m.new_example), m.source]
            for m in plan.example_moved
        ]
        parts += _section(
            "The recipe's example moved",
            "Lines the new example changed that the kept `.env.dspark` still sets: the server keeps the lane's value; "
            "the recipe now suggests the new one.",
            wide(md_table(["key", "kept", "old example", "new example", "at"], rows)),
        )
    if plan.lint_new:
        rows = [[n.id, n.severity, n.where, n.message] for n in plan.lint_new]
        parts += _section(
            "Lint on the new checkout only",
            "Findings the new side has that the old side did not:",
            wide(md_table(["id", "severity", "where", "message"], rows)),
        )
    return "\n".join(parts)


def upgrades_index(plans: list[PublishedPlan]) -> str:
    """Every recorded plan, newest first, each linking to its page."""
    head = (
        "# Upgrade plans\n\nBefore a lane's checkout moves to another recipe commit, `lanebook upgrade` plans the "
        "move: what `vllm serve` gets on each rank before and after, the lane values the new checkout stops reading, "
        "and what render writes so the lane still runs as its file says. A plan observes no node: it reads two "
        "checkouts.\n"
    )
    if not plans:
        return (
            head + "\nNo plan recorded yet. `lanebook upgrade --lane LANE --from DIR --to DIR --record` records one.\n"
        )
    rows = [
        [
            p.plan.created_at,
            figures_badge(p.plan.figures_label),
            p.plan.lane,
            f"`{shown_paths(p.plan.old)}` → `{shown_paths(p.plan.new)}`",
            verdict_badge(p.plan.verdict),
            len(p.plan.differences),
            f"[{p.plan.plan_id}]({p.doc}.md)",
        ]
        for p in sorted(plans, key=lambda p: p.plan.created_at, reverse=True)
    ]
    table = md_table(["planned (UTC)", "where", "lane", "checkouts", "verdict", "differences", "plan"], rows)
    return head + "\n" + wide(table)
