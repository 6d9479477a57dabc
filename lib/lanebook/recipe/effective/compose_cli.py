"""Docker Compose v2 itself decides the container: running `config` (compose_tool finds the binary), reading its answer.

What `vllm serve` gets is what `docker compose --env-file ENV -f COMPOSE -p PROJECT config --format json` says in the
environment the launcher gives Compose (its own exports over the environment it runs in). lanebook asks the real
tool instead of emulating it:
- a local checkout (lint --checkout, env render --checkout, dry runs): a local Compose v2 binary, found by
  compose_tool's `find_compose`;
- a checkout on a node: `docker compose ... config` on that node over SSH (`run_config_on`), with the texts
  lanebook computes for sent along (the node's own files as read, or a render not yet written).
Where neither can run, compose_model's emulation decides and `NO_COMPOSE` says so; tests/test_compose_differential.py
holds that emulation equal to the binary.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from lanebook.base.errors import LanebookError
from lanebook.recipe.compose import COMPOSE_NAME, service_names
from lanebook.recipe.effective.compose_model import (
    ContainerSpec,
)
from lanebook.recipe.effective.compose_tool import ComposeTool, find_compose, one_shot_environment
from lanebook.recipe.envfile import normalized_lines

if TYPE_CHECKING:
    from lanebook.nodes.ssh import Node
    from lanebook.recipe.effective.checkout import CheckoutFiles

NO_COMPOSE = (
    "effective configuration from lanebook's own interpolation: no Docker Compose v2 found (set LANEBOOK_COMPOSE)"
)
ENV_NAME = ".env.dspark"
TEMP_PREFIX = "lanebook-compose."
# Variables that would change which files or profiles Compose reads, not what it interpolates: never passed on.
NOT_PASSED = re.compile(r"^(COMPOSE_[A-Z_]*|DOCKER_HOST|DOCKER_CONTEXT)$")
_WARNING_RE = re.compile(r'level=warning msg="((?:[^"\\]|\\.)*)"')


def compose_environment(environ: Optional[Mapping[str, str]], exports: Mapping[str, str]) -> dict[str, str]:
    """The environment Compose runs in: ENVIRON (the one the launcher runs in) without what would change which files
    Compose reads, then the launcher's EXPORTS over it."""
    kept = {k: v for k, v in (environ or {}).items() if not NOT_PASSED.match(k)}
    return {**kept, **exports}


def _config_args(compose: str, env: Optional[str], project: str, project_dir: Optional[str]) -> list[str]:
    args = ["-p", project]
    if project_dir:
        args += ["--project-directory", project_dir]
    if env is not None:
        args += ["--env-file", env]
    return [*args, "-f", compose, "config", "--format", "json"]


def _named(message: str, compose_name: str, env_name: str) -> str:
    """Compose's message with its temporary copies called by the files' own names."""
    names = {COMPOSE_NAME: compose_name, ENV_NAME: env_name}
    message = re.sub(rf"\S*{re.escape(TEMP_PREFIX)}\w+/([\w.-]+)", lambda m: names.get(m.group(1), m.group(1)), message)
    return message


def _failure(stderr: str, compose_name: str, env_name: str) -> LanebookError:
    """Compose's refusal as one message naming the file: its last error line (`required variable X is missing a
    value: msg`, `yaml: line 3: ...`), prefixed with the compose file when Compose did not name a file."""
    lines = [line for line in stderr.strip().splitlines() if line.strip() and "level=warning" not in line]
    message = _named(lines[-1] if lines else "docker compose config failed", compose_name, env_name)
    message = re.sub(r'^time="[^"]*" level=\w+ msg="(.*)"$', r"\1", message)
    if compose_name not in message and env_name not in message:
        message = f"{compose_name}: {message}"
    return LanebookError(f"Docker Compose refuses the configuration: {message}")


def warnings_of(stderr: str) -> list[str]:
    """Compose's warnings (`The "X" variable is not set. Defaulting to a blank string.`), each once, in order."""
    found = [json.loads(f'"{m}"') for m in _WARNING_RE.findall(stderr)]
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class ConfigAnswer:
    """What `config --format json` answered: the configuration, and Compose's warnings."""

    config: dict
    warnings: list[str]


@functools.lru_cache(maxsize=64)
def _run_local(
    argv: tuple[str, ...],
    compose_text: str,
    env_text: Optional[str],
    environ: tuple[tuple[str, str], ...],
    project: str,
    project_dir: Optional[str],
    names: tuple[str, str],
) -> ConfigAnswer:
    held = next((key for key, value in environ if "\0" in key or "\0" in value), None)
    if held is not None:  # no process environment can carry a NUL byte (exec refuses it)
        raise LanebookError(f"{names[1]}: the value of {held!r} holds a NUL byte, which no environment can carry")
    with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX) as temp:
        compose = Path(temp) / COMPOSE_NAME
        compose.write_text(compose_text)
        env = None
        if env_text is not None:
            (Path(temp) / ENV_NAME).write_text(env_text)
            env = str(Path(temp) / ENV_NAME)
        try:
            result = subprocess.run(
                [*argv, *_config_args(str(compose), env, project, project_dir or temp)],
                env=one_shot_environment(dict(environ), compose_text, env_text or ""),
                cwd=project_dir if project_dir and Path(project_dir).is_dir() else temp,
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise LanebookError(f"{names[0]}: docker compose config did not answer in 60 s") from None
    if result.returncode != 0:
        raise _failure(result.stderr, *names)
    return ConfigAnswer(json.loads(result.stdout), warnings_of(result.stderr))


def run_config(
    tool: ComposeTool,
    compose_text: str,
    env_text: Optional[str],
    *,
    environ: Mapping[str, str],
    project: str,
    project_dir: Optional[str | Path] = None,
    compose_name: str = COMPOSE_NAME,
    env_name: str = ENV_NAME,
) -> ConfigAnswer:
    """`config --format json` of these texts by the local TOOL, in ENVIRON; relative paths resolve against
    PROJECT_DIR. Compose's refusal is a LanebookError naming the file."""
    return _run_local(
        tool.argv,
        compose_text,
        env_text,
        tuple(sorted(environ.items())),
        project,
        str(project_dir) if project_dir else None,
        (compose_name, env_name),
    )


def run_config_on(
    node: "Node",
    checkout: str,
    compose_text: str,
    env_text: Optional[str],
    *,
    exports: Mapping[str, str],
    project: str,
    compose_name: str = COMPOSE_NAME,
    env_name: str = ENV_NAME,
) -> Optional[ConfigAnswer]:
    """`docker compose ... config --format json` on NODE (through its executor), for these texts of the checkout
    at CHECKOUT, with the launcher's EXPORTS over the node's environment. The texts go to a private temporary
    directory on the node; the answer comes back base64-encoded (the executor's redaction must not touch it).
    None in a dry run (nothing ran)."""
    from lanebook.nodes.ssh import env_prefix, q, qpath

    def put(text: str, name: str) -> str:
        return f'printf %s {q(base64.b64encode(text.encode()).decode())} | base64 -d > "$d/{name}"'

    args = _config_args(f"$d/{COMPOSE_NAME}", f"$d/{ENV_NAME}" if env_text is not None else None, project, "@DIR")
    shown = " ".join('"' + a + '"' if a.startswith("$d/") else q(a) for a in args).replace(q("@DIR"), qpath(checkout))
    unset = " ".join(f"-u {name}" for name in ("COMPOSE_FILE", "COMPOSE_PROJECT_NAME", "COMPOSE_PROFILES"))
    script = "; ".join(
        [
            f'd=$(mktemp -d "${{TMPDIR:-/tmp}}/{TEMP_PREFIX}XXXXXX") || exit 1',
            "trap 'rm -rf \"$d\"' EXIT",
            put(compose_text, COMPOSE_NAME),
            *([put(env_text, ENV_NAME)] if env_text is not None else []),
            f"out=$(env {unset} {env_prefix(dict(exports))}docker compose {shown}) || exit $?",
            'printf %s "$out" | base64 -w0',
        ]
    )
    result = node.run(f"bash -c {q(script)}", timeout=120, check=False)
    if result.dry_run:
        return None
    if result.exit_code != 0:
        raise _failure(result.stderr, compose_name, env_name)
    return ConfigAnswer(json.loads(base64.b64decode(result.stdout.strip() or b"e30=")), warnings_of(result.stderr))


# --- the answer as the container ---------------------------------------------------------------------


def unescape(text: str) -> str:
    """A string of Compose's output as the container gets it: the output writes each literal `$` as `$$`."""
    return text.replace("$$", "$")


def _script(command: Any, where: str) -> str:
    if isinstance(command, list) and len(command) >= 3 and command[0] in ("bash", "sh") and command[1] in ("-c", "-lc"):
        return unescape(str(command[2]))
    if isinstance(command, list) and command:
        return unescape(shlex.join(map(str, command)))
    raise LanebookError(f"{where} has no bash -lc command script")


def first_service(compose_text: str) -> Optional[str]:
    """The compose file's first service, in the file's order (Compose's output sorts them)."""
    try:
        names = service_names(compose_text)
    except Exception:  # noqa: BLE001 - Compose accepted the text; only the order is asked
        return None
    return names[0] if names else None


def container_from_config(
    answer: ConfigAnswer,
    compose_text: str,
    compose_name: str,
    project: str,
    service: Optional[str] = None,
    env_file: str = "",
) -> ContainerSpec:
    """The container Compose's answer describes: environment, the serve argv the command script builds, volumes,
    restart policy (refused as the daemon refuses it), stop grace period, image, name."""
    services = answer.config.get("services") or {}
    name = service or first_service(compose_text) or next(iter(services), "")
    if name not in services:
        raise LanebookError(f"{compose_name}: no service '{name}' (have {', '.join(services)})")
    svc = services[name]
    where = f"{compose_name}: service '{name}'"
    environment = {k: unescape(str(v)) for k, v in (svc.get("environment") or {}).items() if v is not None}
    return ContainerSpec.from_service(
        svc,
        service=name,
        project=project,
        environment=environment,
        script=_script(svc.get("command"), where),
        volumes=[
            (unescape(str(v.get("source", ""))), unescape(str(v.get("target", ""))))
            for v in svc.get("volumes") or []
            if isinstance(v, dict) and v.get("source")
        ],
        compose_file=compose_name,
        env_file=env_file,
        warnings=answer.warnings,
        read=lambda value: unescape(str(value)),
    )


def container_spec(
    compose_file: str | Path,
    env_file: str | Path | None,
    project: Optional[str] = None,
    environ: Optional[Mapping[str, str]] = None,
    service: Optional[str] = None,
    skip_dirs: tuple[str, ...] = (),
    versions: Optional[Path] = None,
) -> ContainerSpec:
    """The container `docker compose -p PROJECT --env-file ENV -f COMPOSE up -d` creates in ENVIRON, as the local
    Compose v2 says (compose_model's emulation when there is none). SKIP_DIRS, VERSIONS: as find_compose takes them."""
    from lanebook.recipe.effective import compose_model

    tool = find_compose(versions=versions, skip_dirs=skip_dirs)
    if tool is None:
        return compose_model.container_spec(compose_file, env_file, project, environ, service)
    compose_file = Path(compose_file).resolve()
    try:
        text = compose_file.read_text()
    except FileNotFoundError:
        raise LanebookError(f"compose file not found: {compose_file}") from None
    env_text = None
    if env_file:
        try:
            env_text = Path(env_file).read_text()
        except FileNotFoundError:
            raise LanebookError(f"env file not found: {env_file}") from None
    project = (project or compose_file.parent.name).lower()
    answer = run_config(
        tool,
        text,
        env_text,
        environ=compose_environment(environ, {}),
        project=project,
        project_dir=compose_file.parent,
        compose_name=str(compose_file),
        env_name=str(env_file or ENV_NAME),
    )
    return container_from_config(answer, text, str(compose_file), project, service, str(env_file or ""))


# --- a checkout's container, asked of the Compose that decides it ------------------------------------


@dataclass(frozen=True)
class Decided:
    """The container a checkout's head rank runs, and who said so (a notice when it was not real Compose)."""

    spec: ContainerSpec
    decided_by: str  # "Docker Compose v2.40.3 (...)", "docker compose on NODE", or "lanebook's own interpolation"
    notice: str = ""  # shown once where the configuration is reported, when lanebook's emulation decided


def checkout_container(
    files: "CheckoutFiles",
    exports: Mapping[str, str],
    environ: Optional[Mapping[str, str]],
    emulated: Callable[[], ContainerSpec],
    project: str = "lane",
) -> Decided:
    """The container FILES' launcher starts on the head: a node's checkout asked of that node's `docker compose`, a
    local one of the local Compose v2 (find_compose), each with the launcher's EXPORTS; EMULATED (compose_model)
    when no Compose can run here."""
    compose_name = files.compose.name
    env_name = files.env.name if files.env else compose_name[: compose_name.rfind("/") + 1] + ENV_NAME
    env_text = "\n".join(normalized_lines(files.env.text)) if files.env else None  # the launcher's normalized copy
    if files.node is not None:
        answer = run_config_on(
            files.node,
            files.node_checkout,
            files.compose.text,
            env_text,
            exports=exports,
            project=project,
            compose_name=compose_name,
            env_name=env_name,
        )
        if answer is not None:
            spec = container_from_config(answer, files.compose.text, compose_name, project, env_file=env_name)
            return Decided(spec, f"docker compose on {files.node.alias}")
    tool = find_compose()
    if tool is None:
        return Decided(emulated(), "lanebook's own interpolation", NO_COMPOSE)
    local = Path(compose_name).parent
    project_dir = files.directory or (local if files.node is None and local.is_dir() else None)
    answer = run_config(
        tool,
        files.compose.text,
        env_text,
        environ=compose_environment(environ, exports),
        project=project,
        project_dir=project_dir,
        compose_name=compose_name,
        env_name=env_name,
    )
    env_file = env_name if files.env else ""
    spec = container_from_config(answer, files.compose.text, compose_name, project, env_file=env_file)
    return Decided(spec, tool.describe())
