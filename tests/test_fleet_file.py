"""Fleet files (lanebook.lane.fleet_file): the waves a fleet promotes in, and a bad file refused with one line naming
the key."""

from pathlib import Path

import pytest
from lanebook.base.errors import LaneError
from lanebook.lane.fleet_file import FleetParams, Wave, load_fleet, plan_waves, shared_nodes

GOOD = {
    "name": "lab",
    "description": "every lane of the lab",
    "lanes": ["twin", "anemll-0731"],
    "canary": "twin",
    "wave_size": 1,
    "failure_budget": 0,
}


def fleet(lanes, canary, wave_size, failure_budget=1):
    """A fleet in memory: plan_waves only reads names, so these need no lane files."""
    return FleetParams.model_construct(
        name="f", description="", lanes=lanes, canary=canary, wave_size=wave_size, failure_budget=failure_budget
    )


def test_the_canary_goes_alone_then_the_rest_in_file_order_in_waves_of_at_most_wave_size():
    plan = plan_waves(fleet(["a", "b", "c", "d", "e", "f"], "c", 2, failure_budget=1))
    assert plan == [
        Wave(0, ("c",), 0),
        Wave(1, ("a", "b"), 1),
        Wave(2, ("d", "e"), 1),
        Wave(3, ("f",), 1),
    ]
    assert [w.canary for w in plan] == [True, False, False, False]


def test_a_wave_as_large_as_the_fleet_takes_every_other_lane_at_once():
    assert plan_waves(fleet(["a", "b", "c"], "a", 10, 0)) == [Wave(0, ("a",), 0), Wave(1, ("b", "c"), 0)]
    assert plan_waves(fleet(["a"], "a", 3, 2)) == [Wave(0, ("a",), 0)]  # the canary alone is the whole fleet


def test_lanes_sharing_a_node_are_found_pair_by_pair():
    nodes = {
        "a": {"10.0.0.1:22", "10.0.0.2:22"},
        "b": {"10.0.1.1:22", "10.0.1.2:22"},
        "c": {"10.0.1.1:2222", "10.0.0.2:22"},
        "d": {"10.0.1.2:22"},
    }
    assert shared_nodes(nodes) == [("a", "c", "10.0.0.2:22"), ("b", "d", "10.0.1.2:22")]  # another port: not shared


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return path


def yaml(**changes) -> str:
    data = {**GOOD, **changes}
    return "".join(f"{key}: {value}\n" for key, value in data.items() if value is not None).replace("'", "")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"extra": 1}, "unknown key 'extra'"),
        ({"canary": None}, "missing key 'canary'"),
        ({"lanes": ["twin", "nosuch"]}, "'lanes': Value error, unknown lane 'nosuch' (known: "),
        ({"lanes": ["twin", "anemll-0731", "twin"]}, "'lanes': Value error, a lane is listed twice: twin"),
        ({"lanes": []}, "'lanes': List should have at least 1 item"),
        ({"canary": "patch3-c12"}, "'canary': Value error, must be one of the fleet's lanes (twin, anemll-0731), got"),
        ({"wave_size": 0}, "'wave_size': Input should be greater than or equal to 1"),
        ({"failure_budget": -1}, "'failure_budget': Input should be greater than or equal to 0"),
        ({"failure_budget": "one"}, "'failure_budget': Input should be a valid integer"),
        ({"name": "a b"}, "'name': Value error, must be a name"),
        (
            {"lanes": ["twin", "anemll-0731", "twin-1m6"]},
            "'lanes': twin and twin-1m6 share the node 127.0.0.2:2222: each lane of a fleet must be on nodes of",
        ),
    ],
)
def test_a_bad_fleet_file_is_one_line_naming_the_file_and_key(tmp_path, changes, message):
    path = write(tmp_path, yaml(**changes))
    with pytest.raises(LaneError) as caught:
        load_fleet(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_good_fleet_file_loads_with_its_waves(tmp_path):
    fleet = load_fleet(write(tmp_path, yaml()))
    assert (fleet.name, fleet.lanes, fleet.canary, fleet.wave_size, fleet.failure_budget) == (
        "lab",
        ["twin", "anemll-0731"],
        "twin",
        1,
        0,
    )
    assert plan_waves(fleet) == [Wave(0, ("twin",), 0), Wave(1, ("anemll-0731",), 0)]


def test_an_unknown_fleet_names_the_known_ones(tmp_path):
    with pytest.raises(LaneError, match=r"^unknown fleet 'nosuch' \(known: "):
        load_fleet("nosuch")
    with pytest.raises(LaneError, match="^fleet file not found: "):
        load_fleet(tmp_path / "missing.yaml")
    with pytest.raises(LaneError, match="a fleet file must be a YAML mapping"):
        load_fleet(write(tmp_path, "- twin\n"))
