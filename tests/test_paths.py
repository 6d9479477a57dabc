"""Where things live, and how a published page shows a path on this machine: relative to the repository, or as
outputs, .venv, $TMPDIR and ~."""

import sys
import tempfile
from pathlib import Path

from lanebook.base.paths import REPO, local_path_pattern, local_roots, shown_paths


def test_local_roots_come_longest_first_with_how_they_are_shown(monkeypatch, tmp_path):
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path / "out"))
    roots = local_roots()
    assert [len(root) for root, _ in roots] == sorted((len(root) for root, _ in roots), reverse=True)
    shown = dict(roots)
    assert shown[str(REPO)] == "" and shown[str(tmp_path / "out")] == "outputs" and shown[sys.prefix] == ".venv"
    assert shown[tempfile.gettempdir()] == "$TMPDIR" and shown[str(Path.home())] == "~"


def test_paths_are_shown_relative_and_lane_paths_stay(monkeypatch, tmp_path):
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path / "out"))
    text = (
        f"lane = '{REPO}/params/twin.yaml' in {REPO}, record {tmp_path}/out/twin/x.ipynb, {Path.home()}/.cache; "
        "the lane's ~/ds4-f-mia-anemll-0731 and /home/milo/ds4-f-wesche-keys-c12 stay"
    )
    assert shown_paths(text) == (
        "lane = 'params/twin.yaml' in ., record outputs/twin/x.ipynb, ~/.cache; "
        "the lane's ~/ds4-f-mia-anemll-0731 and /home/milo/ds4-f-wesche-keys-c12 stay"
    )
    assert not local_path_pattern().search(shown_paths(text))
    assert not local_path_pattern().search(f"{tempfile.gettempdir()}x")  # another name: not ours
    # a sibling of the repository is not in it (it may still be under $TMPDIR or ~, as a clone in /tmp is)
    assert shown_paths(f"{REPO}-other").endswith(f"{REPO.name}-other")
