"""The lane matrix from params/: every setting per lane, differences from the current recipe's lane marked."""

from lanebook.lane.params import lane_names, load_lane
from lanebook.site.pages.lanes_page import lanes_page, matrix, rollback_chain

LANES = [load_lane(n) for n in lane_names()]


def test_matrix_rows_and_differences():
    rows = {row.key: row for row in matrix(LANES)}
    assert [lane.name for lane in LANES] == [
        "anemll-0731",
        "anemll-0731-tp4",
        "anemll-1m6",
        "patch3-c12",
        "real-vllm-cpu",
        "twin",
        "twin-1m6",
        "twin-fleet-a",
        "twin-fleet-b",
        "twin-fleet-c",
        "twin-keyed",
        "twin-tp4",
    ]
    assert rows["MAX_MODEL_LEN"].values == ("1048576", "1048576", "1048576", "358400", "2048", *["1048576"] * 7)
    assert (
        rows["MAX_MODEL_LEN"].varies and rows["MAX_MODEL_LEN"].differs(3, 0) and not rows["MAX_MODEL_LEN"].differs(2, 0)
    )
    assert not rows["MAX_NUM_BATCHED_TOKENS"].varies
    assert rows["speculative schedule"].values[1:3] == ("[[1,1,5],[2,4,4],[5,6,3]]", "fixed K")
    assert rows["KV cache dtype"].values[3:5] == ("nvfp4_ds_mla", "auto")  # the CPU build runs vLLM's default
    assert rows["rollback to"].values == (
        "anemll-1m6",
        "anemll-0731",
        "patch3-c12",
        "—",
        "—",
        "twin-1m6",
        "—",
        "—",
        "—",
        "—",
        "—",
        "twin",
    )
    assert rows["API keys"].values[-2:] == ("DSPARK_API_KEYS from key file ../.twin/twin-keyed.keys", "none (keyless)")


def test_a_four_node_lane_shows_every_rank_and_its_tp_group():
    """No pair-shaped cell: the nodes row lists each rank on its own line, the group row says its size."""
    rows = {row.key: row for row in matrix(LANES)}
    assert rows["tensor-parallel group"].values[:2] == ("TP2: the head and 1 worker", "TP4: the head and 3 workers")
    assert rows["nodes"].values[1] == (
        "rank 0: head 192.168.1.11 (RoCE 10.0.0.1)\nrank 1: worker 10.0.0.2 (RoCE 10.0.0.2)\n"
        "rank 2: worker2 10.0.0.3 (RoCE 10.0.0.3)\nrank 3: worker3 10.0.0.4 (RoCE 10.0.0.4)"
    )
    assert [rows[k].values[:2] for k in ("NNODES", "WORKER_IPS")] == [("—", "4"), ("—", "10.0.0.2 10.0.0.3 10.0.0.4")]
    page = lanes_page(LANES, "anemll-0731")
    assert "rank 0: head 192.168.1.11 (RoCE 10.0.0.1)<br>rank 1: worker 10.0.0.2" in page


def test_page_highlights_and_names_chains():
    assert rollback_chain(LANES, "anemll-0731") == ["anemll-0731", "anemll-1m6", "patch3-c12"]
    page = lanes_page(LANES, "anemll-0731")
    assert (
        "- anemll-0731-tp4 → anemll-0731 → anemll-1m6 → patch3-c12\n" in page
        and "- twin-tp4 → twin → twin-1m6\n" in page
    )
    assert (
        '<tr class="lanebook-varies"><th><code>MAX_MODEL_LEN</code> <span class="lanebook-badge '
        'lanebook-badge-differs">'
        'DIFFERS</span></th><td>1048576</td><td>1048576</td><td>1048576</td><td class="lanebook-differs">358400</td>'
        in page
    )
    assert "<tr><th><code>MAX_NUM_BATCHED_TOKENS</code></th><td>8192</td>" in page
    assert "Highlighted: a value that differs from **anemll-0731**" in page and page.count("TWIN</span>") == 8
