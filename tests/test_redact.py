"""Secrets never reach logs, records or pages (lanebook.base.redact): by shape, by the name they are kept under, and by
the literal values of secret-named environment variables."""

import json

import nbformat
from lanebook.base.redact import REDACTED, environment_secrets, names_secret, redact, redact_data, redact_notebook


def test_redacts_tokens_and_keeps_the_key_name():
    text = (
        "HF_TOKEN=hf_abcdefghijklmnopqrstuvwx0123 curl -H 'Authorization: Bearer sk-123456789abcdef' --api-key "
        "s3cr3tvalue"
    )
    out = redact(text)
    assert "hf_abcdefghijklmnopqrstuvwx0123" not in out and "sk-123456789abcdef" not in out and "s3cr3tvalue" not in out
    assert out.startswith("HF_TOKEN=" + REDACTED)


def test_documented_placeholder_is_not_a_secret():
    assert redact("api_key=no-key-required") == "api_key=no-key-required"
    data = redact_data(
        {"hermes": {"api_key": "no-key-required"}, "token": "abc", "n": 3, "note": "Bearer abcdefghijkl"}
    )
    assert data == {"hermes": {"api_key": "no-key-required"}, "token": REDACTED, "n": 3, "note": "Bearer " + REDACTED}


def test_token_counts_are_not_secrets():
    """vLLM's knobs and figures name tokens all the time; only keys that end in a secret word are secrets."""
    line = (
        "MAX_NUM_BATCHED_TOKENS=8192 MTP_NUM_TOKENS=5 max_num_batched_tokens=8192 GPU KV cache size: 2,493,464 tokens"
    )
    assert redact(line) == line
    data = {"max_tokens": "256", "kv_cache_tokens": "2493464", "completion_tokens": 3}
    assert redact_data(data) == data


def test_json_and_yaml_key_forms():
    assert "sk-live-123" not in redact('{"api_key": "sk-live-123", "model": "m"}')
    assert "sk-live-123" not in redact("providers:\n  spark:\n    api_key: sk-live-123\n")
    assert redact("    api_key: no-key-required  # not none") == "    api_key: no-key-required  # not none"
    assert "abc123" not in redact("DSPARK_API_KEYS=abc123 VLLM_API_KEY=abc123")


# Planted secrets of each kind the recipe's operators handle; none may survive redaction.
HF = "hf_" + "Ab3dEfGh1jKlMn0pQrStUvWxYz12"
SK = "sk-" + "proj-4fJ9xQ2LmN8pR6tV0wY3zB5c"
BEARER = "eyJhbGciOiJIUzI1NiJ9.payload.signature"
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACDplantedplantedplantedplantedplanted\n-----END OPENSSH PRIVATE KEY-----"
)
URL_PASSWORD = "hunter2-Pl4nted"


def test_each_kind_of_secret_is_redacted_where_it_stands():
    assert redact(f"downloading with {HF}") == "downloading with [REDACTED]"
    assert redact(f"client = OpenAI(api_key_from_vault) # {SK}") == "client = OpenAI(api_key_from_vault) # [REDACTED]"
    assert redact(f"-H 'Authorization: Bearer {BEARER}'") == "-H 'Authorization: Bearer [REDACTED]'"
    assert redact("Authorization: Basic b3BlcmF0b3I6aHVudGVyMg==") == "Authorization: Basic [REDACTED]"
    assert redact(f"key:\n{PRIVATE_KEY}\nafter") == "key:\n[REDACTED]\nafter"
    assert (
        redact(f"git clone https://operator:{URL_PASSWORD}@git.example.com/lane.git")
        == "git clone https://operator:[REDACTED]@git.example.com/lane.git"
    )
    assert redact("ghp_" + "a" * 36) == "[REDACTED]"


def test_a_private_key_cut_short_is_redacted_to_the_end():
    cut = PRIVATE_KEY.split("-----END")[0]
    assert redact("log: " + cut) == "log: [REDACTED]"


def test_addresses_and_the_keyless_bearer_are_not_secrets():
    for text in (
        "http://127.0.0.2:8888/v1",
        "ssh://operator@192.168.1.11:22",
        "https://host:443/path@x",
        "Authorization: Bearer no-key-required",
        "risk-assessment-notes-for-the-lane",
        "disk-usage-report-of-the-head",
    ):
        assert redact(text) == text


def test_secret_environment_values_are_redacted_whatever_their_shape(monkeypatch):
    """A runbook that echoes its environment: a secret of no known shape is caught by its variable's name."""
    monkeypatch.setenv("MIRROR_PASSWORD", "Zq9!odd shape")
    monkeypatch.setenv("DEPLOY_SSH_KEY", "k3y-of-no-known-shape")
    monkeypatch.setenv("SHORT_TOKEN", "abc")  # too short to search for literally: it would hide ordinary text
    monkeypatch.setenv("EMPTY_API_KEY", "no-key-required")
    monkeypatch.setenv("MIRROR_NOTE", "Zq9 plain value")
    assert (
        redact("login Zq9!odd shape, key k3y-of-no-known-shape, abc, no-key-required, Zq9 plain value")
        == "login [REDACTED], key [REDACTED], abc, no-key-required, Zq9 plain value"
    )


def test_names_that_hold_secrets():
    for name in (
        "hf_token",
        "HF_TOKEN",
        "ssh_key",
        "api-key",
        "DB_PASSWORD",
        "client_secret",
        "aws.credentials",
        "key",
    ):
        assert names_secret(name), name
    for name in (
        "max_tokens",
        "boundary_max_tokens",
        "MAX_NUM_BATCHED_TOKENS",
        "threshold",
        "keyboard",
        "monkey",
        "restore",
    ):
        assert not names_secret(name), name


def test_environment_secrets_longest_first(monkeypatch):
    from lanebook.base import redact

    monkeypatch.setattr(redact, "_KNOWN", set())  # keys another test in this process gave add_secrets stay out
    env = {"A_TOKEN": "abcdefgh", "B_TOKEN": "abcdefgh-longer", "PATH": "/usr/bin:/bin", "C_SECRET": "none"}
    assert environment_secrets(env) == ["abcdefgh-longer", "abcdefgh"]


def test_an_executed_notebook_is_scrubbed_everywhere_even_a_key_split_over_lines():
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                f'print("https://op:{URL_PASSWORD}@m.example/")\ntoken = "{HF}"',
                outputs=[
                    nbformat.v4.new_output(
                        "stream", name="stdout", text=f"mirror https://op:{URL_PASSWORD}@m.example/\n{PRIVATE_KEY}\n"
                    ),
                    nbformat.v4.new_output(
                        "display_data", data={"text/markdown": f"Bearer {BEARER}", "text/plain": "kept as is"}
                    ),
                ],
            ),
        ]
    )
    nb.metadata["papermill"] = {"parameters": {"hf_token": "plain-looking-value", "lane": "twin"}}
    text = nbformat.writes(nb)
    assert PRIVATE_KEY.splitlines()[1] + '\\n"' in text  # the file stores the key as separate lines
    scrubbed = redact_notebook(text)
    for secret in (HF, BEARER, URL_PASSWORD, "plain-looking-value", "planted", "b3BlbnNzaC1rZXktdjEA"):
        assert secret not in scrubbed, secret
    back = nbformat.reads(scrubbed, as_version=4)
    assert back.cells[0].outputs[0].text == "mirror https://op:[REDACTED]@m.example/\n[REDACTED]\n"
    assert back.cells[0].outputs[1].data == {"text/markdown": "Bearer [REDACTED]", "text/plain": "kept as is"}
    assert back.metadata.papermill.parameters == {"hf_token": REDACTED, "lane": "twin"}


def test_a_notebook_cut_short_is_scrubbed_as_text():
    torn = '{"cells": [{"cell_type": "code", "outputs": [{"text": ["' + HF + "\\n"
    assert redact_notebook(torn) == '{"cells": [{"cell_type": "code", "outputs": [{"text": ["[REDACTED]\\n'


def test_secrets_given_by_name_are_replaced_everywhere_and_a_stream_passes_text_on_redacted():
    """A keyed lane's keys (lanebook.lane.keys registers them) have no shape a pattern knows: each is replaced as
    given, in text, data and notebooks, and in what a run prints through RedactedStream."""
    import io

    from lanebook.base.redact import RedactedStream, add_secrets

    add_secrets(["lb-named-aaaa1111", "short"])  # one too short to search for is not taken
    assert redact("key lb-named-aaaa1111 and short") == f"key {REDACTED} and short"
    assert redact_data({"argv": ["--api-key", "lb-named-aaaa1111"]}) == {"argv": ["--api-key", REDACTED]}
    out = io.StringIO()
    stream = RedactedStream(out)
    assert stream.write("sent lb-named-aaaa1111\n") == len("sent lb-named-aaaa1111\n")
    stream.flush()
    assert out.getvalue() == f"sent {REDACTED}\n"


def test_a_secret_variable_holding_several_keys_has_each_replaced():
    env = {"DSPARK_API_KEYS": "lb-multi-one-1111 lb-multi-two-2222"}
    secrets = environment_secrets(env)
    assert redact("only lb-multi-two-2222 here", secrets) == f"only {REDACTED} here"


def test_redacting_again_changes_nothing_also_in_a_notebooks_json():
    once = redact("DSPARK_API_KEYS='lb-one-11111111 lb-two-22222222'")
    assert once == f"DSPARK_API_KEYS={REDACTED}"
    as_json = json.dumps({"text": [once + "\n", "next"]})
    assert redact(as_json) == as_json and redact(once) == once
