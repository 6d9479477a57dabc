"""Expected results (lanebook.base.checks): one type for every check, one spelling of each outcome; a check over a
lane's nodes is ok only when every node was observed to hold."""

from lanebook.base.checks import (
    FAIL,
    MARKS,
    NOT_OBSERVED,
    NOT_OBSERVED_DRY_RUN,
    OUTCOMES,
    PASS,
    ExpectedResult,
    NodeResult,
)

on_nodes = ExpectedResult.on_nodes


def test_ok_only_when_every_node_holds():
    check = on_nodes({"head": NodeResult(True, "112.3 GiB free"), "worker": NodeResult(True, "110.0 GiB free")})
    assert check.ok and check.outcome == PASS and check.failed_nodes == {}
    assert check.detail == "head: 112.3 GiB free; worker: 110.0 GiB free"


def test_a_failing_node_fails_the_check_and_is_named():
    worker = NodeResult(False, "missing: ~/ds4/.env.dspark", {"missing": ["~/ds4/.env.dspark"]})
    check = on_nodes({"head": NodeResult(True, "all present", {"missing": []}), "worker": worker})
    assert not check.ok and check.outcome == FAIL
    assert check.failed_nodes == {"worker": worker}
    assert check.detail == "head: all present; worker: missing: ~/ds4/.env.dspark"
    assert check.figure("missing") == {"head": [], "worker": ["~/ds4/.env.dspark"]}


def test_a_dry_run_is_never_ok():
    check = on_nodes({}, dry_run=True)
    assert not check.ok and check.outcome == NOT_OBSERVED
    assert check.detail == NOT_OBSERVED_DRY_RUN == "not observed (dry run)"
    # even with node results that say ok, a dry run observed nothing
    assert not on_nodes({"head": NodeResult(True, "ok")}, dry_run=True).ok


def test_a_check_of_no_node_observed_nothing():
    assert not on_nodes({}).ok and on_nodes({}).detail == "no node observed"


def test_figures_only_from_nodes_that_have_them():
    check = on_nodes({"head": NodeResult(True, "x", {"free_gib": 112.3}), "worker": NodeResult(False, "unreachable")})
    assert check.figure("free_gib") == {"head": 112.3}


def test_a_judged_result_and_its_record():
    """None is not observed; the record keeps the keys stored records and the book read, the pitfall in its title."""
    judged = ExpectedResult.judged
    assert [judged("s", "e", ok).outcome for ok in (True, False, None)] == [PASS, FAIL, NOT_OBSERVED]
    result = judged("3 exact smoke", "thinking off", False, "reasoning of 12 characters", "P10")
    assert result.record() == {
        "step": "3 exact smoke",
        "what": "thinking off (P10)",
        "outcome": "fail",
        "detail": "reasoning of 12 characters",
    }


def test_one_mark_for_each_outcome():
    assert OUTCOMES == ("pass", "fail", "not observed", "skipped", "warning")
    assert MARKS == {
        "pass": "`PASS`",
        "fail": "`FAIL`",
        "not observed": "`NOT OBSERVED`",
        "skipped": "`SKIPPED`",
        "warning": "`WARNING`",
    }


def test_a_node_check_names_what_was_expected_and_each_key_is_its_own_result():
    check = on_nodes({"head": NodeResult(True, "ok")}, what="checkout present on every node")
    assert (check.step, check.what, check.outcome, check.detail) == (
        "",
        "checkout present on every node",
        PASS,
        "head: ok",
    )
    each = ExpectedResult.per_node({"head": (True, "48/48"), "worker": (False, 47)}, "weights complete on {}")
    assert [(c.what, c.outcome, c.detail, c.local) for c in each] == [
        ("weights complete on head", PASS, "48/48", False),
        ("weights complete on worker", FAIL, "47", False),
    ]
