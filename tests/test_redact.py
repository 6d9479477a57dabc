"""Secrets never reach logs, records or pages."""
from lanebook.redact import REDACTED, redact, redact_data


def test_redacts_tokens_and_keeps_the_key_name():
    text = "HF_TOKEN=hf_abcdefghijklmnopqrstuvwx0123 curl -H 'Authorization: Bearer sk-123456789abcdef' --api-key s3cr3tvalue"
    out = redact(text)
    assert "hf_abcdefghijklmnopqrstuvwx0123" not in out and "sk-123456789abcdef" not in out and "s3cr3tvalue" not in out
    assert out.startswith("HF_TOKEN=" + REDACTED)


def test_documented_placeholder_is_not_a_secret():
    assert redact("api_key=no-key-required") == "api_key=no-key-required"
    data = redact_data({"hermes": {"api_key": "no-key-required"}, "token": "abc", "n": 3, "note": "Bearer abcdefghijkl"})
    assert data == {"hermes": {"api_key": "no-key-required"}, "token": REDACTED, "n": 3, "note": "Bearer " + REDACTED}


def test_token_counts_are_not_secrets():
    """vLLM's knobs and figures name tokens all the time; only keys that end in a secret word are secrets."""
    line = "MAX_NUM_BATCHED_TOKENS=8192 MTP_NUM_TOKENS=5 max_num_batched_tokens=8192 GPU KV cache size: 2,493,464 tokens"
    assert redact(line) == line
    data = {"max_tokens": "256", "kv_cache_tokens": "2493464", "completion_tokens": 3}
    assert redact_data(data) == data


def test_json_and_yaml_key_forms():
    assert "sk-live-123" not in redact('{"api_key": "sk-live-123", "model": "m"}')
    assert "sk-live-123" not in redact("providers:\n  spark:\n    api_key: sk-live-123\n")
    assert redact("    api_key: no-key-required  # not none") == "    api_key: no-key-required  # not none"
    assert "abc123" not in redact("DSPARK_API_KEYS=abc123 VLLM_API_KEY=abc123")
