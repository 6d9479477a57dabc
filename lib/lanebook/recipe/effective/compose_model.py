"""The container Compose creates from a compose file, and the `vllm serve` argv the image's script builds."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from ruamel.yaml.error import YAMLError

from lanebook.base.errors import LanebookError
from lanebook.recipe.compose import safe_data
from lanebook.recipe.envfile import interpolate, parse_env_file, resolve_env

SERVE_RE = re.compile(r"exec\s+/usr/local/bin/vllm\s+serve\b(?P<args>.*)$", re.S)
# The image's statements the serve arguments depend on, in the order the script runs them.
STATEMENT_RES = (
    re.compile(r'case\s+"\$\{DRAFT_SAMPLE_METHOD\b.*?\besac\s*;?', re.S),
    re.compile(r'SPECULATIVE_CONFIG="(?:[^"\\]|\\.)*"\s*;?'),
    re.compile(r'case\s+"\$\{DEFAULT_THINKING\b.*?\besac\s*;?', re.S),
)
# The variables the image sets from the environment before exec (its key, quantization and revision logic).
ARGS_PRELUDE = (
    r"""
if [ -n "${VLLM_API_KEY:-}" ] && [[ "${DSPARK_API_KEYS:-}" == *[!$' \t']* ]]; then
  echo "error: VLLM_API_KEY and DSPARK_API_KEYS are both set; set exactly one of them" >&2; exit 2
fi
API_KEY_ARGS=()
if [[ "${DSPARK_API_KEYS:-}" == *[!$' \t']* ]]; then read -r -a _keys <<< "${DSPARK_API_KEYS}"; """
    r"""API_KEY_ARGS=(--api-key "${_keys[@]}"); fi
VLLM_QUANTIZATION_ARGS=""
if [ "${ENABLE_VLLM_GB10_PATCH:-0}" = "1" ]; then VLLM_QUANTIZATION_ARGS="--quantization modelopt_gb10_hybrid"; fi
REVISION_ARGS=""
if [ -n "${DSPARK_REVISION:-}" ]; then REVISION_ARGS="--revision ${DSPARK_REVISION}"; fi
"""
)


class ContainerExit(LanebookError):
    """The image's entrypoint refuses the configuration and the container exits with this code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class ContainerSpec:
    """One container as Compose would create it: name, image, env, the `vllm serve` argv, mounts, restart policy."""

    name: str
    project: str
    service: str
    image: str
    environment: dict[str, str]
    argv: list[str]  # starts with "serve", as given to /usr/local/bin/vllm
    volumes: list[tuple[str, str]] = field(default_factory=list)  # (host path, container path)
    stop_grace_s: float = 10.0
    restart: str = "no"  # the restart policy: no, always, on-failure[:N] or unless-stopped
    compose_file: str = ""
    env_file: str = ""
    warnings: list[str] = field(default_factory=list)
    entrypoint_error: Optional[tuple[int, str]] = None  # the image's script refuses the config: (exit code, message)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ContainerSpec":
        error = data.get("entrypoint_error")
        return cls(
            **{
                **data,
                "volumes": [tuple(v) for v in data.get("volumes", [])],
                "entrypoint_error": tuple(error) if error else None,
            }
        )

    @classmethod
    def from_service(
        cls,
        svc: Mapping[str, Any],
        *,
        service: str,
        project: str,
        environment: dict[str, str],
        script: str,
        volumes: list[tuple[str, str]],
        compose_file: str,
        env_file: str,
        warnings: list[str],
        read: Callable[[Any], str] = str,
    ) -> "ContainerSpec":
        """The container of one compose service, once its environment, command script and volumes are read: the
        serve argv the script builds (or the exit its entrypoint makes), the restart policy (refused as the daemon
        refuses it), the stop grace period, the image and the name (Compose's default PROJECT-SERVICE-1). READ
        turns a value of SVC into the text the container gets."""
        try:
            argv, entrypoint_error = serve_argv(script, environment, source=compose_file), None
        except ContainerExit as exc:
            argv, entrypoint_error = [], (exc.code, str(exc))
        restart = svc.get("restart")
        try:
            restart = restart_policy(None if restart is None else read(restart))
        except LanebookError as exc:
            raise LanebookError(f"{compose_file}: service '{service}': {exc}") from None
        return cls(
            name=read(svc.get("container_name") or f"{project}-{service}-1"),
            project=project,
            service=service,
            image=read(svc.get("image", "")),
            environment=environment,
            argv=argv,
            volumes=volumes,
            stop_grace_s=duration_s(svc.get("stop_grace_period")),
            restart=restart,
            compose_file=compose_file,
            env_file=env_file,
            warnings=warnings,
            entrypoint_error=entrypoint_error,
        )

    def arg(self, flag: str) -> str | None:
        """The value following a flag in the serve argv, or None."""
        if flag in self.argv[:-1]:
            return self.argv[self.argv.index(flag) + 1]
        return None


def _compose_data(text: str, name: str) -> dict:
    try:
        data = safe_data(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise LanebookError(f"{name}{where}: not a valid compose file ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict) or not data["services"]:
        raise LanebookError(f"{name}: a compose file needs a services: map with at least one service")
    return data


def _interpolate_tree(node: Any, variables: Mapping[str, str], missing: set[str]) -> Any:
    """Interpolate every string in the compose tree, noting unset variables as Compose warns about them."""
    if isinstance(node, str):
        for name in re.findall(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)\}", node):
            if name not in variables:
                missing.add(name)
        return interpolate(node, variables)
    if isinstance(node, list):
        return [_interpolate_tree(item, variables, missing) for item in node]
    if isinstance(node, dict):
        return {key: _interpolate_tree(value, variables, missing) for key, value in node.items()}
    return node


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _environment(service: dict, variables: Mapping[str, str]) -> dict[str, str]:
    """The service's environment: map (or KEY=VALUE list); a bare KEY takes its value from the variables."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        pairs = [item.split("=", 1) if "=" in item else [item, None] for item in map(str, raw)]
        raw = {key: value for key, value in pairs}
    env = {}
    for key, value in raw.items():
        if value is None:
            if key in variables:
                env[str(key)] = variables[key]
        else:
            env[str(key)] = _env_value(value)
    return env


_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def duration_s(value: Any, default: float = 10.0) -> float:
    """A Compose duration in seconds: `10`, `90s`, `500ms`, or Go's compound form Compose prints (`1m30s`)."""
    text = str(value or "").strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return default
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


RESTART_POLICIES = ("no", "always", "on-failure", "unless-stopped")


def restart_policy(value: Any) -> str:
    """The restart policy the container gets from a service's `restart:` value (interpolated), refused as the
    daemon refuses it: none or an empty value is `no`, a retry count only with on-failure (`on-failure:3`)."""
    text = "" if value is None else str(value).strip()
    name, colon, count = text.partition(":")
    if colon and not name:
        raise LanebookError("invalid restart policy format: no policy provided before colon")
    if colon and not re.fullmatch(r"-?\d+", count):
        raise LanebookError("invalid restart policy format: maximum retry count must be an integer")
    if name not in ("", *RESTART_POLICIES):
        raise LanebookError(
            f"invalid restart policy: unknown policy '{name}'; use one of 'no', 'always', "
            "'on-failure', or 'unless-stopped'"
        )
    if colon and name != "on-failure":
        raise LanebookError("invalid restart policy: maximum retry count can only be used with 'on-failure'")
    if colon and int(count) < 0:
        raise LanebookError("invalid restart policy: maximum retry count cannot be negative")
    return f"{name}:{int(count)}" if colon else name or "no"


# Variables that make bash run code before or besides the program: dropped from the environment it gets.
SHELL_CODE_VARIABLES = {"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "PATH"}


def _inert_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """The compose environment for the local bash that expands the serve arguments, unable to run anything: no
    startup file or exported function, and a PATH that finds no command (in restricted mode `/bin/x` is refused,
    as are output redirections and `exec`), so `$(...)` or backticks in a compose file given to lint run nothing."""
    kept = {k: v for k, v in environment.items() if k not in SHELL_CODE_VARIABLES and not k.startswith("BASH_FUNC_")}
    for key, value in kept.items():
        if "\0" in key + value or "=" in key:
            raise LanebookError(
                f"environment variable {key!r}: no process environment can carry a NUL byte or a name with '='"
            )
    return {**kept, "PATH": "/dev/null"}


def serve_argv(script: str, environment: Mapping[str, str], source: str = "command") -> list[str]:
    """Run the image's config statements and print the `vllm serve` argument list, NUL-separated, in a restricted
    bash that can run no command (the compose file may come from anyone: see _inert_environment)."""
    serve = SERVE_RE.search(script)
    if not serve:
        raise LanebookError(f"{source}: no `exec /usr/local/bin/vllm serve ...` in the service command")
    statements = [m.group(0) for rx in STATEMENT_RES if (m := rx.search(script[: serve.start()]))]
    args = serve.group("args").strip().rstrip(";")
    program = "\n".join([ARGS_PRELUDE, *statements, f"printf '%s\\0' serve {args}"])
    if "\0" in program:  # an interpolated value: exec refuses an argument holding NUL
        raise LanebookError(f"{source}: the service command holds a NUL byte, which no process argument can carry")
    result = subprocess.run(
        [shutil.which("bash") or "/bin/bash", "--noprofile", "--norc", "-r", "-c", program],
        env=_inert_environment(environment),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if result.returncode != 0:
        message = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "entrypoint failed"
        raise ContainerExit(result.returncode, message)
    return result.stdout.split("\0")[:-1]


def container_from_text(
    compose_text: str,
    compose_name: str,
    variables: Mapping[str, str],
    project: str,
    service: str | None = None,
    base_dir: Optional[Path] = None,
    env_file: str = "",
) -> ContainerSpec:
    """The container Compose creates from a compose file's text, interpolated with VARIABLES.

    base_dir: where relative volume sources resolve (the compose file's directory); None keeps them as written."""
    data = _compose_data(compose_text, compose_name)
    name = service or next(iter(data["services"]))
    if name not in data["services"]:
        raise LanebookError(f"{compose_name}: no service '{name}' (have {', '.join(data['services'])})")
    missing: set[str] = set()
    svc = _interpolate_tree(data["services"][name], variables, missing)
    for key, shapes, what in (("environment", (dict, list), "a map or a list"), ("volumes", (list,), "a list")):
        if not isinstance(svc.get(key) or [], shapes):  # Compose refuses the file: so does lanebook, in one line
            raise LanebookError(
                f"{compose_name}: service '{name}' {key}: must be {what}, not {type(svc[key]).__name__}"
            )
    environment = _environment(svc, variables)
    command = svc.get("command")
    if isinstance(command, list) and len(command) >= 3 and command[0] in ("bash", "sh") and command[1] in ("-c", "-lc"):
        script = command[2]
    elif isinstance(command, str):
        script = command
    else:
        raise LanebookError(f"{compose_name}: service '{name}' has no bash -lc command script")
    volumes = []
    for item in svc.get("volumes") or []:
        parts = str(item).split(":")
        if len(parts) >= 2:
            host = parts[0]
            if base_dir is not None and not host.startswith("/"):
                host = str((base_dir / host).resolve())
            volumes.append((host, parts[1]))
    return ContainerSpec.from_service(
        svc,
        service=name,
        project=project,
        environment=environment,
        script=script,
        volumes=volumes,
        compose_file=compose_name,
        env_file=env_file,
        warnings=[f'The "{v}" variable is not set. Defaulting to a blank string.' for v in sorted(missing)],
    )


def container_spec(
    compose_file: str | Path,
    env_file: str | Path | None,
    project: str | None = None,
    environ: Mapping[str, str] | None = None,
    service: str | None = None,
) -> ContainerSpec:
    """The container `docker compose -p PROJECT --env-file ENV -f COMPOSE up -d` would create.

    ENVIRON is the shell environment compose runs in (what the launcher exported): it wins over the env file."""
    compose_file = Path(compose_file).resolve()
    try:
        text = compose_file.read_text()
    except FileNotFoundError:
        raise LanebookError(f"compose file not found: {compose_file}") from None
    variables = resolve_env(parse_env_file(env_file), environ) if env_file else {}
    variables.update(environ or {})
    return container_from_text(
        text,
        str(compose_file),
        variables,
        (project or compose_file.parent.name).lower(),
        service,
        compose_file.parent,
        str(Path(env_file).resolve()) if env_file else "",
    )
