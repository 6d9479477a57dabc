"""The one reader of --speculative-config in a command line, and the K verified at a batch size
(lanebook.recipe.speculative)."""

from lanebook.recipe.speculative import k_for_batch, speculative_config


def test_speculative_config_from_a_command_line():
    assert speculative_config("vllm serve x --port 1") is None
    assert speculative_config("vllm serve x --speculative-config {broken") is None
    # As docker top shows it, with '=', or quoted as a shell command line gives it: the same object.
    for given in (
        '--speculative-config {"method":"mtp"}',
        '--speculative-config={"method":"mtp"}',
        """--speculative-config '{"method":"mtp"}'""",
    ):
        assert speculative_config(f"vllm serve x {given} --port 1") == {"method": "mtp"}
    assert speculative_config("vllm serve x --speculative-config [1]") is None  # not an object
    # A JSON object further on belongs to another flag, not to a --speculative-config that has none.
    assert speculative_config('vllm serve x --speculative-config --default-chat-template-kwargs {"a":1}') is None


def test_k_for_batch_reads_inclusive_ranges_and_falls_back_to_fixed_k():
    """One rule for the verify K at a batch size: warmup labels its shapes, diagnose plans the K boundary and the
    twin engine drafts with it."""
    schedule = [[1, 1, 5], [2, 4, 4], [5, 6, 3]]
    assert [k_for_batch(schedule, 5, b) for b in range(1, 7)] == [5, 4, 4, 4, 3, 3]
    assert [k_for_batch(schedule, 5, b) for b in range(1, 8)] == [5, 4, 4, 4, 3, 3, 5]
    assert k_for_batch(None, 5, 4) == 5
