"""Fleet files: several lanes promoted together, a canary first, then waves (params/fleets/NAME.yaml).

A lab running several lanes moves a new recipe across them without taking every lane down at once (issue 20): the
canary lane's promotion alone first, then the other lanes in the file's order in waves of at most `wave_size`, the
next wave only when the last one passed within its failure budget (how many lanes of a wave may fail before the
fleet stops; the canary's budget is always 0). Which lanes go together is a pure function of the file (`plan_waves`).

The file is validated on load, every problem one LaneError line naming the file and key: unknown keys, a lane with
no file under params/, a lane twice, a canary that is not one of the lanes, two lanes that share a node (the same host
and SSH port). Each lane of a fleet is its own pair or group of nodes: a wave promotes its lanes at once, and a later
wave's lane on a node of an earlier one would find that lane serving (the launch runbook refuses to start beside
another lane: both want the whole pair).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, StrictInt, StrictStr, ValidationError, ValidationInfo, field_validator

from lanebook.base.errors import LaneError
from lanebook.base.paths import PARAMS_DIR
from lanebook.lane.params import (
    Strict,
    check_name,
    lane_path,
    load_lane,
    read_mapping,
    validation_problem,
)

FLEETS_DIR = PARAMS_DIR / "fleets"


class FleetParams(Strict):
    name: StrictStr
    description: StrictStr
    lanes: list[StrictStr] = Field(min_length=1, description="lane names, each a lane file under params/")
    canary: StrictStr = Field(description="the lane promoted alone first; one of the lanes")
    wave_size: StrictInt = Field(ge=1, description="at most this many lanes are promoted at once after the canary")
    failure_budget: StrictInt = Field(
        ge=0, description="how many lanes of a wave may fail before the fleet stops (0: any failure stops it)"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value)

    @field_validator("lanes")
    @classmethod
    def _lanes(cls, lanes: list[str]) -> list[str]:
        for lane in lanes:
            check_name(lane)
            try:
                lane_path(lane)
            except LaneError as exc:
                raise ValueError(str(exc)) from None
        twice = sorted({lane for lane in lanes if lanes.count(lane) > 1})
        if twice:
            raise ValueError(f"a lane is listed twice: {', '.join(twice)}")
        return lanes

    @field_validator("canary")
    @classmethod
    def _canary(cls, canary: str, info: ValidationInfo) -> str:
        lanes = info.data.get("lanes")
        if lanes is not None and canary not in lanes:
            raise ValueError(f"must be one of the fleet's lanes ({', '.join(lanes)}), got {canary!r}")
        return canary


@dataclass(frozen=True)
class Wave:
    """Lanes promoted at once; BUDGET of them may fail before the fleet stops."""

    index: int
    lanes: tuple[str, ...]
    budget: int

    @property
    def canary(self) -> bool:
        return self.index == 0


def plan_waves(fleet: FleetParams) -> list[Wave]:
    """The canary alone first (budget 0), then the other lanes in file order, at most wave_size at a time."""
    rest = [lane for lane in fleet.lanes if lane != fleet.canary]
    waves = [Wave(0, (fleet.canary,), 0)]
    for start in range(0, len(rest), fleet.wave_size):
        waves.append(Wave(len(waves), tuple(rest[start : start + fleet.wave_size]), fleet.failure_budget))
    return waves


def shared_nodes(nodes: dict[str, set[str]]) -> list[tuple[str, str, str]]:
    """(lane, other lane, host:port) for each two lanes that share a node, in the lanes' order; NODES: each lane's."""
    lanes = list(nodes)
    return [
        (lane, other, node)
        for i, lane in enumerate(lanes)
        for other in lanes[i + 1 :]
        for node in sorted(nodes[lane] & nodes[other])
    ]


def fleet_path(name_or_path: str | Path) -> Path:
    """A fleet name under params/fleets/ or the path of a fleet YAML file."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or len(p.parts) > 1:
        if not p.is_file():
            raise LaneError(f"fleet file not found: {p}")
        return p
    candidate = FLEETS_DIR / f"{name_or_path}.yaml"
    if not candidate.is_file():
        raise LaneError(f"unknown fleet '{name_or_path}' (known: {', '.join(fleet_names()) or 'none'})")
    return candidate


def fleet_names() -> list[str]:
    return sorted(p.stem for p in FLEETS_DIR.glob("*.yaml"))


def load_fleet(name_or_path: str | Path) -> FleetParams:
    """Load and validate a fleet file: one LaneError line naming the file and the key for any problem."""
    path = fleet_path(name_or_path)
    _, data = read_mapping(path, "fleet file")
    try:
        fleet = FleetParams.model_validate(data)
    except ValidationError as exc:
        raise LaneError(validation_problem(path, exc)) from None
    nodes = {}
    for lane in fleet.lanes:
        try:
            nodes[lane] = {f"{n.host}:{n.port}" for n in load_lane(lane).nodes}
        except LaneError as exc:
            raise LaneError(f"{path}: 'lanes': lane {lane} cannot be loaded: {exc}") from None
    clashes = shared_nodes(nodes)
    if clashes:
        lane, other, node = clashes[0]
        raise LaneError(
            f"{path}: 'lanes': {lane} and {other} share the node {node}: each lane of a fleet must be on nodes of its "
            f"own (one lane serves on a pair at a time; promote the other with `lanebook promote` when it is its turn)"
        )
    return fleet
