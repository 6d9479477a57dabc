"""What a checkout's compose file and env file put into the container, read as Compose and the image would.

Compose interpolates the file with the shell environment over the --env-file values; only the
service's ``environment:`` map reaches the container (seed 000: setting a key in .env.dspark alone
is not enough). The image's ``command:`` script then builds the speculative config and the
``vllm serve`` arguments with bash in that environment; we run the same statements with bash,
skipping the lines that patch files inside the image.
"""
from __future__ import annotations

import json
import re
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from .envfile import env_map, interpolate, parse_env_file
from .errors import LanebookError

SERVE_RE = re.compile(r"exec\s+/usr/local/bin/vllm\s+serve\b(?P<args>.*)$", re.S)
# The image's statements the serve arguments depend on, in the order the script runs them.
STATEMENT_RES = (
    re.compile(r'case\s+"\$\{DRAFT_SAMPLE_METHOD\b.*?\besac\s*;?', re.S),
    re.compile(r'SPECULATIVE_CONFIG="(?:[^"\\]|\\.)*"\s*;?'),
    re.compile(r'case\s+"\$\{DEFAULT_THINKING\b.*?\besac\s*;?', re.S),
)
# The variables the image sets from the environment before exec (its key, quantization and revision logic).
ARGS_PRELUDE = r"""
if [ -n "${VLLM_API_KEY:-}" ] && [[ "${DSPARK_API_KEYS:-}" == *[!$' \t']* ]]; then
  echo "error: VLLM_API_KEY and DSPARK_API_KEYS are both set; set exactly one of them" >&2; exit 2
fi
API_KEY_ARGS=()
if [[ "${DSPARK_API_KEYS:-}" == *[!$' \t']* ]]; then read -r -a _keys <<< "${DSPARK_API_KEYS}"; API_KEY_ARGS=(--api-key "${_keys[@]}"); fi
VLLM_QUANTIZATION_ARGS=""
if [ "${ENABLE_VLLM_GB10_PATCH:-0}" = "1" ]; then VLLM_QUANTIZATION_ARGS="--quantization modelopt_gb10_hybrid"; fi
REVISION_ARGS=""
if [ -n "${DSPARK_REVISION:-}" ]; then REVISION_ARGS="--revision ${DSPARK_REVISION}"; fi
"""


class ContainerExit(LanebookError):
    """The image's entrypoint refuses the configuration and the container exits with this code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class ContainerSpec:
    """One container as Compose would create it: name, image, env, the `vllm serve` argv, mounts."""

    name: str
    project: str
    service: str
    image: str
    environment: dict[str, str]
    argv: list[str]  # starts with "serve", as given to /usr/local/bin/vllm
    volumes: list[tuple[str, str]] = field(default_factory=list)  # (host path, container path)
    stop_grace_s: float = 10.0
    compose_file: str = ""
    env_file: str = ""
    warnings: list[str] = field(default_factory=list)
    entrypoint_error: Optional[tuple[int, str]] = None  # the image's script refuses the config: (exit code, message)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ContainerSpec":
        error = data.get("entrypoint_error")
        return cls(**{**data, "volumes": [tuple(v) for v in data.get("volumes", [])],
                      "entrypoint_error": tuple(error) if error else None})

    def arg(self, flag: str) -> str | None:
        """The value following a flag in the serve argv, or None."""
        if flag in self.argv[:-1]:
            return self.argv[self.argv.index(flag) + 1]
        return None


def load_compose(path: str | Path) -> dict:
    path = Path(path)
    try:
        data = YAML(typ="safe").load(path.read_text())
    except FileNotFoundError:
        raise LanebookError(f"compose file not found: {path}") from None
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise LanebookError(f"{path}{where}: not a valid compose file ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict) or not data["services"]:
        raise LanebookError(f"{path}: a compose file needs a services: map with at least one service")
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


def _duration_s(value: Any, default: float = 10.0) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*", str(value or ""))
    if not match:
        return default
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[match.group(2)]
    return float(match.group(1)) * scale


def serve_argv(script: str, environment: Mapping[str, str], source: str = "command") -> list[str]:
    """Run the image's config statements and print the `vllm serve` argument list, NUL-separated."""
    serve = SERVE_RE.search(script)
    if not serve:
        raise LanebookError(f"{source}: no `exec /usr/local/bin/vllm serve ...` in the service command")
    statements = [m.group(0) for rx in STATEMENT_RES if (m := rx.search(script[: serve.start()]))]
    args = serve.group("args").strip().rstrip(";")
    program = "\n".join([ARGS_PRELUDE, *statements, f"printf '%s\\0' serve {args}"])
    result = subprocess.run(["bash", "--noprofile", "--norc", "-c", program], env=dict(environment),
                            capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        message = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "entrypoint failed"
        raise ContainerExit(result.returncode, message)
    return result.stdout.split("\0")[:-1]


def container_spec(compose_file: str | Path, env_file: str | Path | None, project: str | None = None,
                   environ: Mapping[str, str] | None = None, service: str | None = None) -> ContainerSpec:
    """The container `docker compose -p PROJECT --env-file ENV -f COMPOSE up -d` would create."""
    compose_file = Path(compose_file).resolve()
    variables = env_map(parse_env_file(env_file)) if env_file else {}
    variables.update(environ or {})  # Compose: the shell environment wins over the env file
    data = load_compose(compose_file)
    name = service or next(iter(data["services"]))
    if name not in data["services"]:
        raise LanebookError(f"{compose_file}: no service '{name}' (have {', '.join(data['services'])})")
    missing: set[str] = set()
    svc = _interpolate_tree(data["services"][name], variables, missing)
    environment = _environment(svc, variables)
    command = svc.get("command")
    if isinstance(command, list) and len(command) >= 3 and command[0] in ("bash", "sh") and command[1] in ("-c", "-lc"):
        script = command[2]
    elif isinstance(command, str):
        script = command
    else:
        raise LanebookError(f"{compose_file}: service '{name}' has no bash -lc command script")
    try:
        argv, entrypoint_error = serve_argv(script, environment, source=str(compose_file)), None
    except ContainerExit as exc:
        argv, entrypoint_error = [], (exc.code, str(exc))
    project = (project or compose_file.parent.name).lower()
    volumes = []
    for item in svc.get("volumes") or []:
        parts = str(item).split(":")
        if len(parts) >= 2:
            host = parts[0] if parts[0].startswith("/") else str((compose_file.parent / parts[0]).resolve())
            volumes.append((host, parts[1]))
    return ContainerSpec(
        name=str(svc.get("container_name") or f"{project}-{name}-1"),
        project=project,
        service=name,
        image=str(svc.get("image", "")),
        environment=environment,
        argv=argv,
        volumes=volumes,
        stop_grace_s=_duration_s(svc.get("stop_grace_period")),
        compose_file=str(compose_file),
        env_file=str(Path(env_file).resolve()) if env_file else "",
        warnings=[f'The "{v}" variable is not set. Defaulting to a blank string.' for v in sorted(missing)],
        entrypoint_error=entrypoint_error,
    )


def speculative_config(spec: ContainerSpec) -> dict:
    """The --speculative-config JSON of a container (a LanebookError if it is not valid JSON)."""
    raw = spec.arg("--speculative-config")
    if raw is None:
        raise LanebookError(f"{spec.name}: no --speculative-config in the serve command")
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise LanebookError(f"{spec.name}: --speculative-config is not valid JSON ({exc}): {raw}") from None
