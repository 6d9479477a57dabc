"""Bring gathered reports into the doctor's case base: GROUP.yaml files (cases) and a CAUSES.md table of new cause
keys ("- KEY | title | meaning | fix | first thread URL") from a gathering folder become
lib/lanebook/recipe/cases/GROUP.yaml and rows of lib/lanebook/recipe/cases/causes.yaml.

Cases are normalised (strings stripped, empty fields left out) and checked as the case base checks them; a case that
fails (a URL that is no thread, a thread already in the case base under another file, a cause no table names) is left
out with one line saying why. Every cause key with two or more reports gets the next D-id; an id once given stays.

    .venv/bin/python tools/import_cases.py DIR
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from io import StringIO
from pathlib import Path

from lanebook.base.yamltext import load
from lanebook.recipe import casebase
from lanebook.recipe.symptoms import SYMPTOMS
from ruamel.yaml import YAML

ORDER = ("id", "url", "cause", "fix", "phase", "lines", "kernel", "words", "stack")
HEADER = (
    "# Part of the doctor's case base (lanebook.recipe.casebase): public failure reports gathered for issue 42,\n"
    "# one entry per report, facts only: the thread, the cause and fix it established, the phase, the log and\n"
    "# kernel lines as quoted, what the reporter states in our own short words. Brought in by tools/import_cases.py.\n"
)


# Keys gatherers gave a cause the registry already names, or two gatherers gave one cause: the case takes the first.
ALIASES = {
    "nccl-ib-gid-index-wrong": "D05",  # RoCE link settings differ or drifted: a GID index off the RoCEv2 IPv4 entry
    "nccl-roce-wrong-gid-index": "D05",
    "nccl-socket-ifname-wrong-interface": "P08",  # a rank's NCCL/Gloo socket on an interface the peer cannot reach
    "hf-token-not-reaching-process": "hf-gated-repo-unauthenticated",
}
LOCAL_PATH = re.compile(r"/(?:tmp|root|home|work|Users)(?![\w.-])")
ONE_M = ("1048576", "1M", "1m context", "1,048,576")


def _normalised_cause(case: dict, keys_by_id: dict[str, str]) -> str:
    """The case's cause in the registry's terms: an alias resolved, a case-base D-id given by its key; P07 (KV too
    small for 1M context) only where the report is about a 1M context, the same KV shortfall at another length is
    D06 (out of memory at startup)."""
    cause = ALIASES.get(case["cause"], case["cause"])
    cause = keys_by_id.get(cause, cause)
    if cause == "P07":
        text = " ".join([*case.get("lines", []), *case.get("words", [])])
        if not any(m in text for m in ONE_M):
            cause = "D06"
    return cause


def _dump(data) -> str:
    yaml = YAML()
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=2, offset=0)
    out = StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def _table(path: Path) -> dict[str, dict]:
    rows = {}
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        if not line.startswith("- ") or line.count(" | ") < 4:
            continue
        cells = [c.strip() for c in line[2:].split(" | ")]
        key, title, url, fix = cells[0], cells[1], cells[-1], cells[-2]
        meaning = " | ".join(cells[2:-2])
        rows.setdefault(key, {"key": key, "title": title, "meaning": meaning, "fix": fix, "source": url})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    registry = {s.id for s in SYMPTOMS}
    table = _table(args.folder / "CAUSES.md")
    existing = (load(casebase.CAUSES.read_text()) or {}).get("causes") or [] if casebase.CAUSES.exists() else []
    rows = {r["key"]: dict(r) for r in existing}
    keys_by_id = {r["id"]: r["key"] for r in existing if r.get("id")}
    for key, row in table.items():
        if key not in ALIASES:
            rows.setdefault(key, row)
    ours = {p.name for p in args.folder.glob("*.yaml")}
    kept_threads = {
        c.thread: c.file for c in _base_cases() if c.file not in ours
    }  # threads already in files this import does not rewrite
    gathered: dict[str, list[dict]] = {}
    ids: set[str] = {c.id for c in _base_cases() if c.file not in ours}
    for path in sorted(args.folder.glob("*.yaml")):
        data = load(path.read_text()) or {}
        for row in data.get("cases") or []:
            case = {k: row[k] for k in ORDER if row.get(k) not in (None, "", [])}
            for k in ("lines", "kernel", "words"):
                if k in case:
                    case[k] = [str(v).rstrip() for v in case[k] if str(v).strip()]
            for k in ("id", "url", "cause", "fix", "phase", "stack"):
                if k in case:
                    case[k] = " ".join(str(case[k]).split())
            if case.get("cause"):
                case["cause"] = _normalised_cause(case, keys_by_id)
            why = _refuse(case, row, registry, rows, kept_threads, ids)
            if why:
                print(f"left out {path.name} {row.get('id')}: {why}", file=sys.stderr)
                continue
            ids.add(case["id"])
            gathered.setdefault(path.name, []).append(case)
    counts = Counter(c["cause"] for cs in gathered.values() for c in cs)
    counts.update(c.cause for c in _base_cases() if c.file not in ours)
    taken = {int(r["id"][1:]) for r in rows.values() if r.get("id")} | {
        int(s[1:]) for s in registry if s.startswith("D")
    }
    for key, row in rows.items():
        if not row.get("id") and counts[key] >= 2:
            row["id"] = f"D{max(taken) + 1:02d}"
            taken.add(max(taken) + 1)
    first = {}
    by_id = {r["id"]: key for key, r in rows.items() if r.get("id")}
    kept = {}  # the cases of files this import does not rewrite, so a partial import keeps their lines as they were
    for c in _base_cases():
        if c.file not in ours:
            kept.setdefault(c.file, []).append({"cause": by_id.get(c.cause, c.cause), "lines": list(c.lines)})
    for _, cs in sorted({**kept, **gathered}.items()):
        for c in cs:
            for line in c.get("lines", []):
                if not LOCAL_PATH.search(line):  # the book shows no machine's local path, a reporter's neither
                    first.setdefault(c["cause"], line)
    for key, row in rows.items():
        row.pop("seen", None)
        if key in first:
            row["seen"] = "Lines like `" + first[key][:160].replace("`", "'") + "`."
    used = [r for r in rows.values() if counts[r["key"]] or counts.get(r.get("id"), 0)]
    causes_text = (
        "# The causes the case base adds to the registry (lanebook.recipe.casebase), one source for each: key,\n"
        "# title, what it means, the fix, the first thread it was seen in. A cause with two or more reports carries a\n"
        "# D-id and is a registry symptom; one with a single report is a case-only cause retrieval can still name.\n"
    ) + _dump({"causes": [{k: r[k] for k in casebase.CAUSE_KEYS_ORDER if r.get(k)} for r in used]})
    casebase.CAUSES.write_text(causes_text)
    for name, cases in gathered.items():
        (casebase.CASES / name).write_text(HEADER + _dump({"cases": cases}))
    print(f"{sum(map(len, gathered.values()))} cases from {len(gathered)} files; {len(used)} causes in the table")


def _base_cases():
    casebase.cases.cache_clear()
    casebase.causes.cache_clear()
    casebase._by_name.cache_clear()
    try:
        return casebase.cases()
    except casebase.CaseBaseError:
        return [c for c in _field_only()]


def _field_only():
    data = load((casebase.CASES / "field.yaml").read_text())
    return [casebase.Case(r["id"], r["url"], r["cause"], "", r["phase"], file="field.yaml") for r in data["cases"]]


def _refuse(case, row, registry, rows, kept_threads, ids) -> str:
    unknown = sorted(set(row) - casebase.CASE_KEYS)
    if unknown:
        return f"unknown key {unknown[0]}"
    for k in ("id", "url", "cause", "phase"):
        if not case.get(k):
            return f"no {k}"
    if case["id"] in ids:
        return "duplicate id"
    if not casebase.THREAD_URL.match(case["url"]):
        return f"{case['url']} is not a thread URL"
    thread = case["url"].split("#", 1)[0].rstrip("/")
    if thread in kept_threads:
        return f"thread already in {kept_threads[thread]}"
    if case["cause"] not in registry | {casebase.LOOKALIKE} and case["cause"] not in rows:
        return f"cause {case['cause']} is in no table"
    if case["phase"] not in casebase.PHASES:
        return f"phase {case['phase']}"
    if not (case.get("lines") or case.get("words") or case.get("kernel")):
        return "no lines and no words"
    return ""


if __name__ == "__main__":
    main()
