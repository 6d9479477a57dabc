"""The setup of a speed run (lanebook.speed.provenance): parsing docker's, the hub tree's and /version's answers,
the rule that says whether two setups are the same, and what a dry run would ask (nothing sent)."""

import json
from dataclasses import replace

from lanebook.base.files import sha256_file
from lanebook.lane.params import lane_path, load_lane
from lanebook.nodes.ssh import LaneNodes
from lanebook.speed.provenance import (
    Provenance,
    compare_setups,
    digest_for,
    parse_image_inspect,
    parse_revision,
    parse_version,
    read_provenance,
    repository_of,
    split_image_ref,
)

DIGEST = "sha256:a83948492cf13df455170fb42885f5ef4db54fefe0feff0f841ecbff464ac9d8"
IMAGE = "ghcr.io/anemll/dspark-vllm-gx10:0.1.1"
REVISION = "2f3f00a2c8096687e351db339e147c2321c43c9d"


def setup(**changes):
    base = Provenance(
        lane="twin",
        twin=True,
        lane_file_sha256="ab" * 32,
        image=IMAGE,
        image_digest=DIGEST,
        image_id="sha256:" + "1" * 64,
        model="deepseek-ai/DeepSeek-V4-Flash-0731",
        model_revision=REVISION,
        server_version="0.25.2+lanebook.twin",
    )
    return replace(base, **changes)


def test_image_references_split_into_name_and_digest():
    assert split_image_ref(f"{IMAGE}@{DIGEST}\n") == (IMAGE, DIGEST)
    assert split_image_ref(IMAGE) == (IMAGE, None)
    assert repository_of(IMAGE) == "ghcr.io/anemll/dspark-vllm-gx10"
    assert repository_of("localhost:5000/ds4-f/patch3") == "localhost:5000/ds4-f/patch3"  # a port is not a tag
    assert repository_of("ds4-f/patch3:local") == "ds4-f/patch3"


def test_the_digest_is_the_images_own_repositorys():
    digests = ["mirror.example/anemll/dspark-vllm-gx10@sha256:" + "0" * 64, f"ghcr.io/anemll/dspark-vllm-gx10@{DIGEST}"]
    assert digest_for(IMAGE, digests) == DIGEST
    assert digest_for("ds4-f/patch3:local", digests) is None


def test_image_inspect_gives_digest_and_id():
    text = json.dumps(
        {"Id": "sha256:" + "2" * 64, "RepoTags": [IMAGE], "RepoDigests": [f"ghcr.io/anemll/dspark-vllm-gx10@{DIGEST}"]}
    )
    assert parse_image_inspect(IMAGE, text) == (DIGEST, "sha256:" + "2" * 64)
    local = json.dumps({"Id": "sha256:" + "3" * 64, "RepoTags": ["ds4-f/patch3:local"], "RepoDigests": []})
    assert parse_image_inspect("ds4-f/patch3:local", local) == (None, "sha256:" + "3" * 64)
    assert parse_image_inspect(IMAGE, "Error: no such image") == (None, None)


def test_revision_and_version_parsing():
    assert parse_revision(REVISION + "\n") == REVISION
    assert parse_revision("main\n") is None and parse_revision("") is None
    assert parse_version(200, '{"version": "0.11.0"}') == "0.11.0"
    assert parse_version(404, '{"detail": "Not Found"}') is None
    assert parse_version(200, "<html>") is None and parse_version(200, "{}") is None


def test_same_setup_only_when_every_fact_is_known_and_equal():
    match = compare_setups(setup(), setup())
    assert (match.status, match.same, match.headline) == ("same", True, "same setup")
    assert match.summary().startswith("same setup: twin, lane_file_sha256, image")


def test_one_known_difference_makes_a_different_setup():
    match = compare_setups(setup(server_version="0.26.0"), setup())
    assert (match.status, match.headline) == ("different", "different setup")
    assert match.differences == (("server_version", "0.26.0", "0.25.2+lanebook.twin"),)
    assert "server_version '0.26.0' here, '0.25.2+lanebook.twin' in the baseline" in match.summary()
    assert compare_setups(setup(twin=False), setup()).differences == (("twin", False, True),)


def test_a_fact_not_recorded_leaves_the_setup_not_established():
    match = compare_setups(setup(), setup(model_revision=None))
    assert (match.status, match.unknown, match.headline) == ("unknown", ("model_revision",), "setup not established")
    assert match.summary() == "setup not established: unknown on at least one side: model_revision"


def test_image_identity_is_the_digest_else_the_image_id():
    rebuilt = setup(image_digest=None, image_id="sha256:" + "9" * 64)
    assert compare_setups(rebuilt, setup(image_digest=None)).differences == (
        ("image_id", "sha256:" + "9" * 64, "sha256:" + "1" * 64),
    )
    retagged_same_digest = setup(image_id="sha256:" + "9" * 64)
    assert compare_setups(retagged_same_digest, setup()).same  # the registry digest decides when both have it
    assert compare_setups(setup(image_digest=None, image_id=None), setup()).unknown == ("image identity",)
    assert compare_setups(setup(image_digest="sha256:" + "8" * 64), setup()).status == "different"


def test_provenance_round_trips_through_json_and_shows_unknowns():
    prov = setup(model_revision=None, notes=("model_revision: refs/main missing",))
    assert Provenance.from_json(json.loads(json.dumps(prov.to_json()))) == prov
    table = prov.markdown()
    assert "| model_revision | unknown |" in table and f"| image | `{IMAGE}` |" in table
    assert table.endswith("- model_revision: refs/main missing")


def test_a_dry_run_records_what_it_would_ask_and_knows_only_the_lane_file():
    params = load_lane("anemll-0731")
    with LaneNodes(params, dry_run=True) as nodes:
        prov = read_provenance(nodes, lane_path("anemll-0731"), "ds4-f-mia-anemll-0731-vllm-dspark-1")
        commands = nodes.executor.commands()
    assert prov.lane_file_sha256 == sha256_file(lane_path("anemll-0731"))
    assert (prov.image, prov.image_digest, prov.model_revision, prov.server_version) == (None, None, None, None)
    assert commands == [
        "head: docker inspect --format '{{.Config.Image}}' ds4-f-mia-anemll-0731-vllm-dspark-1",
        f"head: docker image inspect --format '{{{{json .}}}}' {IMAGE}",
        "head: cat ~/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/refs/main",
        "local: GET http://192.168.1.11:8888/version",
    ]
