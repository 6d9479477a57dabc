"""The introduction's topology picture: every label from the lane files, drawn offline at build time."""

import pytest
from lanebook.base.errors import LanebookError
from lanebook.lane.params import lane_names, lane_with, load_lane
from lanebook.site.pages.intro_page import MARKER, Topology, draw, intro_page, shown_lanes, topology


def test_topology_of_the_real_lane_and_the_twin():
    assert topology(load_lane("anemll-0731")) == Topology(
        title="REAL lane anemll-0731",
        twin=False,
        head="head: milo@192.168.1.11\nRoCE IP 10.0.0.1\nvLLM API server, TP rank 0",
        worker="worker: milo@10.0.0.2 (via head)\nRoCE IP 10.0.0.2\nheadless TP rank 1",
        roce="RoCE link (bond0)\n10.0.0.1 ↔ 10.0.0.2\nTP traffic, weights rsync",
        api="OpenAI-compatible API\nhttp://192.168.1.11:8888/v1\nserves deepseek-v4-flash-0731",
        client="Hermes client\nprovider spark-ds4\ncontext 200,000",
    )
    twin = topology(load_lane("twin"))
    assert twin.title == "TWIN lane twin (digital twin on loopback)" and twin.twin
    assert twin.head.startswith("head: 127.0.0.2:2222\n") and "127.0.0.2 ↔ 127.0.0.3" in twin.roce


def test_the_heads_of_the_rollback_chains_are_drawn():
    lanes = [load_lane(n) for n in lane_names()]
    assert [lane.name for lane in shown_lanes(lanes)] == ["anemll-0731", "twin"]
    circular = [lane_with(load_lane("twin"), rollback="twin")]
    with pytest.raises(LanebookError, match="rollback target"):
        shown_lanes(circular)


def test_intro_page_puts_the_figure_at_its_marker():
    lanes = [load_lane(n) for n in lane_names()]
    text, png = intro_page(f"# lanebook\n\n{MARKER}\n\nmore\n", lanes)
    assert png.startswith(b"\x89PNG") and MARKER not in text
    assert "```{figure} topology.png\n:alt: Lane topology: REAL lane anemll-0731; TWIN lane twin" in text
    assert (
        "This is the pair's drawing: lanes of more nodes, anemll-0731-tp4 (4 nodes), twin-tp4 (4 nodes), run one"
        in text
    )
    with pytest.raises(LanebookError, match="topology"):
        intro_page("# no marker\n", lanes)
    assert draw([topology(lanes[0])]).startswith(b"\x89PNG")


def test_a_four_node_lane_is_named_not_drawn_and_its_topology_lists_every_rank():
    """The picture is of a pair: a lane of four Sparks (the head of the real chain) does not take its place."""
    tp4 = load_lane("anemll-0731-tp4")
    assert [lane.name for lane in shown_lanes([tp4, load_lane("anemll-0731"), load_lane("twin")])] == [
        "anemll-0731",
        "twin",
    ]
    drawn = topology(tp4)
    assert drawn.worker.endswith("\nheadless TP ranks 1, 2, 3") and drawn.worker.count("RoCE IP") == 3
    assert "10.0.0.1 ↔ 10.0.0.2 ↔ 10.0.0.3 ↔ 10.0.0.4" in drawn.roce
