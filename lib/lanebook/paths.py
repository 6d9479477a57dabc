"""Where things live. The package is installed editable from lib/, so the repository is two levels up."""
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PARAMS_DIR = REPO / "params"
RUNBOOKS_DIR = REPO / "runbooks"
BOOK_DIR = REPO / "book"


def outputs_dir() -> Path:
    """Executed notebooks and the run index (override with LANEBOOK_OUTPUTS for tests)."""
    return Path(os.environ.get("LANEBOOK_OUTPUTS", REPO / "outputs"))
