"""Shared by the lint/render/pitfall tests: the recipe's real files in ../shared, copied into tmp checkouts.

The fixtures are read where they are (never copied into the repository); a test that needs them skips
with the reason when the folder is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("LANEBOOK_SHARED") or REPO.parent / "shared")  # a git worktree sits elsewhere: say where
FIXTURES = SHARED / "fixtures" / "miaai-recipe"
SEED_000 = SHARED / "seeds" / "000_25116b2347ff45eb.txt"
COMPOSE = "docker-compose.dspark.yml"
EXAMPLE = "env.dspark.example"
START = "start-deepseek-v4-flash-dspark.sh"
# A short lane env file with no launcher profile keys: what lanebook.recipe.effective's tests start from.
ENV = "\n".join(
    [
        "DSPARK_MODEL=deepseek-ai/DeepSeek-V4-Flash-0731",
        "SERVED_MODEL_NAME=deepseek-v4-flash-0731",
        "MASTER_ADDR=127.0.0.2",
        "VLLM_HOST=127.0.0.2",
        "GPU_MEMORY_UTILIZATION=0.85",
        "VLLM_USE_BREAKABLE_CUDAGRAPH=0",
        "POST_READINESS_WARMUP_ENABLED=1",
        "",
    ]
)


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared fixture not found: {path}")
    return path


def fixture_text(name: str) -> str:
    return need(FIXTURES / name).read_text()


def seed_speculative_lines() -> tuple[str, str]:
    """Seed 000's SPECULATIVE_CONFIG lines: (with the 5/4/3 schedule, rollback form)."""
    lines = [
        line.strip()
        for line in need(SEED_000).read_text().splitlines()
        if line.strip().startswith("SPECULATIVE_CONFIG=")
    ]
    scheduled = next(line for line in lines if "per_batch_size" in line)
    rollback = next(line for line in lines if "per_batch_size" not in line)
    return scheduled, rollback


def checkout(tmp_path: Path, compose: str | None = None, env: str | None = None, example: bool = False) -> Path:
    """A writable checkout dir: the fixture compose (or COMPOSE text), when given a .env.dspark, and with
    EXAMPLE the fixture's example env file (under the fixture's name, env.dspark.example)."""
    directory = tmp_path / "checkout"
    directory.mkdir(parents=True)
    (directory / COMPOSE).write_text(compose if compose is not None else fixture_text(COMPOSE))
    if env is not None:
        (directory / ".env.dspark").write_text(env)
    if example:
        (directory / EXAMPLE).write_text(fixture_text(EXAMPLE))
    return directory


def example_checkout(tmp_path: Path, extra: str = "", start: str | None = None) -> Path:
    """The fixture compose with its example copied to .env.dspark (plus EXTRA lines), as an operator starts."""
    directory = checkout(tmp_path, env=fixture_text(EXAMPLE) + extra, example=True)
    if start is not None:
        (directory / START).write_text(start)
    return directory


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"expected exactly one {old!r}"
    return text.replace(old, new)


def line_of(text: str, needle: str) -> int:
    """1-based line of the only line containing NEEDLE."""
    hits = [n for n, line in enumerate(text.splitlines(), start=1) if needle in line]
    assert len(hits) == 1, f"{needle!r} on lines {hits}"
    return hits[0]
