"""The site, built once for the module (strict: Sphinx warnings fail it) from real recorded runs, offline:
every page of the book exists, the links inside it resolve, nothing is loaded from the internet, no status
mark needs an emoji font, the write-ups are named by title and ids link to their rows, and no page shows a path of
the machine that built it. The runs: a twin run of `status` (a rehearsal) and a dry run of `launch` on a real lane,
so every other runbook's page says it is not rehearsed, and the strict build fails naming each such page and line.
A small watch series of the twin lane (helpers.watch_records, secrets planted in it) is in the outputs too."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import watch_records
from helpers.lanebook_runs import dry_run_offline, run
from lanebook.runs.execute import RUNBOOKS
from lanebook.site.bookcheck import EMOJI, check_site, text_problems

LANEBOOK = Path(sys.executable).parent / "lanebook"
# Emoji and pictographs a browser draws only with an emoji font (variation selector 16 included).
EXTERNAL_LOAD = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=[\"'](?:https?:)?//", re.I)
CSS_EXTERNAL = re.compile(r"@import\s+(?:url\()?\s*['\"]?(?:https?:)?//|url\(\s*['\"]?(?:https?:)?//", re.I)


def offline(command: list[str], env: dict) -> subprocess.CompletedProcess:
    """COMMAND with no network at all (`unshare -n`)."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-n", "true"]).returncode != 0:
        pytest.skip("unshare -n is not available here (needs root or user namespaces)")
    return subprocess.run(["unshare", "-n", *command], capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def site(tmp_path_factory, twin):
    tmp = tmp_path_factory.mktemp("book")
    status, _ = run(tmp, "status", "twin", expect_exit=0)  # a real twin run: its checks observed the twin's nodes
    dry, _ = dry_run_offline(tmp / "outputs", "launch")
    # what the watch saw of the twin lane: a small series, its restart's launch run being the status run recorded
    watch_records.write_watch(tmp / "outputs", run_ids=("w0000001", status["run_id"], "w0000003"))
    env = {**os.environ, "LANEBOOK_OUTPUTS": str(tmp / "outputs")}
    built = offline([str(LANEBOOK), "book", "--out", str(tmp / "site"), "--strict"], env)
    html = tmp / "site" / "_build" / "html"
    return {
        "built": built,
        "html": html,
        "status": status,
        "dry": dry,
        "env": env,
        "tmp": tmp,
        "pages": {
            p.relative_to(html).as_posix(): p.read_text() for p in html.rglob("*.html") if "_static" not in p.parts
        },
    }


def test_strict_fails_naming_each_page_and_line_that_says_not_rehearsed_and_nothing_else(site):
    """Sphinx passed (-W: the HTML is there); the pages' text fails the build: every runbook page but status's
    says it is not rehearsed, and no page says 'seed 0' or shows a local path."""
    built = site["built"]
    assert built.returncode == 2 and "Traceback" not in built.stderr, built.stdout + built.stderr
    assert "the built site has" in built.stderr and "line" in built.stderr
    problems = text_problems(site["html"])
    assert problems and all("says 'not rehearsed'" in p for p in problems), problems
    unrehearsed = {f"recipe/{name}.html" for name in RUNBOOKS if name != "status"}
    assert {p.split(" line ")[0] for p in problems} == unrehearsed
    assert problems[0] in built.stderr


def test_write_ups_are_named_and_ids_link_to_their_rows(site):
    pages = site["pages"]
    sources = pages["sources.html"]
    assert "Flash-0731 on 2× DGX Spark: current recipe and honest speed" in sources and "James Meadlock" in sources
    assert 'id="recipe-write-up"' in sources and 'id="canary-write-up"' in sources and "1M/6 canary live" in sources
    assert '<a href="sources.html#recipe-write-up"><em>Flash-0731 on 2× DGX Spark</em></a>' in pages["pitfalls.html"]
    assert (
        'id="P16"' in pages["pitfalls.html"]
        and 'id="D13"' in pages["symptoms.html"]
        and 'id="T01"' in pages["twin.html"]
    )
    assert '<a href="../pitfalls.html#P16">P16</a>' in pages["recipe/status.html"]  # the troubleshooting table
    assert '<a href="twin.html#T' in pages["faults.html"] or '<a href="symptoms.html#D' in pages["faults.html"]


def test_every_page_exists(site):
    pages = site["pages"]
    for name in ("index.html", "pitfalls.html", "lanes.html", "speed.html", "sources.html", "twin.html", "audit.html"):
        assert name in pages, name
    assert {
        f"recipe/{n}.html"
        for n in ("weights", "env", "launch", "warmup", "gates", "speed", "diagnose", "rollback", "status", "stop")
    } <= set(pages)
    assert len([p for p in pages if p.startswith("audit/")]) == 2


def test_links_resolve_and_nothing_comes_from_the_internet(site):
    assert check_site(site["html"]) == []
    for name, text in site["pages"].items():
        assert not EXTERNAL_LOAD.search(text), name
    for css in site["html"].rglob("*.css"):
        assert not CSS_EXTERNAL.search(css.read_text(errors="replace")), css


def test_no_mark_needs_an_emoji_font(site):
    for name, text in site["pages"].items():
        assert not EMOJI.findall(text), (name, EMOJI.findall(text)[:5])


def test_intro_has_the_topology_picture(site):
    index = site["pages"]["index.html"]
    assert re.search(
        r'<img alt="Lane topology: REAL lane anemll-0731; TWIN lane twin[^"]*" src="_images/topology.png"', index
    )
    assert (site["html"] / "_images" / "topology.png").read_bytes().startswith(b"\x89PNG")


def test_a_rehearsed_runbook_shows_its_twin_run_with_outputs(site):
    page = site["pages"]["recipe/status.html"]
    assert "twin rehearsal" in page and site["status"]["run_id"] in page and "never a real lane" in page
    assert (
        '**Verdict of this run:** <span class="lanebook-badge lanebook-badge-pass">PASS</span>' not in page
    )  # Markdown rendered
    assert 'Verdict of this run:</strong> <span class="lanebook-badge lanebook-badge-pass">PASS</span>' in page
    assert "Checks of this run" in page
    # The troubleshooting section after the last step: the registry's table for status, rendered as a table.
    troubleshooting = page[page.index('id="troubleshooting"') : page.index('id="verdict"')]
    assert "<table" in troubleshooting and "Head dies mid-TP" in troubleshooting
    assert "application/vnd.lanebook.verdict+json" not in page


def test_a_runbook_never_rehearsed_says_so(site):
    page = site["pages"]["recipe/stop.html"]
    assert "not rehearsed yet" in page and "is recorded, so this page shows the notebook without outputs" in page
    assert "Head dies mid-TP" in page  # the troubleshooting table, from the registry


def test_reference_pages(site):
    pages = site["pages"]
    assert (
        all(f'id="P{n:02d}"' in pages["pitfalls.html"] for n in range(1, 18)) and "pitfall 17" in pages["pitfalls.html"]
    )
    assert "Step 2 — Orphaned workers" in pages["pitfalls.html"]
    assert (
        "anemll-0731 → anemll-1m6 → patch3-c12" in pages["lanes.html"]
        and 'class="lanebook-differs"' in pages["lanes.html"]
    )
    assert "[[1,1,5],[2,4,4],[5,6,3]]" in pages["lanes.html"]
    speed = pages["speed.html"]
    assert 'src="_images/speed-twin.png"' in speed and 'src="_images/speed-anemll-1m6.png"' in speed and "82.8" in speed
    twin = pages["twin.html"]  # the twin plugin's page: facts with figures measured at build time
    assert all(f"T{n:02d}" in twin for n in range(1, 16)) and "953,088" in twin and "2,493,464" in twin
    faults = pages["faults.html"]  # the fault matrix (the twin plugin's page), rendered from the tests' own rows
    assert "Fault matrix" in faults and all(
        f'<code class="docutils literal notranslate"><span class="pre">{name}' in faults
        for name in ("worker-unreachable", "head-dies", "worker-reboots")
    )


def test_the_audit_trail_marks_twin_dry_and_real_runs(site):
    trail = site["pages"]["audit.html"]
    assert "2 runs: 1 pass, 1 dry-run (observed nothing, not counted as passes)" in trail
    assert '<span class="lanebook-badge lanebook-badge-dry-run">DRY-RUN</span>' in trail
    assert '<span class="lanebook-badge lanebook-badge-twin">TWIN</span>' in trail
    assert '<span class="lanebook-badge lanebook-badge-real">REAL LANE</span>' in trail
    (dry,) = [text for name, text in site["pages"].items() if site["dry"]["run_id"] in name]
    assert "[REAL LANE] [DRY RUN]" in dry and "nothing on the lane was observed: not a pass" in dry
    (twin,) = [
        text for name, text in site["pages"].items() if site["status"]["run_id"] in name and name.startswith("audit/")
    ]
    assert "[TWIN]" in twin and "every figure on this page is a twin figure" in twin


def test_the_served_lanes_page_shows_the_watch_of_the_twin_lane_and_no_secret(site):
    page = site["pages"]["watch.html"]
    assert '<span class="lanebook-badge lanebook-badge-twin">TWIN</span>' in page and "Served lanes" in page
    assert 'src="_images/watch-twin.png"' in page and (site["html"] / "_images" / "watch-twin.png").is_file()
    assert "<td><p>72.73 %</p></td>" in page or "<td>72.73 %</td>" in page
    assert '<a class="reference internal" href="audit/twin-' in page and site["status"]["run_id"] in page
    assert '<a href="pitfalls.html#P16">P16</a> Head dies mid-TP' in page  # the doctor's finding, linked to its row
    assert "Not watched (nothing under" in page and "anemll-0731" in page
    assert 'href="watch.html"' in site["pages"]["index.html"]  # in the table of contents
    for secret in watch_records.SECRETS:
        assert secret not in page, secret


def test_book_refuses_to_publish_a_secret(site):
    """A run whose notebook holds a token: nothing is built (staging stops before jupyter-book runs)."""
    outputs = site["tmp"] / "leaky"
    shutil.copytree(site["tmp"] / "outputs", outputs)
    record = outputs / site["status"]["output"]
    record.write_text(record.read_text().replace("Head dies mid-TP", "HF_TOKEN=hf_" + "Q" * 30))
    built = subprocess.run(
        [str(LANEBOOK), "book", "--out", str(site["tmp"] / "leaky-site")],
        capture_output=True,
        text=True,
        env={**site["env"], "LANEBOOK_OUTPUTS": str(outputs)},
    )
    assert built.returncode == 2 and "refusing to publish" in built.stderr and "Traceback" not in built.stderr
    assert not (site["tmp"] / "leaky-site" / "_build" / "html").exists()


def test_a_build_that_is_not_strict_shows_its_warnings(capsys):
    from lanebook.site.book import BuiltSite, build_problems, show_warnings, sphinx_problems

    log = (
        "Running Sphinx v7.4.7\n"
        "/tmp/lanebook-book-x1y2/recipe/launch.md:12: WARNING: undefined label: 'nowhere'\n"
        "build succeeded, 1 warning.\n"
    )
    assert sphinx_problems(log) == ["recipe/launch.md:12: WARNING: undefined label: 'nowhere'"]
    assert build_problems("a\nb\nc\n", limit=2) == "b\nc"  # no warning in the log: its last lines
    show_warnings(BuiltSite(Path("index.html"), sphinx_problems(log)))
    assert capsys.readouterr().err == (
        "book: 1 warning(s) (`lanebook book --strict` fails on them):\n"
        "  recipe/launch.md:12: WARNING: undefined label: 'nowhere'\n"
    )
    show_warnings(BuiltSite(Path("index.html"), []))
    assert capsys.readouterr().err == ""
