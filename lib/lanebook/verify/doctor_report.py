"""The doctor's report: a diagnosis printed for a terminal (rich) and as Markdown for a runbook's page. Each finding
with its evidence as it was pasted and where it was read, a suspected finding with the words and figures that
matched, an unknown one with what to gather next; then the harmless notes and one summary line."""

from __future__ import annotations

from lanebook.verify.doctor import CONFIRMED, HARMLESS, SUSPECTED, UNKNOWN, Diagnosis


def print_diagnosis(diagnosis: Diagnosis) -> None:
    """A table of findings (id, confidence, cause, fix, repair runbook), each followed by its evidence lines and
    where they were read; then the harmless notes and one summary line."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(soft_wrap=True, highlight=False)
    if diagnosis.findings:
        table = Table(show_lines=True)
        for column in ("id", "confidence", "cause", "fix", "runbook", "next check"):
            table.add_column(column)
        for f in diagnosis.findings:
            style = {CONFIRMED: "red", SUSPECTED: "yellow"}.get(f.confidence, "magenta")
            table.add_row(
                f"[{style}]{f.id}[/{style}] {escape(f.title)}",
                f"[{style}]{f.confidence}[/{style}]",
                escape(f.cause),
                escape(f.fix),
                f"runbooks/{f.runbook}.ipynb",
                escape(f.next_check) if f.confidence in (SUSPECTED, UNKNOWN) else "",
            )
        console.print(table)
    for f in diagnosis.findings + diagnosis.notes:
        label = "note" if f.confidence == HARMLESS else f.confidence
        console.print(f"{f.id} {label}: {escape(f.title)}" + (f" (learnt from {escape(f.source)})" if f.source else ""))
        for e in f.evidence:
            console.print(f"  {escape(e.source)}:{e.line}: {escape(e.text)}")
        if f.more:
            console.print(f"  … and {f.more} more line(s)")
        if f.matched:
            console.print(f"  matched: {escape(', '.join(f.matched))}")
        if f.similar:
            console.print(f"  {escape(like_yours(f))}")
        if f.confidence == HARMLESS:
            console.print(f"  harmless: {escape(f.cause)}")
    confirmed = len(diagnosis.confirmed)
    suspected = len([f for f in diagnosis.findings if f.confidence == SUSPECTED])
    if diagnosis.healthy:
        console.print(f"[green]healthy[/green]: no finding ({len(diagnosis.notes)} harmless note(s))")
    else:
        verdict = "[red]sick[/red]" if confirmed else "[yellow]suspect[/yellow]" if suspected else "unknown"
        console.print(f"{verdict}: {confirmed} confirmed, {suspected} suspected, {len(diagnosis.notes)} note(s)")


def like_yours(f) -> str:
    """'3 reports like yours: ID URL, ...' for a finding retrieval ranked."""
    n = len(f.similar)
    shown = ", ".join(f"{s.id} <{s.url}>" for s in f.similar)
    return f"{n} report{'s' if n != 1 else ''} like yours: {shown}"


def print_reading(reading) -> None:
    """A model's reading (lanebook.verify.doctor_ask.ModelReading), apart from the findings and labelled as such."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(soft_wrap=True, highlight=False)
    console.print(
        f"[cyan]a model's reading[/cyan] ({escape(reading.model or '?')} at {escape(reading.api)}; not a "
        f"finding, never confirmed; prompt and reply: {escape(reading.record)})"
    )
    if reading.fitted:
        console.print(f"  fitted to the model's context: {escape(reading.fitted)}")
    if reading.error:
        console.print(f"  no reading: {escape(reading.error)}")
    for line in reading.reply.splitlines():
        console.print(f"  {escape(line)}")


def _next(f) -> str:
    return _cell(f.next_check) if f.confidence in (SUSPECTED, UNKNOWN) else ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def diagnosis_markdown(diagnosis: Diagnosis) -> str:
    """The same as print_diagnosis, as Markdown for a runbook's page: the findings table, then each finding's and note's
    evidence lines with where they were read, then the summary line."""
    parts = []
    if diagnosis.findings:
        rows = [
            f"| {f.id} {_cell(f.title)} | {f.confidence} | {_cell(f.cause)} | {_cell(f.fix)} | "
            f"[{f.runbook}]({f.runbook}.ipynb) | {_next(f)} |"
            for f in diagnosis.findings
        ]
        parts.append(
            "| id | confidence | cause | fix | runbook | next check |\n|---|---|---|---|---|---|\n" + "\n".join(rows)
        )
    for f in diagnosis.findings + diagnosis.notes:
        label = "note (harmless)" if f.confidence == HARMLESS else f.confidence
        lines = [f"{e.source}:{e.line}: {e.text}" for e in f.evidence]
        lines += [f"… and {f.more} more line(s)"] if f.more else []
        lines += [f"matched: {', '.join(f.matched)}"] if f.matched else []
        lines += [like_yours(f)] if f.similar else []
        parts.append(
            f"**{f.id} {label}**: {f.title}"
            + (f" (learnt from {f.source})" if f.source else "")
            + "\n\n```text\n"
            + "\n".join(lines)
            + "\n```"
        )
    confirmed = len(diagnosis.confirmed)
    if diagnosis.healthy:
        parts.append(f"**healthy**: no finding ({len(diagnosis.notes)} harmless note(s))")
    else:
        suspected = len([f for f in diagnosis.findings if f.confidence == SUSPECTED])
        verdict = "sick" if confirmed else "suspect" if suspected else "unknown"
        parts.append(f"**{verdict}**: {confirmed} confirmed, {suspected} suspected, {len(diagnosis.notes)} note(s)")
    return "\n\n".join(parts)
