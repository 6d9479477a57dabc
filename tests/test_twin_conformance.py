"""The comparison twin/conformance.py makes of two servers' answers, and its list (the real servers meet in
tests/test_real_vllm.py)."""

from __future__ import annotations

from lanebook.twin import conformance


def test_shape_walks_objects_and_merges_list_items():
    assert conformance.shape({"a": [{"b": 1}, {"b": None, "c": "x"}], "d": 1.5}) == {
        ".": "object",
        "a": "array",
        "a[]": "object",
        "a[].b": "integer|null",
        "a[].c": "string",
        "d": "number",
    }


def test_differences_name_what_only_one_side_has_and_what_changed_type():
    twin = {"id": "x", "usage": {"prompt_tokens": 3}, "fingerprint": None, "score": 1}
    real = {"id": "y", "usage": {"prompt_tokens": 3, "details": None}, "fingerprint": "vllm-0.32.0", "score": 0.5}
    assert conformance.shape_differences("chat", twin, real) == {
        ("chat", "usage.details", "absent", "null"),
        ("chat", "fingerprint", "null", "string"),
    }  # an integer against a number is no difference (JSON does not tell them apart)


def test_error_fields_are_what_a_client_acts_on():
    body = {"error": {"message": "words", "type": "BadRequestError", "param": "top_p", "code": 400}}
    assert conformance.error_fields(body) == {"type": "BadRequestError", "param": "top_p", "code": 400}
    assert conformance.error_fields({"detail": "Not Found"}) is None


def test_created_gauges_are_left_out_beside_their_family():
    families = {
        "vllm:prompt_tokens": ("counter", ("engine",)),
        "vllm:prompt_tokens_created": ("gauge", ("engine",)),
        "vllm:ttft_seconds": ("histogram", ("engine",)),
        "vllm:ttft_seconds_created": ("gauge", ("engine",)),
        "vllm:lonely_created": ("gauge", ()),
    }
    assert sorted(conformance.without_created(families)) == [
        "vllm:lonely_created",
        "vllm:prompt_tokens",
        "vllm:ttft_seconds",
    ]


def test_every_listed_difference_has_a_reason_and_appears_once():
    listed = conformance.listed()
    assert all(d.reason for d in listed)
    assert len({d.key for d in listed}) == len(listed)
    section = conformance.render_section()
    assert section.startswith("## What a client sees differently from a real vLLM\n")
    assert section.count("\n| ") == len(listed) + 1  # the header row and a row each
