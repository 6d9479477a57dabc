"""Where things live. The package is installed editable from lib/; this module is lib/lanebook/base/paths.py."""

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PARAMS_DIR = REPO / "params"
RUNBOOKS_DIR = REPO / "runbooks"
BOOK_DIR = REPO / "book"


def outputs_dir() -> Path:
    """Executed notebooks and the run index (override with LANEBOOK_OUTPUTS for tests)."""
    return Path(os.environ.get("LANEBOOK_OUTPUTS", REPO / "outputs"))


def cache_dir() -> Path:
    """What lanebook can compute again (the doctor's term counts): LANEBOOK_CACHE, else $XDG_CACHE_HOME/lanebook,
    else ~/.cache/lanebook."""
    if os.environ.get("LANEBOOK_CACHE"):
        return Path(os.environ["LANEBOOK_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lanebook"


def local_roots() -> list[tuple[str, str]]:
    """This machine's places a published page must not show, longest first, each with how a page shows a path under
    it instead: the repository's files relative to it, the outputs folder as `outputs`, the venv as `.venv`, the
    temporary folder as `$TMPDIR` and the home folder as `~`."""
    import sys
    import tempfile

    roots = {
        str(Path.home()): "~",
        tempfile.gettempdir(): "$TMPDIR",
        sys.prefix: ".venv",
        str(Path(sys.prefix).resolve()): ".venv",
        str(outputs_dir()): "outputs",
        str(outputs_dir().resolve()): "outputs",
        str(REPO): "",
        str(REPO.resolve()): "",
    }
    return sorted(((root, shown) for root, shown in roots.items() if root.strip("/")), key=lambda r: -len(r[0]))


def local_path_pattern() -> re.Pattern:
    """A local root (`local_roots`) where a path starts, and the slash after it (group 2)."""
    return re.compile("(" + "|".join(re.escape(root) for root, _ in local_roots()) + r")(?![\w.-])(/?)")


def shown_paths(text: str) -> str:
    """TEXT with each local path as a page shows it (`local_roots`): CLONE/params/twin.yaml is params/twin.yaml."""
    shown = dict(local_roots())

    def replace(match: re.Match) -> str:
        short = shown[match.group(1)]
        return (short + match.group(2)) if short else ("" if match.group(2) else ".")

    return local_path_pattern().sub(replace, text)
