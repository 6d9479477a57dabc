"""The one reader of --speculative-config in a command line (lanebook.recipe.speculative)."""

from lanebook.recipe.speculative import speculative_config


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
