"""`lanebook speed` and its library entry point run_speed (used by the speed, warmup and diagnose runbooks).

Progress on the terminal while waves run, a human table after, and the speed JSON document (runs, bands). Figures
measured on the twin are labelled twin on the terminal and in the JSON ("twin": true).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from lanebook.base.errors import LanebookError, LaneError
from lanebook.base.files import backup, write_atomic
from lanebook.lane.keys import lane_keys
from lanebook.lane.params import LaneParams, lane_names, load_lane
from lanebook.lane.plugins import serves_twin
from lanebook.nodes.prometheus import QueueNotIdle
from lanebook.speed.bands import MIN_TRIALS, bands_from_runs
from lanebook.speed.client import Plan, Tally, measure, run
from lanebook.speed.metrics import WaveFigures, stamp_source, wave_figures
from lanebook.speed.records import STAMP_KERNEL, WaveRecord
from lanebook.speed.servercounts import (
    client_completion_tokens,
    client_ttft_count,
    client_ttft_mean_s,
    counts_line,
)
from lanebook.speed.workloads import check_thinking_booleans, load_workload

DEFAULT_REQUEST: dict[str, Any] = LaneParams.model_fields["request"].default_factory()


@dataclass
class SpeedResult:
    api: str
    model: str
    workload: str
    max_tokens: int
    twin: bool
    waves: list[WaveRecord]
    figures: list[WaveFigures]
    notes: list[str]

    @property
    def errors(self) -> int:
        return sum(f.errors for f in self.figures)

    @property
    def stamp_source(self) -> Optional[str]:
        return stamp_source(r for wave in self.waves for r in wave.requests)

    def document(self) -> dict:
        """The speed JSON document (api, model, workload, max_tokens, runs, bands), plus "twin" so twin figures are
        never taken for a real lane's, and
        "stamp_source": what timed the chunks ("kernel" receive stamps, or "loop": the client's reads)."""
        runs = [f.run_json() for f in self.figures]
        return {
            "api": self.api,
            "model": self.model,
            "workload": self.workload,
            "max_tokens": self.max_tokens,
            "twin": self.twin,
            "stamp_source": self.stamp_source,
            "runs": runs,
            "bands": bands_from_runs(runs, self.workload),
            "server_counts": [_counts_json(wave) for wave in self.waves],
        }


def _counts_json(wave: WaveRecord) -> dict:
    """The server's own counts over a wave beside lanebook's (lanebook.speed.servercounts)."""
    counts = wave.server_counts
    return {
        "concurrency": wave.concurrency,
        "trial": wave.trial,
        "server_generation_tokens": None if counts is None else counts.generation_tokens,
        "lanebook_completion_tokens": client_completion_tokens(wave.requests),
        "server_ttft_mean_s": None if counts is None else counts.ttft_mean_s,
        "lanebook_ttft_mean_s": client_ttft_mean_s(wave.requests),
        "lanebook_ttft_count": client_ttft_count(wave.requests),
    }


def lane_for_api(api: str) -> Optional[LaneParams]:
    """The shipped lane serving this API, whose request shape the waves then use."""
    for name in lane_names():
        try:
            params = load_lane(name)
        except LaneError:
            continue
        if params.api.rstrip("/") == api.rstrip("/"):
            return params
    return None


class _WaveColumn(ProgressColumn):
    """Reads a wave's live Tally on each refresh, so the client never calls into the display."""

    def render(self, task) -> Text:
        tally: Tally = task.fields["tally"]
        return Text(f"{tally.finished}/{task.total:g} done · {tally.content_chunks} chunks")


def run_speed(
    api: str,
    model: str,
    workload: str,
    concurrency: list[int],
    trials: int,
    max_tokens: int,
    lane_request: Optional[Mapping[str, Any]] = None,
    twin: bool = False,
    console: Optional[Console] = None,
    stop_on_errors: bool = False,
    on_wave: Optional[Callable[[int, int, str], None]] = None,
    timeout_s: Optional[float] = None,
    idle_timeout_s: float = 120.0,
) -> SpeedResult:
    """Measure trials x concurrency waves of one workload; the library call behind `lanebook speed`.

    stop_on_errors: stop after the first wave with a failed request (the speed runbook fails there anyway).
    on_wave: called as each wave ends with (waves done, waves planned, the wave's line), e.g.
    `lanebook.base.progress.counter("speed waves", "waves")` for a runbook's live wave counter.
    timeout_s, idle_timeout_s: each request's bound (default: generous, client.request_timeout_s) and the wait for
    an idle queue before a wave (a caller that must not block long, like the watch, bounds both).
    """
    if max_tokens < 2:
        raise LanebookError(f"--max-tokens must be at least 2 to have a decode window (got {max_tokens})")
    if trials < 1:
        raise LanebookError(f"--trials must be at least 1 (got {trials})")
    lane_request = DEFAULT_REQUEST if lane_request is None else lane_request
    check_thinking_booleans(lane_request)
    plan = Plan(
        api,
        model,
        load_workload(workload),
        list(concurrency),
        trials,
        max_tokens,
        lane_request,
        timeout_s=timeout_s,
        idle_timeout_s=idle_timeout_s,
    )
    console = console or Console(stderr=True)
    notes: list[str] = []
    figures: list[WaveFigures] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        _WaveColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        tasks: dict[tuple[int, int], Any] = {}

        def start(trial: int, level: int, tally: Tally) -> None:
            tasks[trial, level] = progress.add_task(
                f"{workload} trial {trial}/{trials} C{level}", total=level, tally=tally
            )

        def end(wave: WaveRecord) -> None:
            progress.remove_task(tasks.pop((wave.trial, wave.concurrency)))
            fig = wave_figures(wave)
            figures.append(fig)
            console.print(_wave_line(fig))
            console.print(f"  {counts_line(wave.server_counts, wave.requests)}", soft_wrap=True)
            if on_wave:
                on_wave(len(figures), trials * len(concurrency), _plain_wave_line(fig))

        def note(text: str) -> None:
            notes.append(text)
            console.print(f"[yellow]note:[/] {text}")

        waves = run(measure(plan, start, end, note, stop_on_errors=stop_on_errors))
    return SpeedResult(api, model, workload, max_tokens, twin, waves, figures, notes)


def _fmt(value: Optional[float], digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _plain_wave_line(fig: WaveFigures) -> str:
    """The wave's line without rich markup."""
    return Text.from_markup(_wave_line(fig)).plain


def _wave_line(fig: WaveFigures) -> str:
    errors = f" [red]{fig.errors} error(s): {fig.error_reasons}[/]" if fig.errors else ""
    per_position = (
        ", accepted per draft position " + " ".join(f"{p:.2f}" for p in fig.acceptance_per_position)
        if fig.acceptance_per_position
        else ""
    )
    return (
        f"trial {fig.trial} C{fig.concurrency}: {fig.ok}/{fig.requests} ok, stream "
        f"{_fmt(fig.mean_stream_decode_tok_s)} tok/s, "
        f"aggregate {_fmt(fig.wall_aggregate_tok_s)} tok/s, wall {fig.wall_s:.2f} s{per_position}{_edges(fig)}{errors}"
    )


def _edges(fig: WaveFigures) -> str:
    """Streams whose first content chunk arrived merged with the next (metrics.py), and what became of them."""
    if not fig.edges_merged:
        return ""
    return (
        f"; {fig.edges_merged} of {fig.ok} stream(s) had their first chunk merged with the next (the client fell "
        "behind): left out of stream and TTFT"
    )


def print_result(result: SpeedResult, console: Console) -> None:
    """The human tables: every run, then the bands (median and min-max)."""
    label = " · TWIN figures (not a real lane's)" if result.twin else ""
    runs = Table(
        title=f"speed: {result.workload}, max_tokens {result.max_tokens}, {result.model} at {result.api}{label}",
        caption="rates in tok/s: stream = mean per-stream decode, aggregate = decode tokens / wall",
    )
    for column in ("C", "trial", "ok", "decode", "wall s", "stream", "aggregate", "TTFT s", "accept", "acc len"):
        runs.add_column(column, justify="right")
    for f in result.figures:
        runs.add_row(
            str(f.concurrency),
            str(f.trial),
            f"{f.ok}/{f.requests}",
            f"{f.decode_tokens:,}",
            f"{f.wall_s:.2f}",
            _fmt(f.mean_stream_decode_tok_s),
            _fmt(f.wall_aggregate_tok_s),
            _fmt(f.ttft_s_median, 3),
            _fmt(f.acceptance_rate, 3),
            _fmt(f.mean_acceptance_length, 2),
        )
    console.print(runs)
    console.print(_stamp_line(result.stamp_source), soft_wrap=True)
    bands = Table(
        title=f"bands: median (min–max) over trials{label}",
        caption=f"* incomplete band: fewer than {MIN_TRIALS} trials, not a band to publish",
    )
    for column in ("C", "trials", "stream tok/s", "aggregate tok/s", "TTFT s"):
        bands.add_column(column, justify="right")
    for band in result.document()["bands"]:
        trials = f"{band['trials']}" + ("" if band["complete"] else "*")
        bands.add_row(
            str(band["concurrency"]),
            trials,
            *(
                _band_cell(band[k], digits)
                for k, digits in (("mean_stream_decode_tok_s", 1), ("wall_aggregate_tok_s", 1), ("ttft_s_median", 3))
            ),
        )
    console.print(bands)
    for note in result.notes:
        console.print(f"note: {note}")
    if result.errors:
        console.print(f"[red]{result.errors} request(s) failed or were unmeasurable; see the runs above[/]")


def _stamp_line(source: Optional[str]) -> str:
    if source is None:
        return "no stream was read"
    if source == STAMP_KERNEL:
        return "chunk times: the kernel's receive stamps"
    return "chunk times: when this client read them (no kernel stamps; late when the client is busy)"


def _band_cell(stats: Optional[dict], digits: int) -> str:
    if not stats:
        return "-"
    return f"{stats['median']:.{digits}f} ({stats['min']:.{digits}f}–{stats['max']:.{digits}f})"


def write_json(path: Path, doc: dict) -> None:
    """Atomic write; an existing file is backed up first."""
    path = Path(path)
    if path.exists():
        backup(path)
    write_atomic(path, json.dumps(doc, indent=2) + "\n")


def speed_command(
    api: Optional[str],
    model: Optional[str],
    concurrency: list[int],
    max_tokens: int,
    workload: str,
    trials: int,
    json_path: Optional[Path],
    lane_name: Optional[str] = None,
) -> int:
    """`lanebook speed`: 0 when every request of every wave was measured, 1 otherwise. With a lane, its API and served
    model are the defaults of api and model."""
    named = load_lane(lane_name) if lane_name else None
    api = api or (named.api if named else None)
    model = model or (named.served_model_name if named else None)
    if not api or not model:
        raise LanebookError("lanebook speed needs --lane, or --api and --model")
    params = named if named and named.api.rstrip("/") == api.rstrip("/") else lane_for_api(api)
    if params is not None:
        lane_keys(params)  # a keyed lane's key sent with every wave, and kept out of what is printed
    console = Console()
    if params is None:
        console.print(f"note: no lane in params/ serves {api}; using the default request shape {DEFAULT_REQUEST}")
    twin = bool(params and params.twin) or serves_twin(api)
    try:
        result = run_speed(
            api,
            model,
            workload,
            concurrency,
            trials,
            max_tokens,
            lane_request=params.request if params else None,
            twin=twin,
            console=console,
        )
    except QueueNotIdle as exc:
        console.print(f"[red]speed: {exc}[/]")
        return 1
    print_result(result, console)
    if json_path:
        write_json(json_path, result.document())
        console.print(f"wrote {json_path}")
    return 0 if result.errors == 0 else 1
