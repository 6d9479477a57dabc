"""The result of a check over a lane's nodes (lanebook.checks): ok only when every node was observed to hold."""
from lanebook.checks import NOT_OBSERVED, NodeCheck, NodeResult


def test_ok_only_when_every_node_holds():
    check = NodeCheck({"head": NodeResult(True, "112.3 GiB free"), "worker": NodeResult(True, "110.0 GiB free")})
    assert check.ok and bool(check) and check.failed == {}
    assert check.summary() == "head: 112.3 GiB free; worker: 110.0 GiB free"


def test_a_failing_node_fails_the_check_and_is_named():
    worker = NodeResult(False, "missing: ~/ds4/.env.dspark", {"missing": ["~/ds4/.env.dspark"]})
    check = NodeCheck({"head": NodeResult(True, "all present", {"missing": []}), "worker": worker})
    assert not check.ok and not check
    assert check.failed == {"worker": worker}
    assert check.summary() == "head: all present; worker: missing: ~/ds4/.env.dspark"
    assert check.figure("missing") == {"head": [], "worker": ["~/ds4/.env.dspark"]}


def test_a_dry_run_is_never_ok():
    check = NodeCheck.not_observed()
    assert not check.ok and check.summary() == NOT_OBSERVED == "not observed (dry run)"
    # even with node results that say ok, a dry run observed nothing
    assert not NodeCheck({"head": NodeResult(True, "ok")}, dry_run=True).ok


def test_a_check_of_no_node_observed_nothing():
    assert not NodeCheck({}).ok and NodeCheck({}).summary() == "no node observed"


def test_figures_only_from_nodes_that_have_them():
    check = NodeCheck({"head": NodeResult(True, "x", {"free_gib": 112.3}), "worker": NodeResult(False, "unreachable")})
    assert check.figure("free_gib") == {"head": 112.3}
