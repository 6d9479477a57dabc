"""A keyed lane end to end on the twin (params/twin-keyed.yaml: DSPARK_API_KEYS, two keys, from a key file mode
0600): `lanebook promote --lane twin-keyed` passes weights → env → launch → warmup → gates (Hermes ROUTE_OK through
the real CLI, the key from its provider block's key_env) → speed; the lane then refuses /v1/models without a key
(401). Keys planted for the run appear in no byte lanebook wrote (outputs/, the book it builds from them) and in no
line it printed, across that passing promotion, a failed one and a dry run."""

from __future__ import annotations

import secrets
import shutil
import stat
import time
from pathlib import Path

import httpx
import pytest
from helpers.lanebook_runs import lanebook_command
from lanebook.lane.keys import key_file_path
from lanebook.lane.params import load_lane

PROMOTE_BOUND_S = 1800  # a whole twin promotion is a couple of minutes alone; more beside the suite
LANE = load_lane("twin-keyed")
KEYS = (f"lbplant-{secrets.token_hex(10)}", f"lbplant-{secrets.token_hex(10)}")


def planted(text: bytes) -> list[str]:
    """The planted keys (or their first 16 characters: a key cut short) that TEXT holds."""
    return [key for key in KEYS for probe in (key, key[:16]) if probe.encode() in text]


def written_bytes(*folders: Path) -> tuple[int, list[str]]:
    """How many bytes the files under FOLDERS hold, and the files holding a planted key."""
    total, holding = 0, []
    for folder in folders:
        for path in (p for p in folder.rglob("*") if p.is_file()):
            data = path.read_bytes()
            total += len(data)
            if planted(data):
                holding.append(str(path))
    return total, holding


@pytest.fixture(scope="module")
def runs(twin, tmp_path_factory):
    """The key file holding the planted keys (the one there kept aside and put back after), then the passing
    promotion, what the lane answers a keyless request, a failed promotion and a dry run, with what each printed."""
    folder = tmp_path_factory.mktemp("keyed-twin")
    key_file = key_file_path(LANE)
    kept = folder / "kept.keys"
    if key_file.exists():
        shutil.copy2(key_file, kept)
    key_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key_file.write_text("\n".join(KEYS) + "\n")
    key_file.chmod(0o600)
    outputs = folder / "outputs"
    try:
        started = time.monotonic()
        passing = lanebook_command(["promote", "--lane", "twin-keyed"], outputs, timeout=PROMOTE_BOUND_S)
        took = time.monotonic() - started
        answers = lane_answers()
        # A failed promotion: the lane's Hermes block left keyless (no hermes.key_env), which env's lint refuses (P09).
        keyless_hermes = folder / "twin-keyed.yaml"
        text = LANE.file.read_text().replace("  key_env: SPARK_DS4_API_KEY", "  api_key: no-key-required")
        keyless_hermes.write_text(text.replace("{key_file: ../.twin/twin-keyed.keys}", f"{{key_file: {key_file}}}"))
        failing = lanebook_command(["promote", "--lane", str(keyless_hermes)], outputs, timeout=PROMOTE_BOUND_S)
        dry = lanebook_command(["promote", "--lane", "twin-keyed", "--dry-run"], outputs, timeout=PROMOTE_BOUND_S)
        yield {
            "outputs": outputs,
            "folder": folder,
            "passing": passing,
            "took": took,
            **answers,
            "failing": failing,
            "dry": dry,
        }
    finally:
        if kept.exists():
            shutil.copy2(kept, key_file)
        else:
            key_file.unlink(missing_ok=True)


def lane_answers() -> dict:
    """What the lane answers /v1/models without a key and with the second key, and /health (None: no answer)."""
    answers = {}
    with httpx.Client(trust_env=False, timeout=30) as client:
        for name, path, headers in (
            ("keyless", "/v1/models", {}),
            ("keyed", "/v1/models", {"Authorization": f"Bearer {KEYS[1]}"}),
            ("health", "/health", {}),
        ):
            try:
                answers[name] = client.get(LANE.api.removesuffix("/v1") + path, headers=headers)
            except httpx.HTTPError:
                answers[name] = None
    return answers


def records(outputs: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in (outputs / "runs.jsonl").read_text().splitlines()]


def test_twin_keyed_promotes_end_to_end_and_refuses_a_keyless_request(runs):
    done = runs["passing"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    passing = [r for r in records(runs["outputs"]) if r["lane"] == "twin-keyed" and not r["dry_run"]][:6]
    assert [(r["runbook"], r["verdict"]) for r in passing] == [
        (name, "pass") for name in ("weights", "env", "launch", "warmup", "gates", "speed")
    ]
    assert len({r["promotion_id"] for r in passing}) == 1
    print(f"twin-keyed promotion (twin figures): every verdict pass in {runs['took']:.0f} s")
    assert runs["keyless"] is not None and runs["keyless"].status_code == 401
    assert runs["keyless"].json() == {"error": "Unauthorized"}
    assert runs["keyed"].status_code == 200 and runs["health"].status_code == 200  # either key; /health keyless
    print(f"GET /v1/models without a key: {runs['keyless'].status_code} {runs['keyless'].text}")
    gates = next(r for r in passing if r["runbook"] == "gates")
    assert gates["failed_step"] is None


def test_the_head_and_worker_env_files_hold_the_keys_mode_0600(runs, twin):
    from lanebook.nodes.ssh import LaneNodes

    with LaneNodes(LANE) as nodes:
        for node in nodes:
            listing = node.run(
                f"stat -c %a {LANE.checkout}/.env.dspark; grep -c '^DSPARK_API_KEYS=' {LANE.checkout}/.env.dspark",
                timeout=30,
            ).stdout.split()
            assert listing == ["600", "1"], (node.alias, listing)


def test_a_failed_promotion_says_the_keyless_hermes_block_and_stops(runs):
    done = runs["failing"]
    assert done.returncode == 1
    failed = [r for r in records(runs["outputs"]) if r["verdict"] not in ("pass", "dry-run")]
    assert [(r["runbook"], r["failed_step"]) for r in failed] == [("env", "3 lint")]
    executed = (runs["outputs"] / failed[0]["output"]).read_text()
    assert "P09" in executed and "but the lane serves with an API key" in executed


def test_a_planted_key_is_in_no_byte_lanebook_wrote_or_printed(runs, tmp_path, monkeypatch):
    """outputs/ (executed notebooks, runs.jsonl, plots, speed documents), the book built from them, and every line the
    three promotions printed (stdout, and the step lines on stderr)."""
    from lanebook.site.book import build_book

    assert runs["dry"].returncode == 0, runs["dry"].stdout[-2000:] + runs["dry"].stderr[-2000:]
    assert "Authorization: Bearer [REDACTED]" in runs["dry"].stdout  # the dry run's curl lines show the header
    dry_env = next(r for r in records(runs["outputs"]) if r["dry_run"] and r["runbook"] == "env")
    assert (
        "DSPARK_API_KEYS=[REDACTED]" in (runs["outputs"] / dry_env["output"]).read_text()
    )  # the line, its value hidden
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(runs["outputs"]))
    build_book(out=tmp_path / "book")
    outputs_bytes, in_outputs = written_bytes(runs["outputs"])
    book_bytes, in_book = written_bytes(tmp_path / "book" / "_build")
    printed = "".join(runs[name].stdout + runs[name].stderr for name in ("passing", "failing", "dry"))
    print(
        f"planted-key search: {outputs_bytes:,} bytes under outputs/, {book_bytes:,} bytes of the built book, "
        f"{len(printed.encode()):,} bytes printed: {len(in_outputs) + len(in_book) + len(planted(printed.encode()))} "
        "hits"
    )
    assert outputs_bytes > 0 and book_bytes > 0 and printed
    assert in_outputs == [] and in_book == [] and planted(printed.encode()) == []
    key_file = key_file_path(LANE)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
