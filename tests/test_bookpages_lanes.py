"""The lane matrix from params/: every setting per lane, differences from the current recipe's lane marked."""

from lanebook.lane.params import lane_names, load_lane
from lanebook.site.pages.lanes import lanes_page, matrix, rollback_chain

LANES = [load_lane(n) for n in lane_names()]


def test_matrix_rows_and_differences():
    rows = {row.key: row for row in matrix(LANES)}
    assert [lane.name for lane in LANES] == [
        "anemll-0731",
        "anemll-1m6",
        "patch3-c12",
        "real-vllm-cpu",
        "twin",
        "twin-1m6",
        "twin-fleet-a",
        "twin-fleet-b",
        "twin-fleet-c",
        "twin-tp4",
    ]
    assert rows["MAX_MODEL_LEN"].values == ("1048576", "1048576", "358400", "2048", *["1048576"] * 6)
    assert (
        rows["MAX_MODEL_LEN"].varies and rows["MAX_MODEL_LEN"].differs(2, 0) and not rows["MAX_MODEL_LEN"].differs(1, 0)
    )
    assert not rows["MAX_NUM_BATCHED_TOKENS"].varies
    assert rows["speculative schedule"].values[:2] == ("[[1,1,5],[2,4,4],[5,6,3]]", "fixed K")
    assert rows["KV cache dtype"].values[2:4] == ("nvfp4_ds_mla", "auto")  # the CPU build runs vLLM's default
    assert rows["rollback to"].values == ("anemll-1m6", "patch3-c12", "—", "—", "twin-1m6", "—", "—", "—", "—", "twin")


def test_page_highlights_and_names_chains():
    assert rollback_chain(LANES, "anemll-0731") == ["anemll-0731", "anemll-1m6", "patch3-c12"]
    page = lanes_page(LANES, "anemll-0731")
    assert "- anemll-0731 → anemll-1m6 → patch3-c12\n" in page and "- twin-tp4 → twin → twin-1m6\n" in page
    assert (
        '<tr class="lanebook-varies"><th><code>MAX_MODEL_LEN</code> <span class="lanebook-badge '
        'lanebook-badge-differs">'
        'DIFFERS</span></th><td>1048576</td><td>1048576</td><td class="lanebook-differs">358400</td>' in page
    )
    assert "<tr><th><code>MAX_NUM_BATCHED_TOKENS</code></th><td>8192</td>" in page
    assert "Highlighted: a value that differs from **anemll-0731**" in page and page.count("TWIN</span>") == 7
