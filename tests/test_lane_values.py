"""Writing the schedule a canary kept back into a lane file (lanebook.lane.values): only that line changes, the file is
backed up first, comments stay, and the result loads as the lane with that schedule."""

import pytest
from lanebook.base.errors import LanebookError
from lanebook.lane.params import load_lane
from lanebook.lane.values import read_schedule, schedule_text, with_schedule_line, write_schedule

SCHEDULE = [[1, 1, 5], [2, 4, 4], [5, 6, 3]]


def test_schedule_text_is_null_or_flow_ranges():
    assert schedule_text(None) == "null"
    assert schedule_text(SCHEDULE) == "[[1, 1, 5], [2, 4, 4], [5, 6, 3]]"


@pytest.mark.parametrize(
    "text",
    [
        "name: x\nspeculative:\n  method: dspark\n  schedule: [[1, 1, 5]]   # was\nweights: {repo: r}\n",
        "name: x\nspeculative:\n  method: dspark\nweights: {repo: r}\n",  # no schedule line: added to the block
        "name: x\nweights: {repo: r}\n",  # no speculative block: appended
    ],
)
def test_the_schedule_line_is_set_and_nothing_else_changes(text):
    for wanted in (None, SCHEDULE):
        new = with_schedule_line(text, wanted, "kept by a test")
        assert read_schedule(new) == wanted
        kept = [line for line in text.splitlines() if "schedule:" not in line]
        assert [line for line in new.splitlines() if "schedule:" not in line and line != "speculative:"] == [
            line for line in kept if line != "speculative:"
        ]
        assert f"schedule: {schedule_text(wanted)}  # kept by a test" in new


def test_writing_backs_up_first_and_an_unchanged_value_writes_nothing(tmp_path):
    path = tmp_path / "twin.yaml"
    original = load_lane("twin").file.read_text()
    path.write_text(original)
    saved = write_schedule(path, None, "fixed K=5: a test")
    assert saved is not None and saved.read_text() == original and saved.name.startswith("twin.yaml.bak-")
    params = load_lane(str(path))
    assert params.speculative.schedule is None and params.env == load_lane("twin").env
    assert "# the twin lane" in path.read_text().lower() or path.read_text().startswith("#")  # comments kept
    assert write_schedule(path, None, "again") is None and len(list(tmp_path.glob("twin.yaml.bak-*"))) == 1
    assert write_schedule(path, SCHEDULE, "back") is not None
    assert load_lane(str(path)).speculative.schedule == [tuple(r) for r in SCHEDULE]


def test_the_checkout_line_is_set_alone_backed_up_and_loads(tmp_path):
    from lanebook.lane.values import with_checkout_line, write_checkout

    lane_file = tmp_path / "twin.yaml"
    original = load_lane("twin").file.read_text()
    lane_file.write_text(original)
    new = "~/ds4-f-mia-anemll-0731@83ddf4c470a5"
    with pytest.raises(LanebookError, match="no top-level `checkout:`"):
        with_checkout_line("name: x\n  checkout: ~/nested\n", new, "n")
    saved = write_checkout(lane_file, new, "upgraded by a test")
    assert load_lane(lane_file).checkout == new and saved.read_text() == original
    changed = [line for line in lane_file.read_text().splitlines() if line not in original.splitlines()]
    assert changed == [f"checkout: {new}  # upgraded by a test"]
    assert write_checkout(lane_file, new, "again") is None  # already so: no second backup
