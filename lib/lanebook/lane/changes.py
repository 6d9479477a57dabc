"""What a lane changes against its rollback lane, in the two things seed 000 says never to change together.

Seed 000 ("What we run"): "Weight-swap on a known-good Anemll dual-Spark checkout; do not change runtime and
weights the same weekend." The runtime is the image the lane runs (env DSPARK_VLLM_IMAGE); the weights are the
checkpoint it serves (weights.repo, at env DSPARK_REVISION when the lane pins one). A lane that changes both at
once against the lane it falls back to leaves a failure with two suspects, and a rollback that undoes both.
Lint reports it (S07) and `lanebook promote` refuses it unless the operator says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from lanebook.lane.params import LaneParams, load_lane

IMAGE_KEY = "DSPARK_VLLM_IMAGE"
REVISION_KEY = "DSPARK_REVISION"
ALLOW_FLAG = "--allow-runtime-and-weights"  # how the operator says so on `lanebook promote`
ALLOW_PARAMETER = "allow_runtime_and_weights"  # and to a runbook that lints (`-p allow_runtime_and_weights=true`)


def runtime(params: LaneParams) -> Optional[str]:
    """The image the lane names (None: it leaves the image to its checkout's compose default)."""
    image = params.env.get(IMAGE_KEY)
    return None if image is None else str(image)


def weights(params: LaneParams) -> str:
    """The checkpoint the lane serves: its repository, and the revision it pins if it pins one."""
    revision = params.env.get(REVISION_KEY)
    return params.weights.repo + (f"@{revision}" if revision not in (None, "") else "")


@dataclass(frozen=True)
class LaneChange:
    """A lane against its rollback lane: each pair is (the rollback lane's, the lane's)."""

    lane_name: str
    rollback: str
    runtime: tuple[Optional[str], Optional[str]]
    weights: tuple[str, str]

    @property
    def changes_runtime(self) -> bool:
        return self.runtime[0] != self.runtime[1]

    @property
    def changes_weights(self) -> bool:
        return self.weights[0] != self.weights[1]

    @property
    def changes_both(self) -> bool:
        return self.changes_runtime and self.changes_weights

    def describe(self) -> str:
        """`lane X changes both the runtime image (A → B) and the weights (C → D) against its rollback lane Y`."""
        old_image, new_image = (image or "the compose default" for image in self.runtime)
        return (
            f"lane {self.lane_name} changes both the runtime image ({old_image} → {new_image}) and the weights "
            f"({self.weights[0]} → {self.weights[1]}) against its rollback lane {self.rollback}"
        )


def change_from_rollback(params: LaneParams) -> Optional[LaneChange]:
    """The lane against its `rollback:` lane (loaded from params/); None when it names none. A rollback lane that
    cannot be loaded raises LaneError."""
    if not params.rollback:
        return None
    target = load_lane(params.rollback)
    return LaneChange(params.name, target.name, (runtime(target), runtime(params)), (weights(target), weights(params)))
