"""What a lane changes against its rollback lane (lanebook.lane.changes): the runtime image and the weights, and
the shipped lanes as they are (each changes one of the two, as seed 000 asks)."""

import pytest
from lanebook.base.errors import LaneError
from lanebook.lane.changes import change_from_rollback, weights
from lanebook.lane.params import lane_names, lane_with, load_lane


def test_the_shipped_lanes_change_one_thing_at_a_time():
    changes = {name: change_from_rollback(load_lane(name)) for name in lane_names()}
    current, preview = changes["anemll-0731"], changes["anemll-1m6"]
    assert (current.changes_runtime, current.changes_weights) == (False, True)  # a weight swap on Anemll 0.1.1
    # The Patch3 lane's weights are an assumption (params/patch3-c12.yaml): as written, 1m6 changed the runtime only.
    assert (preview.changes_runtime, preview.changes_weights) == (True, False)
    assert changes["twin"].changes_weights and not changes["twin"].changes_runtime
    assert not any(change.changes_both for change in changes.values() if change)
    assert changes["patch3-c12"] is None and changes["real-vllm-cpu"] is None


def test_both_changed_is_described_with_each_pair():
    params = load_lane("anemll-0731")
    change = change_from_rollback(
        lane_with(params, env={"DSPARK_VLLM_IMAGE": "ghcr.io/anemll/dspark-vllm-gx10:0.1.2", "DSPARK_REVISION": "abc"})
    )
    assert change.changes_both
    assert change.describe() == (
        "lane anemll-0731 changes both the runtime image (ghcr.io/anemll/dspark-vllm-gx10:0.1.1 → "
        "ghcr.io/anemll/dspark-vllm-gx10:0.1.2) and the weights (deepseek-ai/DeepSeek-V4-Flash → "
        "deepseek-ai/DeepSeek-V4-Flash-0731@abc) against its rollback lane anemll-1m6"
    )


def test_a_pinned_revision_is_part_of_the_weights():
    params = load_lane("anemll-1m6")
    assert weights(params) == "deepseek-ai/DeepSeek-V4-Flash"
    assert weights(lane_with(params, env={"DSPARK_REVISION": "deadbeef"})) == "deepseek-ai/DeepSeek-V4-Flash@deadbeef"


def test_an_unknown_rollback_lane_is_a_lane_error():
    with pytest.raises(LaneError, match="unknown lane 'gone'"):
        change_from_rollback(lane_with(load_lane("anemll-0731"), rollback="gone"))
