"""The twin's recipe remote: a bare git repository holding the recipe checkout's shapes as commits, in order.

Real lanes' checkouts are clones of the public recipe repository; an upgrade fetches a newer commit of it. The
twin lays out its own remote so that happens here too: commit 1 is the July 31, 2026 shape (twin/recipe_0731/:
GPU_MEMORY_UTILIZATION passed from .env.dspark, no revision pin, a launcher that polls /v1/models and copies its
files to the worker), commit 2 the August 22 shape the product's reference files and the twin's launcher scripts
follow (a memory profile, a revision pin, hotfixes), commit 3 lanebook's own four-node launcher on top of it (TP4: the
public launcher is two-node only; `start-tp4.sh` and its compose read the keys public four-Spark profiles use,
NNODES, TP_SIZE, WORKER_HOSTS, WORKER_IPS), where the twin-tp4 lane's checkout is laid out. Author, committer
and dates are fixed, so every `twin up` makes the same commits (the same shas; a later commit leaves the earlier ones
as they were), and a checkout is a clone whose index carries no stat data (`git read-tree`), so its tree fingerprints
the same on every node and after every `twin up`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lanebook.base.errors import LanebookError
from lanebook.recipe.compose import COMPOSE_NAME
from lanebook.recipe.effective.checkout import REFERENCE

HERE = Path(__file__).parent
LAUNCHER_SCRIPTS = (
    "start-deepseek-v4-flash-dspark.sh",
    "status-deepseek-v4-flash-dspark.sh",
    "stop-deepseek-v4-flash-dspark.sh",
)
EXAMPLE_NAME = "env.dspark.example"
PROPOSER = "recipe/vllm/v1/spec_decode/dspark_proposer.py"  # the July-31 launcher's bind-mount source, checked
IGNORED = ".env.dspark\n*.bak-*\n"  # what an operator's checkout holds that the recipe does not track
REMOTE_NAME = "DeepSeek-v4-Flash-DSpark-2x-DGX-Spark.git"


@dataclass(frozen=True)
class Shape:
    """One commit of the twin's recipe remote: its name, date, files (checkout-relative name → source or text) and the
    branch whose tip it may be (the shapes are committed in order, each on the one before)."""

    name: str
    date: str
    message: str
    files: tuple[tuple[str, Path | str], ...]
    branch: str = "main"


def _files_0731() -> tuple[tuple[str, Path | str], ...]:
    own = HERE / "recipe_0731"
    proposer = '"""Placeholder of the DSpark proposer the July-31 launcher checks and copies (lanebook twin)."""\n'
    return (
        (COMPOSE_NAME, own / COMPOSE_NAME),
        (EXAMPLE_NAME, own / EXAMPLE_NAME),
        *((name, own / name) for name in LAUNCHER_SCRIPTS),
        (PROPOSER, proposer),
        (".gitignore", IGNORED),
    )


def _files_0822() -> tuple[tuple[str, Path | str], ...]:
    scripts = HERE / "scripts"
    return (
        (COMPOSE_NAME, REFERENCE / COMPOSE_NAME),
        (EXAMPLE_NAME, REFERENCE / EXAMPLE_NAME),
        *((name, scripts / name) for name in LAUNCHER_SCRIPTS),
        ("scripts/lane-env.sh", scripts / "lane-env.sh"),
        ("scripts/run-post-readiness-warmup.sh", scripts / "run-post-readiness-warmup.sh"),
        (".gitignore", IGNORED),
    )


TP4_SCRIPTS = ("start-tp4.sh", "status-tp4.sh", "stop-tp4.sh")


def tp4_compose(two_node: str) -> str:
    """The recipe's compose with its two fixed sizes read from the env file, as a four-node profile needs them."""
    for fixed, read in (
        ("--tensor-parallel-size 2\n", "--tensor-parallel-size ${TP_SIZE}\n"),
        ("--nnodes 2\n", "--nnodes ${NNODES}\n"),
    ):
        if two_node.count(fixed) != 1:
            raise LanebookError(f"the recipe's compose no longer has one `{fixed.strip()}`: the TP4 shape needs it")
        two_node = two_node.replace(fixed, read)
    return two_node


def _files_tp4() -> tuple[tuple[str, Path | str], ...]:
    scripts = HERE / "scripts"
    compose = tp4_compose((REFERENCE / COMPOSE_NAME).read_text())
    return (
        *((name, source) for name, source in _files_0822() if name != COMPOSE_NAME),
        (COMPOSE_NAME, compose),
        *((name, scripts / name) for name in TP4_SCRIPTS),
        ("scripts/ranks-env.sh", scripts / "ranks-env.sh"),
    )


JUL31, AUG22, TP4 = "0731", "0822", "tp4"
SHAPES = (
    Shape(JUL31, "2026-07-31T12:00:00Z", "recipe as of July 31, 2026 (the 0731 launch)", _files_0731()),
    Shape(AUG22, "2026-08-22T12:00:00Z", "recipe as of August 22, 2026 (memory profile, revision pin)", _files_0822()),
    # on a branch of its own: `main` stays at the August shape, the tip every two-node clone and upgrade knows
    Shape(
        TP4, "2026-08-25T12:00:00Z", "lanebook's four-node launcher (start-tp4.sh, TP_SIZE/NNODES)", _files_tp4(), TP4
    ),
)
CURRENT = AUG22  # the shape every shipped two-node lane's checkout is laid out at


def git_env(date: str) -> dict[str, str]:
    """A git environment of fixed identity and date, reading no user or system config: the same commits every time."""
    return {
        **os.environ,
        "GIT_AUTHOR_NAME": "MiaAI-Lab (lanebook twin)",
        "GIT_AUTHOR_EMAIL": "twin@lanebook.invalid",
        "GIT_COMMITTER_NAME": "MiaAI-Lab (lanebook twin)",
        "GIT_COMMITTER_EMAIL": "twin@lanebook.invalid",
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
    }


def git(*args: str, date: str = SHAPES[0].date, cwd: Path | None = None) -> str:
    if not shutil.which("git"):
        raise LanebookError("the twin needs git: apt-get install git")
    done = subprocess.run(["git", *args], cwd=cwd, env=git_env(date), capture_output=True, text=True)
    if done.returncode != 0:
        raise LanebookError(f"twin recipe remote: git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def _write_shape(work: Path, shape: Shape) -> None:
    for entry in [*work.iterdir()]:
        if entry.name != ".git":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for name, source in shape.files:
        target = work / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(source, Path):
            shutil.copyfile(source, target)
            target.chmod(0o755 if name.endswith(".sh") else 0o644)
        else:
            target.write_text(source)


def lay_out_remote(root: Path) -> tuple[Path, dict[str, str]]:
    """The bare remote under ROOT with every shape committed in order, each branch at its last shape; (its path, shape
    name → sha)."""
    remote = root / REMOTE_NAME
    shutil.rmtree(remote, ignore_errors=True)
    work = root / "recipe-work"
    shutil.rmtree(work, ignore_errors=True)
    git("init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    git("init", "--quiet", "--initial-branch=main", str(work))
    shas = {}
    for shape in SHAPES:
        _write_shape(work, shape)
        git("add", "--all", cwd=work, date=shape.date)
        git("commit", "--quiet", "--message", shape.message, cwd=work, date=shape.date)
        shas[shape.name] = git("rev-parse", "HEAD", cwd=work)
    tips = {shape.branch: shas[shape.name] for shape in SHAPES}
    git("push", "--quiet", str(remote), *(f"{sha}:refs/heads/{branch}" for branch, sha in tips.items()), cwd=work)
    shutil.rmtree(work)
    return remote, shas


def clone_at(remote: Path, sha: str, target: Path) -> None:
    """TARGET as an operator's clone of REMOTE on `main`, its work tree at SHA (detached when SHA is not the tip),
    with an index free of stat data so that the same clone made anywhere has the same bytes."""
    git("clone", "--quiet", "--no-local", "--no-checkout", str(remote), str(target))
    if git("rev-parse", "HEAD", cwd=target) != sha:
        git("update-ref", "--no-deref", "HEAD", sha, cwd=target)
    git("read-tree", "HEAD", cwd=target)
    git("checkout-index", "--all", "--force", cwd=target)
