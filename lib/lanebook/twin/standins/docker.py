"""`docker` on a twin node: the CLI the recipe and lanebook call, over the twin's container runtime.

It accepts the command lines real nodes get (compose up -d/down/stop/rm/ps/logs, ps, logs, top,
inspect, image ls/inspect, stop/rm/kill) and answers in docker's formats, Go templates included.
Compose files are read by the real Compose v2 binary (lanebook.recipe.effective.compose_cli): `compose config` and
`compose version` run it as given, and `compose up -d` starts the container its `config` answer describes. The
binary's version is asked once per binary, not once per call (COMPOSE_VERSIONS in the twin's state), and `config` and
`version` import only what finds the binary (compose_tool): a suite makes hundreds of these calls. The
images present are the lanes' images, each with its repository digest, so a reference pinned by digest matches only
that digest.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

from lanebook.base.errors import LanebookError
from lanebook.twin.standins.base import STANDIN_MARK, fail, iso, node_condition, node_root, table, take, twin_file
from lanebook.twin.standins.runtime import Container, containers, find_container, remove_container, start_container


class Image:
    """An image a node holds: its size as `docker image ls` prints it, and its registry's repository digest (None for a
    local build)."""

    __slots__ = ("size", "digest")

    def __init__(self, size: str, digest: str | None = None):
        self.size = size
        self.digest = digest


IMAGES = {  # what every twin node holds: the lanes' images
    "ghcr.io/anemll/dspark-vllm-gx10:0.1.1": Image(
        "21.4GB", "sha256:a83948492cf13df455170fb42885f5ef4db54fefe0feff0f841ecbff464ac9d8"
    ),
    "ds4-f/patch3:local": Image("19.8GB"),
}

_TEMPLATE_RE = re.compile(r"\{\{\s*(json\s+)?\.([A-Za-z0-9_.]*)\s*\}\}")


def render_template(template: str, data: dict) -> str:
    """The subset of Go templates operators use with --format: {{.Field}}, {{.A.B}}, {{json .X}}, {{json .}}."""
    template = template.replace("\\t", "\t").removeprefix("table ")

    def value(match: re.Match) -> str:
        current = data
        for part in filter(None, match.group(2).split(".")):
            current = current.get(part, "") if isinstance(current, dict) else ""
        if match.group(1):
            return json.dumps(current, separators=(",", ":"))
        return json.dumps(current) if isinstance(current, (dict, list)) else str(current)

    return _TEMPLATE_RE.sub(value, template)


def _filters_match(container: Container, filters: list[str]) -> bool:
    summary = container.summary()
    for item in filters:
        key, _, value = item.partition("=")
        if key == "name" and not re.search(value, container.name):
            return False
        if key == "status" and summary["State"] != value:
            return False
        if key == "label" and value not in (summary["Labels"], "com.docker.compose.project"):
            return False
    return True


def _print_containers(items: list[Container], fmt: str | None, quiet: bool) -> None:
    if quiet:
        print("\n".join(c.id[:12] for c in items))
    elif fmt:
        for c in items:
            print(render_template(fmt, c.summary()))
    else:
        rows = [
            [s["ID"], s["Image"], s["Command"], s["RunningFor"] + " ago", s["Status"], "", s["Names"]]
            for s in (c.summary() for c in items)
        ]
        print(table(rows, ["CONTAINER ID", "IMAGE", "COMMAND", "CREATED", "STATUS", "PORTS", "NAMES"]))


def docker_ps(root: Path, args: list[str]) -> int:
    show_all = take(args, "-a", "--all", flag=True)
    quiet = take(args, "-q", "--quiet", flag=True)
    take(args, "--no-trunc", flag=True)
    fmt = take(args, "--format")
    filters = take(args, "-f", "--filter", many=True)
    items = [c for c in containers(root) if (show_all or c.running) and _filters_match(c, filters)]
    _print_containers(items, fmt, quiet)
    return 0


def _print_log(container: Container, tail: str | None, follow: bool, prefix: str = "") -> None:
    lines = container.log.read_text(errors="replace").splitlines(keepends=True) if container.log.exists() else []
    if tail not in (None, "all"):
        lines = lines[-int(tail) :] if int(tail) > 0 else []
    sys.stdout.write("".join(prefix + line for line in lines))
    sys.stdout.flush()
    if not follow:
        return
    position = container.log.stat().st_size if container.log.exists() else 0
    while True:
        with open(container.log, "rb") as handle:
            handle.seek(position)
            chunk = handle.read()
        if chunk:
            position += len(chunk)
            sys.stdout.write(
                "".join(prefix + line for line in chunk.decode(errors="replace").splitlines(keepends=True))
            )
            sys.stdout.flush()
        elif not container.running:
            return
        time.sleep(0.2)


def docker_logs(root: Path, args: list[str]) -> int:
    follow = take(args, "-f", "--follow", flag=True)
    tail = take(args, "-n", "--tail")
    take(args, "-t", "--timestamps", flag=True)
    take(args, "--since", "--until")
    if len(args) != 1:
        return fail('"docker logs" requires exactly 1 argument.')
    container = find_container(root, args[0])
    if not container:
        return fail(f"Error response from daemon: No such container: {args[0]}")
    _print_log(container, tail, follow)
    return 0


def docker_top(root: Path, args: list[str]) -> int:
    if not args:
        return fail('"docker top" requires at least 1 argument.')
    container = find_container(root, args[0])
    if not container or not container.running:
        return fail(
            f"Error response from daemon: container {args[0]} is not running"
            if container
            else f"Error response from daemon: No such container: {args[0]}"
        )
    import subprocess

    ps_args = args[1:] or ["-f"]
    pids = ",".join(map(str, container.session_pids()))
    return subprocess.run(["ps", *ps_args, "-p", pids]).returncode


def _inspect(container: Container) -> dict:
    spec, record = container.spec, container.record
    policy, _, retries = container.restart_policy.partition(":")
    return {
        "Id": container.id,
        "Name": "/" + container.name,
        "Created": iso(container.created_at),
        "RestartCount": 0,  # restarts after an exit, which the twin's dockerd does not make; a start at boot is not one
        "State": {
            "Status": container.state(),
            "Running": container.running,
            "Pid": container.pid if container.running else 0,
            "ExitCode": container.exit_code or 0,
            "StartedAt": iso(record.get("started_at")),
            "FinishedAt": iso(record.get("finished_at")),
        },
        "Config": {
            "Image": spec.get("image", ""),
            "Env": [f"{k}={v}" for k, v in spec.get("environment", {}).items()],
            "Cmd": ["/usr/local/bin/vllm", *spec.get("argv", [])],
            "Labels": {
                "com.docker.compose.project": spec.get("project", ""),
                "com.docker.compose.service": spec.get("service", ""),
            },
        },
        "HostConfig": {
            "NetworkMode": "host",
            "IpcMode": "host",
            "RestartPolicy": {"Name": policy, "MaximumRetryCount": int(retries or 0)},
        },
        "Mounts": [{"Type": "bind", "Source": host, "Destination": dest} for host, dest in spec.get("volumes", [])],
    }


def docker_inspect(root: Path, args: list[str]) -> int:
    fmt = take(args, "-f", "--format")
    take(args, "--type")
    found, code = [], 0
    for ref in args:
        container = find_container(root, ref)
        if container:
            found.append(_inspect(container))
        else:
            code = fail(f"Error: No such object: {ref}")
    if fmt:
        for item in found:
            print(render_template(fmt, item))
    else:
        print(json.dumps(found, indent=4))
    return code


def find_image(ref: str) -> tuple[str, Image] | None:
    """The image a reference names: NAME[:TAG] (TAG defaults to latest), or NAME[:TAG]@DIGEST (the digest decides)."""
    name, _, digest = ref.partition("@")
    last = name.rsplit("/", 1)[-1]
    repository, tag = name.rsplit(":", 1) if ":" in last else (name, "latest")
    for key, image in IMAGES.items():
        key_repository, key_tag = key.rsplit(":", 1)
        if key_repository == repository and (image.digest == digest if digest else key_tag == tag):
            return key, image
    return None


def image_present(ref: str) -> bool:
    return find_image(ref) is not None


def docker_images(args: list[str]) -> int:
    fmt = take(args, "--format")
    import hashlib

    rows = []
    for ref, image in IMAGES.items():
        repo, _, tag = ref.rpartition(":")
        rows.append(
            {
                "Repository": repo,
                "Tag": tag,
                "ID": hashlib.sha256(ref.encode()).hexdigest()[:12],
                "Digest": image.digest or "<none>",
                "CreatedSince": "4 weeks ago",
                "Size": image.size,
            }
        )
    if fmt:
        print("\n".join(render_template(fmt, r) for r in rows))
    else:
        print(
            table(
                [[r["Repository"], r["Tag"], r["ID"], r["CreatedSince"], r["Size"]] for r in rows],
                ["REPOSITORY", "TAG", "IMAGE ID", "CREATED", "SIZE"],
            )
        )
    return 0


def docker_image_inspect(args: list[str]) -> int:
    """`docker image inspect REF...`: the image's JSON, or "No such image" (exit 1) for each missing one."""
    import hashlib

    fmt = take(args, "-f", "--format")
    found, code = [], 0
    for ref in args:
        match = find_image(ref)
        if match is None:
            code = fail(f"Error response from daemon: No such image: {ref}")
            continue
        key, image = match
        repository = key.rsplit(":", 1)[0]
        found.append(
            {
                "Id": "sha256:" + hashlib.sha256(key.encode()).hexdigest(),
                "RepoTags": [key],
                "RepoDigests": [f"{repository}@{image.digest}"] if image.digest else [],
                "Size": image.size,
            }
        )
    if fmt:
        for item in found:
            print(render_template(fmt, item))
    elif found:
        print(json.dumps(found, indent=4))
    return code


COMPOSE_VERSIONS = "compose-versions.json"  # each Compose binary's version, kept under its path, size, mtime, inode

# Where the configuration was read from is not part of it: Compose compares the resulting service.
NOT_CONFIGURATION = ("compose_file", "env_file", "warnings")


def same_config(running: dict, wanted: dict) -> bool:
    """Would `compose up -d` leave the running container as it is (its configuration unchanged)?"""

    def config(spec: dict) -> dict:
        return {k: v for k, v in json.loads(json.dumps(spec)).items() if k not in NOT_CONFIGURATION}

    return config(running) == config(wanted)


def standin_dirs(path: str) -> tuple[str, ...]:
    """The PATH directories whose `docker` is a twin stand-in (this one): never the Compose to run."""
    found = []
    for directory in path.split(os.pathsep):
        try:
            with open(os.path.join(directory, "docker"), "rb") as shim:
                if STANDIN_MARK.encode() in shim.read(256):
                    found.append(directory)
        except OSError:
            continue
    return tuple(found)


def real_compose(args: list[str], read: list[str]) -> int:
    """Run the real Compose v2 with ARGS (the twin's docker runs what it is given where no daemon is needed:
    `compose config`, `compose version`), found as lanebook finds it, past this stand-in on PATH. READ: the files
    it reads (for compose_tool.one_shot_environment)."""
    import subprocess

    from lanebook.recipe.effective.compose_tool import ENV_VAR, NONE_FOUND, find_compose, one_shot_environment

    try:
        tool = find_compose(versions=twin_file(COMPOSE_VERSIONS), skip_dirs=standin_dirs(os.environ.get("PATH", "")))
    except LanebookError as exc:
        return fail(f"error: {exc}")
    if tool is None:
        return fail("the twin's docker compose: " + NONE_FOUND.format(var=ENV_VAR))
    texts = [Path(name).read_text(errors="replace") for name in read if Path(name).is_file()]
    sys.stdout.flush()
    return subprocess.run([*tool.argv, *args], env=one_shot_environment(os.environ, *texts)).returncode


def docker_compose(root: Path, args: list[str]) -> int:
    given = list(args)
    project = take(args, "-p", "--project-name")
    files = take(args, "-f", "--file", many=True)
    env_file = take(args, "--env-file")
    directory = Path(take(args, "--project-directory") or ".").resolve()
    take(args, "--ansi", "--progress", "--profile", many=True)
    if not args:
        return fail("Usage:  docker compose [OPTIONS] COMMAND")
    command, rest = args[0], args[1:]
    if command in ("config", "version"):
        return real_compose(given, [*files, *([env_file] if env_file else [])])
    compose_file = (
        Path(files[0])
        if files
        else next(
            (
                directory / n
                for n in ("compose.yaml", "compose.yml", "docker-compose.yml", "docker-compose.yaml")
                if (directory / n).exists()
            ),
            None,
        )
    )
    if compose_file is None:
        return fail("no configuration file provided: not found")
    compose_file = compose_file if compose_file.is_absolute() else directory / compose_file
    project = (project or compose_file.resolve().parent.name).lower()
    ours = [c for c in containers(root) if c.spec.get("project") == project]

    if command == "up":
        detach = take(rest, "-d", "--detach", flag=True)
        force = take(rest, "--force-recreate", flag=True)
        if not detach:
            return fail("the twin's docker runs containers detached only: use `docker compose up -d`")
        if env_file is None and (directory / ".env").exists():
            env_file = str(directory / ".env")
        from lanebook.recipe.effective.compose_cli import container_spec

        try:
            spec = container_spec(
                compose_file,
                env_file,
                project,
                os.environ,
                skip_dirs=standin_dirs(os.environ.get("PATH", "")),
                versions=twin_file(COMPOSE_VERSIONS),
            )
        except LanebookError as exc:
            return fail(f"error: {exc}")
        for warning in spec.warnings:
            print(f"WARN[0000] {warning}", file=sys.stderr)
        if not image_present(spec.image):
            return fail(
                f"Error response from daemon: pull access denied for {spec.image.split('@')[0]}: "
                "the twin's nodes hold only the lane images (docker image ls)"
            )
        existing = find_container(root, spec.name)
        if existing and existing.running and not force and same_config(existing.spec, spec.to_json()):
            print(f" Container {spec.name}  Running", file=sys.stderr)
            return 0
        if existing:
            print(f" Container {spec.name}  Recreate", file=sys.stderr)
            remove_container(existing)
        print(f" Container {spec.name}  Created", file=sys.stderr)
        start_container(root, spec)
        print(f" Container {spec.name}  Started", file=sys.stderr)
        return 0
    if command in ("down", "stop", "rm"):
        take(rest, "-t", "--timeout")
        take(rest, "--remove-orphans", "-v", "--volumes", "-f", "--force", "-s", "--stop", flag=True)
        for container in ours:
            print(f" Container {container.name}  Stopping", file=sys.stderr)
            container.stop()
            print(f" Container {container.name}  Stopped", file=sys.stderr)
            if command != "stop":
                remove_container(container)
                print(f" Container {container.name}  Removed", file=sys.stderr)
        return 0
    if command == "ps":
        show_all = take(rest, "-a", "--all", flag=True)
        quiet = take(rest, "-q", "--quiet", flag=True)
        fmt = take(rest, "--format")
        items = [c for c in ours if show_all or c.running]
        if fmt == "json":
            print("\n".join(json.dumps(c.summary()) for c in items))
        elif fmt or quiet:
            _print_containers(items, fmt, quiet)
        else:
            rows = [
                [s["Name"], s["Image"], s["Command"], s["Service"], s["RunningFor"] + " ago", s["Status"], ""]
                for s in (c.summary() for c in items)
            ]
            print(table(rows, ["NAME", "IMAGE", "COMMAND", "SERVICE", "CREATED", "STATUS", "PORTS"]))
        return 0
    if command == "logs":
        follow = take(rest, "-f", "--follow", flag=True)
        tail = take(rest, "-n", "--tail")
        no_prefix = take(rest, "--no-log-prefix", flag=True)
        take(rest, "-t", "--timestamps", "--no-color", flag=True)
        for container in ours:
            prefix = "" if no_prefix else f"{container.spec.get('service')}-1  | "
            _print_log(container, tail, follow, prefix)
        return 0
    return fail(
        f"the twin's docker compose does not implement '{command}' (up -d, down, stop, rm, ps, logs, config, version)"
    )


def docker_container_op(root: Path, op: str, args: list[str]) -> int:
    force = take(args, "-f", "--force", flag=True)
    take(args, "-t", "--time", "--timeout")
    code = 0
    for ref in args:
        container = find_container(root, ref)
        if not container:
            code = fail(f"Error response from daemon: No such container: {ref}")
            continue
        if op == "rm" and container.running and not force:
            code = fail(
                f'Error response from daemon: cannot remove container "/{container.name}": container is running: stop '
                "the container before removing or force remove"
            )
            continue
        if op == "kill":
            container.stop(signal.SIGKILL, grace_s=1)
        elif op == "rm":
            remove_container(container)
        else:
            container.stop()
        print(ref)
    return code


def docker_run(args: list[str]) -> int:
    """`docker run --rm --entrypoint sh IMAGE -c SCRIPT`: a one-off shell in one of the node's images, which holds
    none of this machine's programs (the script runs with an empty PATH: `command -v TOOL` finds nothing, as in an
    image without it). Only that form: the lanes' containers start through compose."""
    rm = take(args, "--rm", flag=True)
    entrypoint = take(args, "--entrypoint")
    if not rm or entrypoint != "sh" or len(args) != 3 or args[1] != "-c":
        return fail("the twin's docker runs only `docker run --rm --entrypoint sh IMAGE -c SCRIPT`")
    image, script = args[0], args[2]
    if not image_present(image):
        return fail(
            f"Unable to find image '{image}' locally\ndocker: Error response from daemon: pull access denied for "
            f"{image.split(':')[0]}, repository does not exist or may require 'docker login'."
        )
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="twin-image-bin-") as empty:
        return subprocess.run(["/bin/sh", "-c", script], env={"PATH": empty}).returncode


def docker(args: list[str]) -> int:
    if not args:
        return fail("Usage:  docker [OPTIONS] COMMAND")
    command, rest = args[0], args[1:]
    if node_condition("docker-denied"):
        return fail(
            "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock: "
            f'Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.47/{command}": dial unix /var/run/docker.sock: connect: '
            "permission denied"
        )
    if command == "compose" and node_condition("no-compose"):  # what docker says without the compose plugin
        return fail("docker: 'compose' is not a docker command.\nSee 'docker --help'")
    if command == "system" and rest[:1] == ["prune"]:
        return fail(
            "lanebook twin: refusing `docker system prune`: it would wipe the Anemll image "
            "ghcr.io/anemll/dspark-vllm-gx10:0.1.1 (seed 000 pitfall 4). Free sticky memory with drop_caches instead."
        )
    if command in ("images",) or (command == "image" and rest[:1] in (["ls"], ["list"])):
        return docker_images(rest[1:] if command == "image" else rest)
    if command == "image" and rest[:1] == ["inspect"]:
        return docker_image_inspect(rest[1:])
    if command == "run":
        return docker_run(rest)
    root = node_root()
    if command == "compose":
        return docker_compose(root, rest)
    if command == "ps" or (command == "container" and rest[:1] == ["ls"]):
        return docker_ps(root, rest if command == "ps" else rest[1:])
    handlers = {
        "logs": docker_logs,
        "top": docker_top,
        "inspect": docker_inspect,
    }
    if command in handlers:
        return handlers[command](root, rest)
    if command in ("stop", "rm", "kill"):
        return docker_container_op(root, command, rest)
    return fail(
        f"docker: '{command}' is not a docker command (the twin's docker stand-in: compose, ps, logs, top, inspect, "
        "image ls|inspect, run --rm --entrypoint sh, stop, rm, kill)"
    )
