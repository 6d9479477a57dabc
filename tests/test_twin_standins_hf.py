"""`hf download` on a twin node (lanebook.twin.standins.hf): the model tree in the node's HF cache, an
interrupted download leaving *.incomplete and resumed, offline refusals and unknown repositories."""

from pathlib import Path

from helpers.node_helpers import local_node
from lanebook.twin.standins.hf import OFFLINE_MISS, hub_dir

REPO_0731 = "deepseek-ai/DeepSeek-V4-Flash-0731"


def test_hub_dir_follows_the_client_variables():
    assert hub_dir({"HOME": "/h"}) == Path("/h/.cache/huggingface/hub")
    assert hub_dir({"HOME": "/h", "HF_HOME": "/hf"}) == Path("/hf/hub")
    assert hub_dir({"HOME": "/h", "HF_HOME": "/hf", "HF_HUB_CACHE": "/c"}) == Path("/c")
    assert hub_dir({"HF_HUB_CACHE": "/c"}, cache_dir="/d") == Path("/d")


def test_download_writes_resumes_and_refuses_offline(tmp_path):
    node = local_node(tmp_path)
    model_dir = ".cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731"
    offline = node.run(f"HF_HUB_OFFLINE=1 hf download {REPO_0731}")
    assert (offline.returncode, offline.stderr.strip()) == (1, OFFLINE_MISS)
    interrupt = (
        f"HF_HUB_OFFLINE=0 hf download {REPO_0731} --max-workers 4 2> err & pid=$!; "
        f"until grep -q Fetching err 2>/dev/null; do sleep 0.02; done; kill -TERM $pid; wait $pid; "
        f"find {model_dir} -name '*.incomplete' | wc -l; find {model_dir} -name 'model-*-of-*.safetensors' | wc -l"
    )
    for _ in range(3):  # interrupt once it is under way (up to 3 tries, each resuming the last)
        incomplete, linked = map(int, node.run(interrupt).stdout.split()[-2:])
        if incomplete:
            break
    assert incomplete >= 1 and linked < 48
    done = node.run(
        f"HF_HUB_OFFLINE=0 hf download {REPO_0731} && find {model_dir} -name '*.incomplete' | wc -l && "
        f"find {model_dir} -name 'model-*-of-*.safetensors' | wc -l"
    ).stdout.split()
    assert done[-2:] == ["0", "48"] and done[0].endswith("/snapshots/" + Path(done[0]).name)
    assert node.run(f"HF_HUB_OFFLINE=1 hf download {REPO_0731}").stdout.strip() == done[0]


def test_unknown_repository_and_revision(tmp_path):
    node = local_node(tmp_path)
    unknown = node.run("HF_HUB_OFFLINE=0 hf download nobody/nothing")
    assert unknown.returncode == 1 and "Repository Not Found" in unknown.stderr
    revision = node.run(f"HF_HUB_OFFLINE=0 hf download {REPO_0731} --revision deadbeef")
    assert revision.returncode == 1 and "Revision Not Found" in revision.stderr
    assert node.run("hf upload x").returncode == 2
