"""A person's check of the interactive walkthrough in a real JupyterLab, driven through Chromium by Playwright.

Standalone (not collected by pytest: it starts JupyterLab and a browser, about a minute on 2 cores). Run it
inside the checkout's own network namespace, so the twin and JupyterLab stay private:

    /work/wt/isolated . python tests/browser_confirm_check.py [--out /tmp/lanebook-browser]

It writes a notebook on the twin lane with `confirm` left unset, runs it in JupyterLab, and checks what a
person sees: a progress bar while the lane's /health is awaited, then the "Confirm: …" / "Cancel" buttons
while the cell waits; after a click on Confirm the cell goes on, and the record says "button". A second
run clicks Cancel and sees the step fail naming --yes. Screenshots go to --out. Needs jupyterlab and
playwright (requirements.txt) and Debian's chromium (/usr/bin/chromium).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from playwright.sync_api import expect, sync_playwright

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
STEP = "stop the lane on every node"


def notebook() -> nbformat.NotebookNode:
    """The walkthrough's shape: a runbook on the twin, a readiness wait, then a destructive step."""
    cells = [
        "import time\nfrom lanebook import readiness\nfrom lanebook.runbook import Runbook\n"
        "rb = Runbook('stop', 'twin')  # confirm left unset",
        # the twin's server is down until launched: /health is awaited (progress shown) until the bound
        "try:\n    readiness.wait_health(rb.params.api, timeout_s=8, interval_s=1, executor=rb.lane.executor)\n"
        "except Exception as exc:\n    print('wait ended:', exc)",
        f"with rb.step('1 stop', fix='run `status`'):\n    rb.confirm({STEP!r})\n    print('CONTINUED after confirm')",
        "print('RECORD', rb.finish()['confirmations'])",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(root: Path, port: int, log: Path) -> subprocess.Popen:
    # Own settings and workspaces: no autosave racing the kernel's writes ("File Changed" dialogs), no news prompt.
    settings, workspaces = root / ".lab-settings", root / ".lab-workspaces"
    for plugin, value in (("docmanager-extension/plugin", '{"autosave": false}'),
                          ("apputils-extension/notification", '{"fetchNews": "false"}')):
        path = settings / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value)
    workspaces.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'lib'}:{os.environ.get('PYTHONPATH', '')}",
           "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(workspaces)}
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
               "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root}",
               "--ServerApp.open_browser=False", "--allow-root", "--ServerApp.port_retries=0", "--LabApp.news_url=", "--LabApp.check_for_updates_class="
               "jupyterlab.NeverCheckForUpdate"]
    lab = subprocess.Popen(command, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and lab.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return lab
        except OSError:
            time.sleep(0.5)
    lab.terminate()
    raise SystemExit(f"JupyterLab did not listen on {port}; see {log}")


def run_all(page, url: str) -> None:
    """Open the notebook once its kernel is idle and run every cell (Run > Run All Cells), retrying the menu
    until a cell shows it started: a click during JupyterLab's start-up can be lost."""
    page.goto(url)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    expect(page.get_by_text(re.compile(r"\| Idle")).first).to_be_visible(timeout=90_000)
    for _ in range(5):
        page.locator(".jp-Notebook .jp-Cell").first.click()
        page.keyboard.press("Escape")  # command mode
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
        try:
            expect(page.locator(".jp-InputPrompt").get_by_text(re.compile(r"\[(\*|\d+)\]")).first).to_be_visible(timeout=10_000)
            return
        except AssertionError:
            continue
    raise AssertionError("Run All Cells did not start the notebook")


def outputs(page) -> str:
    """What the cells printed and displayed (their sources left out)."""
    return "\n".join(page.locator(".jp-Notebook .jp-OutputArea").all_inner_texts())


def walkthrough(page, url: str, out: Path, click: str) -> str:
    """Run the notebook, screenshot progress and buttons, click `click`; returns the notebook's visible text."""
    run_all(page, url)
    bar = page.locator(".widget-hprogress").first
    if click == "Confirm":
        expect(bar).to_be_visible(timeout=120_000)
        page.wait_for_timeout(2500)  # a few polls later: the bar has moved
        page.screenshot(path=str(out / "progress.png"))
    confirm = page.get_by_role("button", name=f"Confirm: {STEP}")
    expect(confirm).to_be_visible(timeout=120_000)
    page.wait_for_timeout(1000)  # the cell is blocked: nothing after it has run
    assert not re.search(r"^CONTINUED", outputs(page), re.M), "the cell went on before the click"
    page.screenshot(path=str(out / f"buttons-before-{click.lower()}.png"))
    (confirm if click == "Confirm" else confirm.locator("xpath=..").get_by_role("button", name="Cancel")).click()
    marker = "RECORD" if click == "Confirm" else "needs confirmation"
    expect(page.locator(".jp-Notebook .jp-OutputArea").get_by_text(re.compile(marker)).first).to_be_visible(timeout=60_000)
    page.wait_for_timeout(500)
    page.screenshot(path=str(out / f"after-{click.lower()}.png"), full_page=True)
    return outputs(page)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/lanebook-browser"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="lanebook-lab-"))
    for name in ("confirm.ipynb", "cancel.ipynb"):
        nbformat.write(notebook(), root / name)
    port = free_port()
    lab = start_lab(root, port, args.out / "jupyterlab.log")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            confirmed = walkthrough(page, f"http://127.0.0.1:{port}/lab/workspaces/confirm/tree/confirm.ipynb", args.out, "Confirm")
            assert re.search(r"^CONTINUED after confirm$", confirmed, re.M) and "'how': 'button'" in confirmed, confirmed
            cancelled = walkthrough(browser.new_page(viewport={"width": 1280, "height": 900}),
                                    f"http://127.0.0.1:{port}/lab/workspaces/cancel/tree/cancel.ipynb", args.out, "Cancel")
            assert not re.search(r"^CONTINUED", cancelled, re.M) and "--yes or -p confirm=True" in cancelled, cancelled
            browser.close()
    finally:
        lab.terminate()
        lab.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    print(f"ok: progress bar shown, buttons waited for, Confirm went on ('how': 'button'), Cancel failed the step; "
          f"screenshots in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
