"""The served lanes page: what `lanebook watch` saw of each watched lane, read from its files under outputs/watch/LANE/
(their formats: lanebook.runs.watch.FILES). Per lane: availability from the client's probes (the share of rounds
served, over the whole series and its last seven days, and the minutes not served), the incidents (cause, the
doctor's finding, the remedies and the runs they started, when detected, repaired and served again), the pages sent,
speed waves against the lane's band, and the link's figures per rail. A twin lane's figures are labelled twin.

Read-only: the page runs nothing. The arithmetic is pure functions of the records (`stretches`, `availability`,
`downtime_s`, `incident_times`, `speed_points`, `link_series`, `page_counts`); `plot_watch` only draws. Every text
taken from a record is redacted before it is shown, and a page's target (a command, a webhook) is never shown.
"""

from __future__ import annotations

import io
import posixpath
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Optional

from lanebook.base.redact import redact
from lanebook.lane.params import TWIN_FIGURES
from lanebook.site.pages.markup import badge, cell, figures_badge, md_table, wide
from lanebook.verify.link import DEGRADED_BELOW_GBPS, HEALTHY_GBPS, PR_108
from lanebook.verify.watch_probe import relaunch_can_fix

DOC = "watch"
DAY_S = 86400.0
RECENT_DAYS = 7
DETAILED = 30  # incidents shown in detail (the newest); every incident is in the summary table
LATEST_WAVES = 8
STATE_CLASSES = {"closed": "pass", "open": "fail", "repairing": "warning", "waiting": "warning",
                 "needs operator": "fail", "paged": "warning"}  # fmt: skip


@dataclass(frozen=True)
class WatchedLane:
    """One lane's watch files, as read (oldest first), and how its figures are labelled (its `figures_label`)."""

    lane_name: str
    figures_label: str
    probes: list[dict] = field(default_factory=list)
    incidents: list[dict] = field(default_factory=list)
    speed: list[dict] = field(default_factory=list)
    link: list[dict] = field(default_factory=list)
    pages: list[dict] = field(default_factory=list)
    state: dict = field(default_factory=dict)

    @property
    def twin(self) -> bool:
        return self.figures_label == TWIN_FIGURES


# --- arithmetic (pure) -------------------------------------------------------------------------------------------


def in_window(records: Iterable[dict], since: Optional[float] = None) -> list[dict]:
    """The records with a time, oldest first; those at or after SINCE when given."""
    found = [r for r in records if isinstance(r.get("t"), (int, float))]
    return sorted((r for r in found if since is None or r["t"] >= since), key=lambda r: r["t"])


def stretches(probes: Iterable[dict]) -> list[tuple[float, float, bool]]:
    """(start, end, served) of each run of rounds alike in being served: from its first round to the next run's first
    round, the last run to its last round."""
    out: list[list] = []
    for record in in_window(probes):
        served = bool(record.get("served"))
        if out and out[-1][2] == served:
            out[-1][1] = record["t"]
            continue
        if out:
            out[-1][1] = record["t"]
        out.append([record["t"], record["t"], served])
    return [(start, end, served) for start, end, served in out]


def availability(probes: Iterable[dict], since: Optional[float] = None) -> Optional[float]:
    """The share of rounds (at or after SINCE) in which a client was served; None for no rounds."""
    rounds = in_window(probes, since)
    return sum(bool(r.get("served")) for r in rounds) / len(rounds) if rounds else None


def downtime_s(probes: Iterable[dict], since: Optional[float] = None) -> float:
    """Seconds not served (rounds at or after SINCE): from each unserved run's first round to the next served round,
    or to the series' last round while it lasts."""
    return sum(end - start for start, end, served in stretches(in_window(probes, since)) if not served)


def incident_times(incident: dict) -> dict:
    """An incident's spans in seconds, each None when it has not happened: detected (from the first failed round),
    repaired and served again (from the first failed round: the client's wait), open for (detected to closed)."""
    first = incident.get("first_failed_at")

    def since(key: str, start: Optional[float]) -> Optional[float]:
        at = incident.get(key)
        return None if at is None or start is None else at - start

    return {
        "detected_after_s": since("detected_at", first),
        "repaired_after_s": since("repaired_at", first),
        "served_again_after_s": since("served_again_at", first),
        "open_for_s": since("closed_at", incident.get("detected_at")),
    }


def speed_points(speed: Iterable[dict]) -> tuple[list[dict], list[dict]]:
    """(the waves that ran, the attempts skipped), oldest first; a wave: t, value (stream decode tok/s or None),
    band_min, band_median, below, regression."""
    waves, skipped = [], []
    for record in in_window(speed):
        if "skipped" in record:
            skipped.append(record)
            continue
        waves.append(
            {
                "t": record["t"],
                "value": record.get("stream_decode_tok_s"),
                "band_min": record.get("band_min"),
                "band_median": record.get("band_median"),
                "below": bool(record.get("below")),
                "regression": bool(record.get("regression")),
            }
        )
    return waves, skipped


def link_series(link: Iterable[dict]) -> dict[str, list[tuple[float, Optional[float]]]]:
    """Per rail ("WORKER RAIL"), (t, Gb/s or None) of each measured link attempt, oldest first; NCCL's bus bandwidth
    (GB/s) under "NCCL bus bandwidth" where it was measured."""
    out: dict[str, list[tuple[float, Optional[float]]]] = {}
    for record in in_window(link):
        report = record.get("report") or {}
        for rail in report.get("rails") or []:
            out.setdefault(f"{rail.get('worker')} {rail.get('rail')}", []).append((record["t"], rail.get("gbps")))
        busbw = (report.get("nccl") or {}).get("bus_bandwidth_gbs")
        if busbw is not None:
            out.setdefault("NCCL bus bandwidth", []).append((record["t"], busbw))
    return out


def page_counts(pages: Iterable[dict]) -> dict[str, tuple[int, int]]:
    """Per event, (attempts that were sent, attempts that failed), in the order events first appear."""
    sent: Counter = Counter()
    failed: Counter = Counter()
    order: dict[str, None] = {}
    for record in pages:
        event = str(record.get("event"))
        order.setdefault(event, None)
        (sent if record.get("ok") else failed)[event] += 1
    return {event: (sent[event], failed[event]) for event in order}


# --- words -------------------------------------------------------------------------------------------------------


def when(t: Optional[float]) -> str:
    """An epoch time as UTC, to the second; a dash for none."""
    return "—" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def duration(seconds: Optional[float]) -> str:
    """A span in words: 42.0 s, 3 min 5 s, 2 h 4 min, 3 d 2 h; a dash for none."""
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < DAY_S:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def share(value: Optional[float]) -> str:
    return "—" if value is None else f"{100 * value:.2f} %"


def said(value: object, limit: int = 240) -> str:
    """A record's text, redacted, on one line and cut to LIMIT characters, safe in a table cell."""
    text = redact(" ".join(str(value).split()))
    return cell(text if len(text) <= limit else text[: limit - 1] + "…")


def run_link(run_id: Optional[str], run_docs: dict[str, str], from_doc: str = DOC) -> str:
    """A run as a link to its page in the book, or its id where the book does not publish it."""
    if not run_id:
        return "no run recorded"
    doc = run_docs.get(run_id)
    if doc is None:
        return f"`{run_id}`"
    return f"[{run_id}]({posixpath.relpath(doc, posixpath.dirname(from_doc) or '.')}.ipynb)"


def doctor_said(doctor: Optional[dict]) -> str:
    """The doctor's finding in one line: what it confirmed (id and title), else its suspects, else why none."""
    if not doctor:
        return "not asked"
    if doctor.get("error"):
        return "could not read the lane: " + said(doctor["error"], 160)
    confirmed = doctor.get("confirmed") or []
    if confirmed:
        return "; ".join(said(f"{f.get('id')} {f.get('title')}", 120) for f in confirmed[:3])
    suspected = doctor.get("suspected") or []
    if suspected:
        return "nothing confirmed; suspected " + said(", ".join(map(str, suspected[:5])))
    return "nothing confirmed"


def remedies_said(incident: dict) -> str:
    """The remedies in a few words: each action and whether it passed; what a relaunch cannot fix says paged."""
    remedies = incident.get("remedies") or []
    if remedies:
        return ", ".join(f"{said(r.get('action'))} {'passed' if r.get('ok') else 'did not pass'}" for r in remedies)
    if not relaunch_can_fix(str(incident.get("cause"))):
        return "paged, nothing relaunched"
    return "none yet"


# --- the page ----------------------------------------------------------------------------------------------------


def availability_table(lane: WatchedLane) -> str:
    rounds = in_window(lane.probes)
    if not rounds:
        return "No probe round recorded.\n"
    first, last = rounds[0]["t"], rounds[-1]["t"]
    spans = [(f"whole series ({when(first)} → {when(last)})", None)]
    if last - first > RECENT_DAYS * DAY_S:
        spans.append((f"last {RECENT_DAYS} days of the series (to its last round)", last - RECENT_DAYS * DAY_S))
    rows = []
    for label, since in spans:
        window = in_window(rounds, since)
        rows.append(
            [
                label,
                len(window),
                sum(bool(r.get("served")) for r in window),
                share(availability(window)),
                duration(downtime_s(window)),
            ]
        )
    note = (
        ""
        if len(spans) > 1
        else f" The series is shorter than {RECENT_DAYS} days, so its last {RECENT_DAYS} days are the whole of it."
    )
    return (
        "A round is served when `/health` answered 200, `/v1/models` listed the model and the one-token chat "
        "answered. Not served: from a round not served to the next round served." + note + "\n\n"
        + md_table(["span (UTC)", "rounds", "served", "share served", "not served for"], rows)
    )  # fmt: skip


def incidents_part(lane: WatchedLane, run_docs: dict[str, str]) -> str:
    if not lane.incidents:
        return "### Incidents\n\nNo incident.\n"
    rows = []
    for incident in reversed(lane.incidents):
        times = incident_times(incident)
        rows.append(
            [
                when(incident.get("detected_at")),
                said(incident.get("cause")),
                badge(str(incident.get("state")), STATE_CLASSES.get(str(incident.get("state")), "unknown")),
                remedies_said(incident),
                duration(times["served_again_after_s"]),
                len(incident.get("pages") or []),
            ]
        )
    parts = [
        f"### Incidents\n\n{len(lane.incidents)} incident(s), newest first. Served again after: from the first failed "
        "round to the round that served a client again.\n",
        wide(md_table(["detected (UTC)", "cause", "state", "remedy", "served again after", "pages"], rows)),
    ]
    shown = list(reversed(lane.incidents))[:DETAILED]
    if len(lane.incidents) > DETAILED:
        parts.append(f"The newest {DETAILED} in detail:\n")
    parts += [incident_detail(incident, run_docs) for incident in shown]
    return "\n".join(parts)


def incident_detail(incident: dict, run_docs: dict[str, str]) -> str:
    times = incident_times(incident)
    lines = [f"#### {said(incident.get('cause'))} at {when(incident.get('detected_at'))}\n"]
    lines.append(f"- **Incident** `{said(incident.get('id'))}` on lane `{said(incident.get('lane'))}`: "
                 f"{said(incident.get('summary') or '')}")  # fmt: skip
    if incident.get("first_failed_at") is not None:
        lines.append(
            f"- **Times (UTC):** first failed round {when(incident.get('first_failed_at'))}; detected "
            f"{when(incident.get('detected_at'))} (after {duration(times['detected_after_s'])}, "
            f"{incident.get('detection_rounds', '—')} rounds); repaired {when(incident.get('repaired_at'))}; served "
            f"again {when(incident.get('served_again_at'))} (after {duration(times['served_again_after_s'])})"
        )
    else:
        lines.append(
            f"- **Times (UTC):** detected {when(incident.get('detected_at'))}; closed {when(incident.get('closed_at'))}"
        )
    if "doctor" in incident:
        lines.append(f"- **Doctor:** {doctor_said(incident.get('doctor'))}")
        fixes = [f for f in (incident.get("doctor") or {}).get("confirmed") or [] if f.get("fix")]
        if fixes:
            lines.append(f"- **Its fix:** {said(fixes[0]['fix'])}")
    for finding in incident.get("findings") or []:  # the first finding's cause is the summary already
        if finding.get("cause") != incident.get("summary"):
            lines.append(f"- **Finding:** {said(finding.get('cause'))}")
        lines.append(f"- **Fix:** {said(finding.get('fix'))}")
    for remedy in incident.get("remedies") or []:
        runs = ", ".join(
            f"{said(r.get('runbook'))} {run_link(r.get('run_id'), run_docs)} {said(r.get('verdict'))}"
            for r in remedy.get("runs") or []
        )
        lines.append(
            f"- **{said(remedy.get('action')).capitalize()}** at {when(remedy.get('t'))}, "
            f"{'passed' if remedy.get('ok') else 'did not pass'} ({said(remedy.get('why'))}): {runs or 'no run'}"
        )
    probes = incident.get("probes") or []
    if probes:
        last = probes[-1]
        failures = "; ".join(map(str, last.get("failures") or []))
        lines.append(f"- **Failed rounds kept:** {len(probes)}; the last: {said(failures or 'no detail')}")
    waits = incident.get("waits") or []
    if waits:
        lines.append(f"- **Waited** {len(waits)} time(s); the last: {said(waits[-1].get('why'))}")
    pages = incident.get("pages") or []
    lines.append(f"- **Pages:** {', '.join(said(p.get('event')) for p in pages) or 'none sent'}")
    return "\n".join(lines) + "\n"


def pages_part(lane: WatchedLane) -> str:
    counts = page_counts(lane.pages)
    if not counts:
        return "### Pages\n\nNo page sent.\n"
    sent = sum(s for s, _ in counts.values())
    failed = sum(f for _, f in counts.values())
    return (
        f"### Pages\n\n{sent} page(s) sent, {failed} attempt(s) failed (a failed page is tried again). Where pages "
        "go is not shown.\n\n"
        + md_table(["event", "sent", "failed attempts"], [[e, s, f] for e, (s, f) in counts.items()])
    )


def speed_part(lane: WatchedLane) -> str:
    waves, skipped = speed_points(lane.speed)
    if not waves and not skipped:
        return "### Speed\n\nNo speed wave yet.\n"
    below = sum(w["below"] for w in waves)
    regressions = sum(w["regression"] for w in waves)
    no_figure = sum(w["value"] is None for w in waves)
    reasons = Counter(said(s["skipped"], 120) for s in skipped).most_common(2)
    text = (
        f"### Speed\n\n{len(waves)} wave(s) of one stream against the lane's stored C1 band, {below} below its "
        "minimum"
        + (f" ({no_figure} with no figure: its request failed)" if no_figure else "")
        + f", {regressions} judged a regression (several waves in a row below it: one wave is never one); "
        f"{len(skipped)} attempt(s) skipped"
        + (": " + "; ".join(f"{why} ({n}×)" for why, n in reasons) if reasons else "")
        + ".\n"
    )
    rows = [
        [
            when(w["t"]),
            "—" if w["value"] is None else f"{w['value']:.1f}",
            "—" if w["band_min"] is None else f"{w['band_min']:.1f}",
            "—" if w["band_median"] is None else f"{w['band_median']:.1f}",
            badge("below", "fail") if w["below"] else badge("within", "pass"),
            badge("regression", "fail") if w["regression"] else "",
        ]
        for w in reversed(waves[-LATEST_WAVES:])
    ]
    if rows:
        unit = f"tok/s, {lane.figures_label} figures"
        text += f"\nThe latest waves, newest first ({unit}):\n\n" + md_table(
            ["wave (UTC)", "stream decode", "band min", "band median", "against the band", "regression"], rows
        )
    return text


def link_part(lane: WatchedLane) -> str:
    attempts = in_window(lane.link)
    if not attempts:
        return "### Link\n\nNo link measurement yet.\n"
    measured = [a for a in attempts if a.get("report")]
    unmeasured = [a for a in attempts if not a.get("report")]
    text = f"### Link\n\n{len(attempts)} attempt(s), {len(measured)} measured"
    if unmeasured:
        text += f"; not measured {len(unmeasured)}× (the last: {said(unmeasured[-1].get('why') or 'no reason given')})"
    text += ".\n"
    if not measured:
        return text
    latest = measured[-1]
    report = latest["report"]
    rows = [
        [
            said(r.get("worker")),
            f"`{said(r.get('rail'))}`",
            "—" if r.get("gbps") is None else f"{r['gbps']:.1f}",
            said(((r.get("head") or {}).get("mtu")) or "—"),
            said(r.get("not_measured") or ""),
        ]
        for r in report.get("rails") or []
    ]
    header = ["worker", "rail", "Gb/s", "MTU (head)", "not measured because"]
    if not any(row[-1] for row in rows):
        header, rows = header[:-1], [row[:-1] for row in rows]
    text += (
        f"\nThe latest measurement, {when(latest['t'])} ({lane.figures_label} figures; healthy rails measure "
        f"{HEALTHY_GBPS[0]:g}–{HEALTHY_GBPS[1]:g} Gb/s with `ib_write_bw`, [dgx-spark-playbooks PR 108]({PR_108})):\n\n"
        + md_table(header, rows)
    )
    nccl = report.get("nccl") or {}
    busbw, note = nccl.get("bus_bandwidth_gbs"), said(nccl.get("note") or "")
    if busbw is not None:
        text += f"\nNCCL bus bandwidth: {busbw:.2f} GB/s.\n"
    else:
        text += f"\nNCCL bus bandwidth: {note if note.startswith('not measured') else f'not measured ({note})'}.\n"
    findings = report.get("findings") or []
    if findings:
        text += "\n" + md_table(
            ["finding", "severity", "cause", "fix"],
            [[said(f.get("id")), said(f.get("severity")), said(f.get("cause")), said(f.get("fix"))] for f in findings],
        )
    else:
        text += "\nNo finding.\n"
    return text


def picture_name(lane_name: str) -> str:
    return f"watch-{lane_name}.png"


def plot_since(lane: WatchedLane) -> Optional[float]:
    """Where the plot starts: RECENT_DAYS before the latest record of the probes, speed and link series."""
    times = [r["t"] for series in (lane.probes, lane.speed, lane.link) for r in in_window(series)]
    return max(times) - RECENT_DAYS * DAY_S if times else None


def plot_watch(lane: WatchedLane) -> Optional[bytes]:
    """PNG of the last RECENT_DAYS of the series, panels sharing one UTC time axis: the rounds served and not, the
    speed waves against the band (regressions marked), each rail's Gb/s against the public thresholds; None when
    there is nothing to draw."""
    since = plot_since(lane)
    runs = stretches(in_window(lane.probes, since))
    waves, _ = speed_points(in_window(lane.speed, since))
    rails = {k: v for k, v in link_series(in_window(lane.link, since)).items() if k != "NCCL bus bandwidth"}
    panels = [name for name, have in (("served", runs), ("speed", waves), ("link", rails)) if have]
    if not panels:
        return None
    from datetime import datetime, timezone

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    def x(t: float):
        return datetime.fromtimestamp(t, tz=timezone.utc)

    times = [t for start, end, _ in runs for t in (start, end)] + [w["t"] for w in waves]
    times += [t for points in rails.values() for t, _ in points]
    first, last = min(times), max(times)
    span = max(last - first, 60.0)
    heights = {"served": 1.0, "speed": 2.4, "link": 2.2}  # inches, each with its legend above it
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(8, 1.0 + sum(heights[p] for p in panels)),
        sharex=True,
        squeeze=False,
        gridspec_kw={"height_ratios": [heights[p] for p in panels]},
    )
    for ax, panel in zip(axes[:, 0], panels):
        if panel == "served":
            for start, end, served in runs:  # a short outage is drawn wide enough to see
                width = max(end - start, 0.0 if served else span / 250) / DAY_S  # matplotlib dates are days
                ax.broken_barh([(mdates.date2num(x(start)), width)], (0, 1), color="#1a7f37" if served else "#cf222e")
            ax.set_yticks([])
            ax.set_ylabel("rounds", rotation=0, ha="right", va="center")
            ax.plot([], [], "s", color="#1a7f37", label="served")
            ax.plot([], [], "s", color="#cf222e", label="not served")
        elif panel == "speed":
            kinds = {
                "within the band": [w for w in waves if w["value"] is not None and not w["below"]],
                "below its min": [w for w in waves if w["value"] is not None and w["below"] and not w["regression"]],
            }
            for (name, shown), colour in zip(kinds.items(), ("#0969da", "#bc4c00")):
                if shown:
                    ax.plot([x(w["t"]) for w in shown], [w["value"] for w in shown], "o", ms=5, color=colour,
                            label=f"wave, {name}")  # fmt: skip
            bad = [(x(w["t"]), w["value"]) for w in waves if w["value"] is not None and w["regression"]]
            if bad:
                ax.plot([p[0] for p in bad], [p[1] for p in bad], "X", ms=9, color="#cf222e", label="regression")
            for key, style, name in (("band_min", ":", "band min"), ("band_median", "--", "band median")):
                points = [(w["t"], w[key]) for w in waves if w[key] is not None]
                if points:  # each band value holds from its wave to the next, the last to the plot's end
                    points.append((max(last, points[-1][0]), points[-1][1]))
                    ax.step([x(t) for t, _ in points], [v for _, v in points], where="post", linestyle=style,
                            color="#57606a", lw=1.3, label=name)  # fmt: skip
            ax.set_ylabel("stream decode\ntok/s")
            seen = [v for w in waves for v in (w["value"], w["band_min"], w["band_median"]) if v is not None]
            if seen:  # around the band and the waves, so a wave just below the band shows as below it
                low, high = min(seen), max(seen)
                pad = max((high - low) * 0.25, high * 0.03)
                ax.set_ylim(max(low - pad, 0), high + pad)
        else:
            for name, points in sorted(rails.items()):
                measured = [(x(t), v) for t, v in points if v is not None]
                ax.plot([p[0] for p in measured], [p[1] for p in measured], "o-", ms=5, lw=1, label=name)
            ax.axhspan(HEALTHY_GBPS[0], HEALTHY_GBPS[1], color="#1a7f37", alpha=0.15, label="healthy 92-97 (PR 108)")
            ax.axhline(DEGRADED_BELOW_GBPS, color="#cf222e", linestyle="--", lw=1, label="degraded below 40")
            ax.set_ylabel("ib_write_bw\nGb/s")
            ax.set_ylim(0, max([HEALTHY_GBPS[1] * 1.1] + [v for p in rails.values() for _, v in p if v is not None]))
        ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=4, frameon=False, borderaxespad=0.2)
        ax.grid(alpha=0.3)
    bottom = axes[-1, 0]
    bottom.set_xlim(x(first - span * 0.02), x(last + span * 0.02))
    locator = mdates.AutoDateLocator(tz=timezone.utc, minticks=4, maxticks=8)
    bottom.xaxis.set_major_locator(locator)
    bottom.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=timezone.utc))
    bottom.set_xlabel("UTC")
    kind = "TWIN figures" if lane.twin else "REAL lane figures"
    fig.suptitle(f"{lane.lane_name} · {kind} · what the watch saw (its last {RECENT_DAYS} days)", fontsize=10)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    plt.close(fig)
    return out.getvalue()


def watcher_line(lane: WatchedLane) -> str:
    state = lane.state
    if not state:
        return "No watcher state recorded.\n"
    last = state.get("last_probe") or {}
    serving = state.get("serving_lane")
    return (
        f"**Watcher:** {said(state.get('state', 'unknown'))} at {when(state.get('updated_at'))} UTC, "
        f"{state.get('rounds', 0)} rounds, every {state.get('interval_s', '—')} s"
        + (f"; serving the rollback lane `{said(serving)}`" if serving and serving != lane.lane_name else "")
        + (f". Last round: {said(last_round(last))}" if last else "")
        + ".\n"
    )


def last_round(record: dict) -> str:
    if record.get("healthy"):
        return f"healthy, served in {record.get('chat_s')} s"
    return f"{record.get('cause')}: " + "; ".join(map(str, record.get("failures") or record.get("errors") or []))


def lane_section(lane: WatchedLane, run_docs: dict[str, str]) -> tuple[str, Optional[bytes]]:
    """The lane's part of the page and its plot (None when there is nothing to draw)."""
    picture = plot_watch(lane)
    title = (
        f"## {lane.lane_name}\n\n{figures_badge(lane.figures_label)}"
        + (" Every figure here is a twin figure, never a real lane's." if lane.twin else "")
        + "\n\n"
        + watcher_line(lane)
    )
    parts = [title]
    if picture is not None:
        parts.append(
            f"```{{figure}} {picture_name(lane.lane_name)}\n:alt: what the watch saw of {lane.lane_name}\n"
            f":width: 100%\n\n{lane.lane_name}, the last {RECENT_DAYS} days of the series: rounds served, speed waves "
            f"against the band and the link per rail ({lane.figures_label} figures only).\n```\n"
        )
    parts += [
        "### Availability\n\n" + availability_table(lane),
        incidents_part(lane, run_docs),
        pages_part(lane),
        speed_part(lane),
        link_part(lane),
    ]
    return "\n".join(parts), picture


def watch_page(
    watched: list[WatchedLane], unwatched: list[str], run_docs: dict[str, str]
) -> tuple[str, dict[str, bytes]]:
    """The page and its pictures (file name -> PNG); run_docs: run id -> its page in the book."""
    head = (
        "# Served lanes\n\nWhat `lanebook watch` saw of each lane it watches, from the files under "
        "`outputs/watch/LANE/`: whether clients were served, each incident with its cause, the doctor's finding, the "
        "remedy and the runs it started, the pages sent, and the lane's speed and link over time. Building this page "
        "runs nothing.\n"
    )
    pictures: dict[str, bytes] = {}
    sections = []
    for lane in watched:
        text, picture = lane_section(lane, run_docs)
        sections.append(text)
        if picture is not None:
            pictures[picture_name(lane.lane_name)] = picture
    if not watched:
        head += "\nNo lane has been watched yet.\n"
    if unwatched:
        head += f"\nNot watched (nothing under `outputs/watch/`): {', '.join(f'`{n}`' for n in unwatched)}.\n"
    return "\n".join([head, *sections]), pictures
