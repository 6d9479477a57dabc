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
