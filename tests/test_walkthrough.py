"""The walkthrough as an operator uses it: JupyterLab on loopback (lanebook.runs.lab) with the runbooks, driven in
headless
Chromium (Debian's /usr/bin/chromium through Playwright). The launch runbook is opened on its default lane, the twin,
cleanly down; Run All Cells; step 1 (it clears /dev/shm on both nodes) waits at its Confirm/Cancel buttons with
nothing after it run; a click on Confirm lets it go on, the launcher's wait shows a live progress bar, and the
verdict is pass, with the twin's API answering afterwards. The page asked nothing of any other address, and the
runbook file is left as it was (autosave is off). Screenshots go to test-artifacts/walkthrough/.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path

import httpx
import pytest
from helpers.lanebook_runs import run
from lanebook.base.paths import REPO, RUNBOOKS_DIR
from lanebook.lane.params import load_lane
from lanebook.nodes.ssh import LaneNodes
from lanebook.ops import launcher
from lanebook.runs import lab as lab_module

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = REPO / "test-artifacts" / "walkthrough"
CONFIRM = re.compile(
    r"Confirm: clean \/dev\/shm and the page cache on head, worker"
)  # "/" escaped: Playwright sends it as /…/; no "^": the icon comes first
CHECK_AFTER_CONFIRM = "no stale SHM segment left on any node"  # step 1's check once the memory is cleaned
VERDICT = re.compile(r'"verdict": "\w+"|Traceback \(most recent call last\)')

pytestmark = pytest.mark.twin


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def twin_lane_state() -> str:
    with LaneNodes(load_lane("twin")) as nodes:
        return launcher.lane_containers(nodes).state


@pytest.fixture(scope="module")
def lab(twin, tmp_path_factory):
    """JupyterLab (through lanebook.runs.lab) on a copy of the runbooks folder, with the twin lane cleanly down, so
    launch does its destructive first step; its own user settings, so none of this machine's apply."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: `make test` installs Debian's chromium; Ubuntu packages none (a snap)")
    tmp = tmp_path_factory.mktemp("walkthrough")
    if twin_lane_state() != launcher.LANE_DOWN:
        run(tmp, "stop", "twin", expect_exit=0)
    root = tmp / "runbooks"
    shutil.copytree(RUNBOOKS_DIR, root)  # copies keep their times: jupytext sees each pair as in step
    # Every cell stays rendered (no windowing), so locators find a cell's outputs wherever the notebook is scrolled.
    tracker = tmp / "user-settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text('{"windowingMode": "none"}')
    saved = os.environ.get("JUPYTERLAB_SETTINGS_DIR")
    os.environ["JUPYTERLAB_SETTINGS_DIR"] = str(tmp / "user-settings")
    try:
        started = lab_module.start_lab(root=root, port=free_port(), state_dir=tmp / "lab")
    finally:
        os.environ.pop("JUPYTERLAB_SETTINGS_DIR") if saved is None else os.environ.update(JUPYTERLAB_SETTINGS_DIR=saved)
    yield started
    started.stop()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(started.log, ARTIFACTS / "jupyterlab.log")


def test_jupyterlab_listens_on_loopback_only_and_asks_for_its_token(lab):
    assert httpx.get(lab.url()).status_code == 200
    assert httpx.get(f"http://127.0.0.1:{lab.port}/api/contents").status_code == 403  # no token, no access
    with pytest.raises(httpx.ConnectError):  # another loopback address: not bound to every interface
        httpx.get(f"http://127.0.0.2:{lab.port}/lab")


def outputs(page) -> str:
    """What the cells printed and displayed (their sources left out)."""
    return "\n".join(page.locator(".jp-Notebook .jp-OutputArea").all_inner_texts())


def run_all_cells(page) -> None:
    """Run > Run All Cells once the kernel is idle, retried until a cell shows it started (a click during
    JupyterLab's start-up can be lost)."""
    from playwright.sync_api import expect

    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    expect(page.get_by_text(re.compile(r"\| Idle")).first).to_be_visible(timeout=90_000)
    for _ in range(5):
        page.locator(".jp-Notebook .jp-Cell").first.click()
        page.keyboard.press("Escape")  # command mode
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
        try:
            expect(page.locator(".jp-InputPrompt").get_by_text(re.compile(r"\[(\*|\d+)\]")).first).to_be_visible(
                timeout=10_000
            )
            return
        except AssertionError:
            continue
    raise AssertionError("Run All Cells did not start the notebook")


def shot(page, name: str, near=None) -> None:
    if near is not None:
        near.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / name))


def test_launch_on_the_twin_asks_at_its_destructive_step_shows_progress_and_passes(lab):
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*"):
        old.unlink()
    runbook_bytes = (lab.root / "launch.ipynb").read_bytes()
    elsewhere: list[str] = []  # every request the page made to anything but this JupyterLab
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        ours = f"http://127.0.0.1:{lab.port}/"

        def only_this_lab(route) -> None:
            if route.request.url.startswith(ours):
                route.continue_()
            else:
                elsewhere.append(route.request.url)
                route.abort()

        page.route("**/*", only_this_lab)
        try:
            page.goto(lab.url("launch.ipynb"))
            run_all_cells(page)
            expect(page.get_by_text(re.compile(r"TWIN RUN")).first).to_be_visible(timeout=60_000)

            confirm = page.get_by_role("button", name=CONFIRM)
            verdict = page.locator(".jp-Notebook .jp-OutputArea").get_by_text(VERDICT)
            expect(confirm.or_(verdict).first).to_be_visible(timeout=180_000)  # the question, or the end of the run
            assert confirm.is_visible(), f"the run ended without asking: {outputs(page)[-3000:]}"
            expect(confirm).to_be_in_viewport(
                timeout=10_000
            )  # Run All showed the last cell; the question scrolled here
            page.wait_for_timeout(1500)  # the cell waits for the click: nothing after the question has run
            assert CHECK_AFTER_CONFIRM not in outputs(page), "step 1 went on before the click"
            expect(confirm.locator("xpath=..").get_by_role("button", name="Cancel")).to_be_visible()
            shot(page, "1-confirm-buttons.png", confirm)
            confirm.click()
            expect(page.get_by_role("button", name=re.compile(r"Confirmed: clean \/dev\/shm"))).to_be_visible(
                timeout=30_000
            )
            expect(page.get_by_text(re.compile(r"^confirmed by .+ \(button\): clean \/dev\/shm")).first).to_be_visible(
                timeout=30_000
            )

            label = page.locator(".widget-hbox:has(.widget-hprogress) .widget-label").filter(
                has_text=re.compile(r"^launcher: ")
            )
            expect(label.first).to_be_visible(timeout=120_000)
            first = label.first.inner_text()
            shot(page, "2-launcher-progress.png", label.first)
            expect(verdict.first).to_be_visible(timeout=300_000)
            page.wait_for_timeout(500)
            shot(page, "3-verdict.png", verdict.first)
            seen, last = outputs(page), label.first.inner_text()
        except Exception:
            shot(page, "failure.png")  # what the page showed, and its outputs' text, for the report
            (ARTIFACTS / "failure-outputs.txt").write_text(outputs(page))
            raise
        finally:
            browser.close()
    assert re.search(r"launcher: \d+/\d+ s", first), first
    assert '"verdict": "pass"' in seen, seen[-3000:]
    assert CHECK_AFTER_CONFIRM in seen and last != first, (first, last)  # the bar moved while the launcher ran
    health = load_lane("twin").api.removesuffix("/v1") + "/health"
    assert httpx.get(health).status_code == 200  # the launched twin lane answers
    assert not elsewhere, f"the page asked other addresses: {elsewhere[:5]}"
    assert (lab.root / "launch.ipynb").read_bytes() == runbook_bytes, "running the runbook changed its file"
