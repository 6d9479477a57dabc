"""What a speed figure was measured on, and whether two measurements share that setup.

A speed figure means something only beside its setup: the image the head's container runs (its registry
digest where docker reports one, else its image ID), the model's snapshot revision (the hub tree's
refs/main on the head), the server's own version (vLLM answers GET /version with {"version": ...}), and
the lane file (its sha256). Figures measured on different setups, or on setups that cannot be told apart
because a side did not record something, are shown side by side but never judged against each other.

Reading the setup is I/O (one command per fact on the head, one HTTP GET); parsing and the comparison
rule are pure functions.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Optional

import httpx

from lanebook.base.checks import NOT_OBSERVED_DRY_RUN
from lanebook.base.files import sha256_file
from lanebook.nodes.http import direct_client
from lanebook.nodes.prometheus import server_root
from lanebook.nodes.ssh import LaneNodes, q, qpath

DIGEST_PREFIX = "sha256:"


@dataclass(frozen=True)
class Provenance:
    """The setup of one speed run; None where it could not be read (notes say why)."""

    lane: str
    twin: bool
    lane_file_sha256: Optional[str] = None
    image: Optional[str] = None  # the reference the head's container runs, without any @digest
    image_digest: Optional[str] = None  # the registry's repository digest, sha256:...
    image_id: Optional[str] = None  # the local image ID (sha256 of its config), for images with no registry digest
    model: Optional[str] = None  # the hub repository the lane serves
    model_revision: Optional[str] = None  # the snapshot refs/main names on the head
    server_version: Optional[str] = None  # GET /version
    notes: tuple[str, ...] = field(default_factory=tuple)

    def markdown(self) -> str:
        """The setup as a two-column table, unknown facts shown as such, then the notes."""
        rows = ["| fact | value |", "|---|---|"]
        rows += [
            f"| {f.name} | {'unknown' if getattr(self, f.name) is None else f'`{getattr(self, f.name)}`'} |"
            for f in fields(self)
            if f.name != "notes"
        ]
        return "\n".join(rows + [""] + [f"- {note}" for note in self.notes])

    def to_json(self) -> dict:
        data = asdict(self)
        data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Provenance":
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["notes"] = tuple(values.get("notes") or ())
        return cls(**values)


# --- pure parsing ---------------------------------------------------------------------------------


def split_image_ref(ref: str) -> tuple[str, Optional[str]]:
    """`NAME[:TAG][@sha256:...]` -> (NAME[:TAG], digest or None)."""
    name, _, digest = ref.strip().partition("@")
    return name, (digest if digest.startswith(DIGEST_PREFIX) else None)


def repository_of(name: str) -> str:
    """The repository of `NAME[:TAG]` (a registry's host:port is not a tag)."""
    head, _, last = name.rpartition("/")
    repo = last.split(":", 1)[0]
    return f"{head}/{repo}" if head else repo


def digest_for(name: str, repo_digests: list[str]) -> Optional[str]:
    """The digest `docker image inspect`'s RepoDigests gives the image's own repository (an image pulled
    from several repositories lists one per repository)."""
    repository = repository_of(name)
    for entry in repo_digests:
        entry_repo, _, digest = entry.partition("@")
        if entry_repo == repository and digest.startswith(DIGEST_PREFIX):
            return digest
    return None


def parse_revision(text: str) -> Optional[str]:
    """refs/main holds one commit hash (40 hex digits)."""
    revision = text.strip()
    return revision if len(revision) == 40 and all(c in "0123456789abcdef" for c in revision) else None


def parse_version(status_code: int, body: str) -> Optional[str]:
    """vLLM's GET /version: 200 with {"version": "..."}; anything else means the server does not say."""
    if status_code != 200:
        return None
    try:
        version = json.loads(body).get("version")
    except (ValueError, AttributeError):
        return None
    return str(version) if version else None


# --- the comparison rule --------------------------------------------------------------------------

# The facts two runs must share, each compared only when both sides know it.
SETUP_FIELDS = ("twin", "lane_file_sha256", "image", "model", "model_revision", "server_version")


@dataclass(frozen=True)
class SetupMatch:
    """How two runs' setups compare: same (judge), different, or unknown (cannot tell: do not judge either)."""

    differences: tuple[tuple[str, Any, Any], ...]  # (fact, this run's, the baseline's), both known and unequal
    unknown: tuple[str, ...]  # facts one side (or both) did not record

    @property
    def status(self) -> str:
        return "different" if self.differences else "unknown" if self.unknown else "same"

    @property
    def same(self) -> bool:
        return self.status == "same"

    @property
    def headline(self) -> str:
        return {"same": "same setup", "different": "different setup", "unknown": "setup not established"}[self.status]

    def summary(self) -> str:
        if self.same:
            return "same setup: " + ", ".join((*SETUP_FIELDS, "image identity"))
        parts = [f"{name} {mine!r} here, {theirs!r} in the baseline" for name, mine, theirs in self.differences]
        if self.unknown:
            parts.append("unknown on at least one side: " + ", ".join(self.unknown))
        return f"{self.headline}: " + "; ".join(parts)

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "differences": [list(d) for d in self.differences],
            "unknown": list(self.unknown),
        }


def _image_identity(mine: Provenance, theirs: Provenance) -> tuple[Optional[tuple], Optional[str]]:
    """The registry digest when both sides know it, else the local image ID when both know that:
    (a difference, None), (None, None) when they agree, or (None, "image identity") when nothing tells."""
    for name in ("image_digest", "image_id"):
        a, b = getattr(mine, name), getattr(theirs, name)
        if a is not None and b is not None:
            return ((name, a, b), None) if a != b else (None, None)
    return None, "image identity"


def compare_setups(mine: Provenance, theirs: Provenance) -> SetupMatch:
    """Same only when every fact is known on both sides and equal; one known difference makes them different."""
    differences, unknown = [], []
    for name in SETUP_FIELDS:
        a, b = getattr(mine, name), getattr(theirs, name)
        if a is None or b is None:
            unknown.append(name)
        elif a != b:
            differences.append((name, a, b))
    difference, missing = _image_identity(mine, theirs)
    if difference:
        differences.append(difference)
    if missing:
        unknown.append(missing)
    return SetupMatch(tuple(differences), tuple(unknown))


# --- reading it from the lane ---------------------------------------------------------------------


def container_image_command(container: str) -> str:
    """The image reference the container was created from, as the head's docker reports it."""
    return f"docker inspect --format '{{{{.Config.Image}}}}' {q(container)}"


def image_inspect_command(ref: str) -> str:
    """The image's whole inspect object (its RepoDigests and Id are read from it)."""
    return f"docker image inspect --format '{{{{json .}}}}' {q(ref)}"


def parse_image_inspect(name: str, text: str) -> tuple[Optional[str], Optional[str]]:
    """(registry digest, image ID) from `docker image inspect --format '{{json .}}'` output."""
    try:
        image = json.loads(text.strip() or "null")
    except ValueError:
        return None, None
    if not isinstance(image, dict):
        return None, None
    image_id = image.get("Id")
    digests = image.get("RepoDigests") if isinstance(image.get("RepoDigests"), list) else []
    return digest_for(name, [str(d) for d in digests]), (image_id if isinstance(image_id, str) and image_id else None)


def read_image(
    nodes: LaneNodes, container: str, fallback: str
) -> tuple[Optional[str], Optional[str], Optional[str], list[str]]:
    """(image, digest, image ID, notes) of the head's running container; the lane's image when no container answers."""
    result = nodes.head.run(container_image_command(container), check=False, timeout=30)
    if result.dry_run:
        nodes.head.run(image_inspect_command(fallback), check=False, timeout=30)
        return None, None, None, ["image: " + NOT_OBSERVED_DRY_RUN]
    notes = []
    ref = result.stdout.strip() if result.ok else ""
    if not ref:
        notes.append(f"image: no container {container} on the head; the lane's image {fallback} is recorded")
        ref = fallback
    name, digest = split_image_ref(ref)
    inspected = nodes.head.run(image_inspect_command(ref), check=False, timeout=30)
    image_id = None
    if inspected.ok:
        listed, image_id = parse_image_inspect(name, inspected.stdout)
        digest = digest or listed
    else:
        notes.append(f"image: the head's docker does not know {ref}")
    if digest is None:
        notes.append("image: no registry digest (a local build?): told apart by its image ID only")
    return name, digest, image_id, notes


def read_revision(nodes: LaneNodes) -> tuple[Optional[str], list[str]]:
    """The snapshot revision refs/main names in the head's hub tree of the lane's model."""
    ref = f"{nodes.params.weights.hub_dir}/refs/main"
    result = nodes.head.run(f"cat {qpath(ref)}", check=False, timeout=30)
    if result.dry_run:
        return None, ["model_revision: " + NOT_OBSERVED_DRY_RUN]
    revision = parse_revision(result.stdout) if result.ok else None
    return revision, ([] if revision else [f"model_revision: {ref} on the head holds no revision"])


def read_server_version(nodes: LaneNodes, timeout_s: float = 5.0) -> tuple[Optional[str], list[str]]:
    """GET /version at the server root, from this machine (a dry run records it and sends nothing)."""
    url = f"{server_root(nodes.params.api)}/version"
    if nodes.executor.dry_run:
        nodes.executor.record_local(f"GET {url}")
        return None, ["server_version: " + NOT_OBSERVED_DRY_RUN]
    try:
        with direct_client(timeout=timeout_s) as client:
            response = client.get(url)
    except httpx.HTTPError as exc:
        nodes.executor.record_local(f"GET {url}", exit_code=1, detail=type(exc).__name__)
        return None, [f"server_version: {url} gave no answer ({type(exc).__name__})"]
    version = parse_version(response.status_code, response.text)
    nodes.executor.record_local(f"GET {url}", detail=f"HTTP {response.status_code}")
    return version, (
        [] if version else [f"server_version: {url} answered HTTP {response.status_code} without a version"]
    )


def read_provenance(nodes: LaneNodes, lane_file: str | Path, container: str) -> Provenance:
    """Every fact of the setup: the lane file here, the image and model revision on the head, /version from here."""
    params = nodes.params
    image, digest, image_id, notes = read_image(nodes, container, str(params.env.get("DSPARK_VLLM_IMAGE", "")))
    revision, revision_notes = read_revision(nodes)
    version, version_notes = read_server_version(nodes)
    return Provenance(
        lane=params.name,
        twin=params.twin,
        lane_file_sha256=sha256_file(Path(lane_file)),
        image=image,
        image_digest=digest,
        image_id=image_id,
        model=params.weights.repo,
        model_revision=revision,
        server_version=version,
        notes=tuple(notes + revision_notes + version_notes),
    )
