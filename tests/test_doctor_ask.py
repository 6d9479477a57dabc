"""A model's reading (lanebook.verify.doctor_ask): `lanebook doctor --ask` sends the folded evidence, the causes and
the nearest reports to an OpenAI-compatible endpoint keyed like a lane, shows the answer beside the findings (never a
finding, the exit code unchanged), records prompt and reply under outputs/doctor/ and never shows the key. Plumbing
only, against a twin `vllm serve` started with --api-key: the reading's quality is the operator's to judge."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.twin_serve import SERVE_ARGS
from lanebook.base.errors import LanebookError
from lanebook.twin.vllm import start_local
from lanebook.verify.doctor import diagnose, folded_evidence, read_lines
from lanebook.verify.doctor_ask import ModelReading, context_budget_chars, endpoint, fit, messages, prompt
from lanebook.verify.doctor_report import print_reading

KEY = "sk-doctor-ask-planted-0123456789abcdef"
HF = "hf_" + "plantedDoctorAskToken0123456789"
POST = (
    f"Our pair dies at start. The worker never joins. HF_TOKEN={HF} is set on both.\n\n```\n"
    "(EngineCore pid=41) ERROR 12-01 10:00:01 [core.py:88] torch.distributed.DistStoreError: Timed out after 601 "
    "seconds waiting for clients. 1/2 clients joined.\n```\n"
)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    srv = start_local(
        [*SERVE_ARGS, "--api-key", KEY],
        tmp_path_factory.mktemp("ask") / "vllm.log",
        host="127.0.0.74",
        env={"VLLM_USE_BREAKABLE_CUDAGRAPH": "0", "LANEBOOK_TWIN_TIME_SCALE": "0.005"},
    )
    yield srv
    srv.stop()


def doctor(tmp_path: Path, *args: str, key: bool = True) -> subprocess.CompletedProcess:
    (tmp_path / "post.md").write_text(POST)
    env = {k: v for k, v in os.environ.items() if k != "DOCTOR_ASK_KEY"}
    env |= {"LANEBOOK_OUTPUTS": str(tmp_path / "outputs")} | ({"DOCTOR_ASK_KEY": KEY} if key else {})
    return subprocess.run(
        [sys.executable, "-m", "lanebook.cli", "doctor", "--logs", str(tmp_path / "post.md"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_the_prompt_carries_the_evidence_the_causes_and_the_nearest_reports():
    lines = read_lines("post.md", POST)
    sent, left_out = messages(prompt(folded_evidence(lines), diagnose(lines)))
    body = sent[1]["content"]
    assert "DistStoreError" in body and "D03: Rank 1 never joins" in body and "https://github.com/" in body
    assert "- D03 confirmed" in body and "never as a confirmed finding" in sent[0]["content"] and left_out == ""


def test_a_prompt_is_fitted_to_the_endpoints_context_and_says_what_it_left_out():
    causes = [f"D{n:02}: cause {n} - " + "x" * 60 for n in range(1, 41)]
    nearest = [f"- case-{n} " + "y" * 300 for n in range(5)]
    whole, said = fit("e" * 5000, causes, nearest, "- D07 suspected: cause 7", ["D07"])
    assert said == "" and whole == ("e" * 5000, "\n".join(causes), "\n".join(nearest))
    (evidence, kept, near), said = fit(
        "e" * 5000, causes, nearest, "- D07 suspected: cause 7", ["D07"], budget_chars=4000
    )
    assert len(evidence) + len(kept) + len(near) <= 4000 and evidence == "e" * len(evidence)
    assert kept.splitlines()[0].startswith("D01") and any(r.startswith("D07:") for r in kept.splitlines())
    assert near.startswith("- case-0") and said.startswith("the evidence cut to its first ")
    assert f"of {len(causes)} known causes" in said and f"of {len(nearest)} similar reports" in said
    assert context_budget_chars(None, 1024) is None and context_budget_chars(2048, 24) == (2048 - 24 - 64) * 2


def test_an_endpoint_is_a_lane_or_a_v1_url_and_a_urls_key_comes_from_a_file_or_the_environment(tmp_path):
    with pytest.raises(LanebookError, match="ends in /v1"):
        endpoint("http://127.0.0.1:9/chat")
    with pytest.raises(LanebookError, match="go with --ask URL"):
        endpoint("twin", key_env="X")
    with pytest.raises(LanebookError, match=r"\$NO_SUCH_KEY_VAR is not set"):
        endpoint("http://127.0.0.1:9/v1", key_env="NO_SUCH_KEY_VAR")
    loose = tmp_path / "key"
    loose.write_text(KEY)
    loose.chmod(0o644)
    with pytest.raises(LanebookError, match="readable by group or others"):
        endpoint("http://127.0.0.1:9/v1", key_file=str(loose))


@pytest.mark.twin
def test_the_reading_is_shown_beside_the_findings_recorded_and_the_key_never_shown(keyed, tmp_path, capsys):
    api = f"{keyed.url}/v1"
    done = doctor(tmp_path, "--ask", api, "--ask-key-env", "DOCTOR_ASK_KEY", "--ask-max-tokens", "24", "--json")
    assert done.returncode == 1, done.stderr  # D03 confirmed by the rules: the reading changes no exit code
    found = json.loads(done.stdout)
    reading = found["model_reading"]
    assert found["findings"][0]["id"] == "D03" and all(f["confidence"] != "model" for f in found["findings"])
    assert reading["api"] == api and reading["model"] and reading["reply"] and "error" not in reading
    record = json.loads(Path(reading["record"]).read_text())
    assert record["prompt_sha256"] == reading["prompt_sha256"] and record["reply"] == reading["reply"]
    assert (
        "DistStoreError" in record["messages"][1]["content"]
        and "HF_TOKEN=[REDACTED]" in record["messages"][1]["content"]
    )
    assert Path(reading["record"]).parent == tmp_path / "outputs" / "doctor"
    for text in (done.stdout, done.stderr, Path(reading["record"]).read_text()):
        assert KEY not in text and HF not in text  # the endpoint's key, and a token pasted in the logs

    print_reading(ModelReading(**{k: v for k, v in reading.items()}))
    shown = capsys.readouterr().out
    assert "a model's reading" in shown and "not a finding, never confirmed" in shown and reading["record"] in shown

    unkeyed = doctor(tmp_path, "--ask", api, "--json", key=False)
    refused = json.loads(unkeyed.stdout)["model_reading"]
    assert unkeyed.returncode == 1 and "401" in refused["error"] and refused["reply"] == ""
