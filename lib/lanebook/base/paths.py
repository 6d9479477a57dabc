"""Where things live. The package is installed editable from lib/; this module is lib/lanebook/base/paths.py."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PARAMS_DIR = REPO / "params"
RUNBOOKS_DIR = REPO / "runbooks"
BOOK_DIR = REPO / "book"


def outputs_dir() -> Path:
    """Executed notebooks and the run index (override with LANEBOOK_OUTPUTS for tests)."""
    return Path(os.environ.get("LANEBOOK_OUTPUTS", REPO / "outputs"))
