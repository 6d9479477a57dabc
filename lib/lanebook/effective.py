"""What a checkout runs: the effective serving configuration, read as the launcher, Compose and the image would.

Four layers decide what `vllm serve` gets, and each can undo a value set in the one before:
1. the env file, .env.dspark, as the launcher reads it (normalized, the last assignment of a key wins);
2. the launcher's own overrides. The recipe's current start script exports GPU_MEMORY_UTILIZATION
   from a profile key (GPU_MEMORY_UTILIZATION_TEXT, default 0.835, or GPU_MEMORY_UTILIZATION_VISION,
   default 0.80, when ENABLE_VL_SIDECAR=1) and DSPARK_MODEL / DSPARK_REVISION from ABLITERATED, so a
   line setting those keys directly is dead. Which overrides a checkout's launcher makes is read from
   its start script (it names the profile key), else from its env file or example;
3. Compose: it interpolates the compose file with the shell environment over the env file, and passes
   into the container only the keys its `environment:` map names;
4. the image's command script, which builds the speculative config and the `vllm serve` argv in bash
   in that environment: we run the same statements with bash, skipping those that patch the image.

`Effective` holds the result for one checkout and says, for each value, which line wins. The twin's
`docker compose up` stand-in calls `container_spec` (layers 3 and 4) with the environment its launcher
exported; lint, render and the launch runbook's live-command check read the same computation.
"""
from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from ruamel.yaml.error import YAMLError

from .compose import COMPOSE_NAME, ComposeFile, safe_data
from .envfile import EnvEntry, interpolate, parse_env_file, parse_env_text, references, resolve_env
from .errors import LanebookError

if TYPE_CHECKING:
    from .nodes import Node
    from .params import LaneParams

ENV_NAME = ".env.dspark"
EXAMPLE_NAMES = (".env.dspark.example", "env.dspark.example")  # the recipe's name, and the one its fixture copy uses
START_NAME = "start-deepseek-v4-flash-dspark.sh"
REFERENCE = Path(__file__).parent / "reference"  # lanebook's short copy of the recipe checkout's compose and example

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

# Lane env keys whose value becomes a `vllm serve` flag through the recipe's compose command.
SERVE_FLAGS = {
    "SERVED_MODEL_NAME": "--served-model-name", "MAX_MODEL_LEN": "--max-model-len", "MAX_NUM_SEQS": "--max-num-seqs",
    "MAX_NUM_BATCHED_TOKENS": "--max-num-batched-tokens", "GPU_MEMORY_UTILIZATION": "--gpu-memory-utilization",
    "VLLM_HOST": "--host", "VLLM_PORT": "--port", "MASTER_ADDR": "--master-addr", "MASTER_PORT": "--master-port",
}
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"


# --- the files of a checkout -----------------------------------------------------------------------

@dataclass(frozen=True)
class Location:
    file: str
    line: int  # 1-based; 0 when the thing is missing and the file has no better place to name


@dataclass(frozen=True)
class TextFile:
    """A file's text and how findings name its lines (a local path, or NODE:PATH when read from a node)."""

    name: str
    text: str = field(repr=False)
    locate: Optional[Callable[[int], Location]] = field(default=None, repr=False)  # a line → what to name

    def at(self, line: int) -> Location:
        return self.locate(line) if self.locate else Location(self.name, line)


# A file the start script sources from inside the checkout: `. "$SCRIPT_DIR/scripts/lane-env.sh"`, `source ./x.sh`.
SOURCED_RE = re.compile(r"""^\s*(?:\.|source)\s+["']?(?:\$\{?SCRIPT_DIR\}?/|\./)?((?:[\w-]+/)*[\w.-]+\.sh)["']?\s*$""", re.M)
CHECKOUT_NAMES = (COMPOSE_NAME, ENV_NAME, *EXAMPLE_NAMES, START_NAME)


def sourced_names(start_text: str) -> list[str]:
    """The checkout-relative files a start script sources (its launcher may live partly in them)."""
    return [name for name in dict.fromkeys(SOURCED_RE.findall(start_text)) if ".." not in name.split("/")]


@dataclass(frozen=True)
class CheckoutFiles:
    """The files that decide what a checkout serves: compose, env file, the example it is copied from, start script
    (with the files it sources from the checkout)."""

    compose: TextFile
    env: Optional[TextFile] = None
    example: Optional[TextFile] = None
    start: Optional[TextFile] = None
    directory: Optional[Path] = None  # a local checkout (relative volume paths resolve against it)
    sourced: tuple[TextFile, ...] = ()

    @classmethod
    def from_texts(cls, texts: Mapping[str, str], prefix: str, directory: Optional[Path] = None) -> "CheckoutFiles":
        """From checkout-relative name → text; each file is named PREFIX + name."""
        if COMPOSE_NAME not in texts:
            raise LanebookError(f"no {COMPOSE_NAME} in {prefix.rstrip('/') or '.'}")

        def file(name: str) -> Optional[TextFile]:
            return TextFile(f"{prefix}{name}", texts[name]) if name in texts else None

        example = next((file(n) for n in EXAMPLE_NAMES if n in texts), None)
        start = file(START_NAME)
        sourced = tuple(file(n) for n in sourced_names(start.text) if n in texts) if start else ()
        return cls(file(COMPOSE_NAME), file(ENV_NAME), example, start, directory, sourced)

    @classmethod
    def read(cls, directory: str | Path) -> "CheckoutFiles":
        """A local checkout directory."""
        try:
            directory = Path(directory).expanduser()
        except RuntimeError:  # ~NAME of no such user
            raise LanebookError(f"checkout directory not found: {directory} (no such user's home)") from None
        if not directory.is_dir():
            raise LanebookError(f"checkout directory not found: {directory}")
        texts = {n: (directory / n).read_text() for n in CHECKOUT_NAMES if (directory / n).is_file()}
        for name in sourced_names(texts.get(START_NAME, "")):
            if (directory / name).is_file():
                texts[name] = (directory / name).read_text()
        return cls.from_texts(texts, f"{directory}/", directory)

    @classmethod
    def fetch(cls, node: "Node", checkout: str) -> "CheckoutFiles":
        """A checkout on a node: its files in one command, then those its start script sources in a second."""
        texts = _fetch_texts(node, checkout, CHECKOUT_NAMES)
        more = [n for n in sourced_names(texts.get(START_NAME, "")) if n not in texts]
        if more:
            texts.update(_fetch_texts(node, checkout, more))
        return cls.from_texts(texts, f"{node.alias}:{checkout.rstrip('/')}/")

    @property
    def launcher_files(self) -> list[TextFile]:
        """Where the launcher's own logic is: the start script and what it sources."""
        return [self.start, *self.sourced] if self.start else []

    def replace(self, **changes: Any) -> "CheckoutFiles":
        return CheckoutFiles(**{**self.__dict__, **changes})


def _fetch_texts(node: "Node", checkout: str, names: Sequence[str]) -> dict[str, str]:
    """Files of a node's checkout that exist, by name (each sent base64-encoded on one line)."""
    from .nodes import q, qpath

    listed = " ".join(q(n) for n in names)
    result = node.run(f'cd {qpath(checkout)} && for f in {listed}; do if [ -f "$f" ]; then printf "%s " "$f"; '
                      f'base64 -w0 < "$f"; echo; fi; done', timeout=60)
    texts = {}
    for line in result.stdout.splitlines():
        name, _, data = line.partition(" ")
        if name:
            texts[name] = base64.b64decode(data).decode("utf-8", errors="replace")
    return texts


# --- the launcher's own overrides ------------------------------------------------------------------

@dataclass(frozen=True)
class Choice:
    """A key the launcher reads and its default: ${SOURCE:-DEFAULT}, or ${SOURCE-DEFAULT} when an empty value counts."""

    source: str
    default: str
    empty_counts: bool = False


@dataclass(frozen=True)
class Override:
    """A variable the launcher computes and exports, whatever line of the env file sets it."""

    key: str
    switch: str  # the key choosing between the two sources ("1" selects `on`)
    on: Choice
    off: Choice
    marker: str  # a key whose mention in the start script (or env file) shows the launcher makes this override

    def choice(self, switch_value: Optional[str]) -> Choice:
        return self.on if switch_value == "1" else self.off


# The recipe's current start script, as data (its defaults are the ones the example env file documents).
RECIPE_OVERRIDES = (
    Override("GPU_MEMORY_UTILIZATION", "ENABLE_VL_SIDECAR", Choice("GPU_MEMORY_UTILIZATION_VISION", "0.80"),
             Choice("GPU_MEMORY_UTILIZATION_TEXT", "0.835"), marker="GPU_MEMORY_UTILIZATION_TEXT"),
    Override("DSPARK_MODEL", "ABLITERATED",
             Choice("DSPARK_MODEL_ABLITERATED", "drowzeys/keys-DeepSeekV4-Flash-GA-0731-Dspark-Abliterated-32-32"),
             Choice("DSPARK_MODEL_OFFICIAL", "deepseek-ai/DeepSeek-V4-Flash-0731"), marker="DSPARK_MODEL_OFFICIAL"),
    # The official checkpoint is pinned to the tested revision unless DSPARK_REVISION is set (empty: the tip).
    Override("DSPARK_REVISION", "ABLITERATED", Choice("DSPARK_REVISION_ABLITERATED", ""),
             Choice("DSPARK_REVISION", "9e165c30e2704aec5d9d593cce3eebd58bbef1cb", empty_counts=True),
             marker="DSPARK_REVISION_ABLITERATED"),
)
HEAD_RANK = {"NODE_RANK": "0", "HEADLESS": ""}  # what the launcher sets for the head's compose up


@dataclass(frozen=True)
class Launcher:
    """The overrides a checkout's launcher makes, and the files that show it."""

    overrides: tuple[Override, ...]
    seen_in: tuple[TextFile, ...]  # the start script and what it sources, else the env file and example

    def mention(self, key: str) -> Location:
        """The first line naming KEY in the files the shape was read from (where a launcher default is located)."""
        for file in self.seen_in:
            for number, text in enumerate(file.text.splitlines(), start=1):
                if re.search(rf"\b{key}\b", text):
                    return file.at(number)
        return self.seen_in[0].at(0) if self.seen_in else Location("the launcher", 0)


def launcher_of(files: CheckoutFiles) -> Launcher:
    """Read from the start script (and what it sources) when the checkout has one, else from its env file and example."""
    sources = tuple(files.launcher_files or [f for f in (files.env, files.example) if f])
    active = tuple(o for o in RECIPE_OVERRIDES if any(re.search(rf"\b{o.marker}\b", f.text) for f in sources))
    return Launcher(active, sources)


# --- the container Compose creates ------------------------------------------------------------------

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
        return cls(**{**data, "volumes": [tuple(v) for v in data.get("volumes", [])],
                      "entrypoint_error": tuple(error) if error else None})

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


def _duration_s(value: Any, default: float = 10.0) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*", str(value or ""))
    if not match:
        return default
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[match.group(2)]
    return float(match.group(1)) * scale


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
        raise LanebookError(f"invalid restart policy: unknown policy '{name}'; use one of 'no', 'always', "
                            "'on-failure', or 'unless-stopped'")
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
            raise LanebookError(f"environment variable {key!r}: no process environment can carry a NUL byte or a name with '='")
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
    result = subprocess.run([shutil.which("bash") or "/bin/bash", "--noprofile", "--norc", "-r", "-c", program],
                            env=_inert_environment(environment), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=30)
    if result.returncode != 0:
        message = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "entrypoint failed"
        raise ContainerExit(result.returncode, message)
    return result.stdout.split("\0")[:-1]


def container_from_text(compose_text: str, compose_name: str, variables: Mapping[str, str], project: str,
                        service: str | None = None, base_dir: Optional[Path] = None, env_file: str = "") -> ContainerSpec:
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
            raise LanebookError(f"{compose_name}: service '{name}' {key}: must be {what}, not {type(svc[key]).__name__}")
    environment = _environment(svc, variables)
    command = svc.get("command")
    if isinstance(command, list) and len(command) >= 3 and command[0] in ("bash", "sh") and command[1] in ("-c", "-lc"):
        script = command[2]
    elif isinstance(command, str):
        script = command
    else:
        raise LanebookError(f"{compose_name}: service '{name}' has no bash -lc command script")
    try:
        argv, entrypoint_error = serve_argv(script, environment, source=compose_name), None
    except ContainerExit as exc:
        argv, entrypoint_error = [], (exc.code, str(exc))
    try:
        restart = restart_policy(svc.get("restart"))
    except LanebookError as exc:
        raise LanebookError(f"{compose_name}: service '{name}': {exc}") from None
    volumes = []
    for item in svc.get("volumes") or []:
        parts = str(item).split(":")
        if len(parts) >= 2:
            host = parts[0]
            if base_dir is not None and not host.startswith("/"):
                host = str((base_dir / host).resolve())
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
        restart=restart,
        compose_file=compose_name,
        env_file=env_file,
        warnings=[f'The "{v}" variable is not set. Defaulting to a blank string.' for v in sorted(missing)],
        entrypoint_error=entrypoint_error,
    )


def container_spec(compose_file: str | Path, env_file: str | Path | None, project: str | None = None,
                   environ: Mapping[str, str] | None = None, service: str | None = None) -> ContainerSpec:
    """The container `docker compose -p PROJECT --env-file ENV -f COMPOSE up -d` would create.

    ENVIRON is the shell environment compose runs in (what the launcher exported): it wins over the env file."""
    compose_file = Path(compose_file).resolve()
    try:
        text = compose_file.read_text()
    except FileNotFoundError:
        raise LanebookError(f"compose file not found: {compose_file}") from None
    variables = resolve_env(parse_env_file(env_file), environ) if env_file else {}
    variables.update(environ or {})
    return container_from_text(text, str(compose_file), variables, (project or compose_file.parent.name).lower(),
                               service, compose_file.parent, str(Path(env_file).resolve()) if env_file else "")


def speculative_config(spec: ContainerSpec) -> dict:
    """The --speculative-config JSON of a container (a LanebookError if it is not valid JSON)."""
    raw = spec.arg("--speculative-config")
    if raw is None:
        raise LanebookError(f"{spec.name}: no --speculative-config in the serve command")
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise LanebookError(f"{spec.name}: --speculative-config is not valid JSON ({exc}): {raw}") from None


# --- the effective configuration --------------------------------------------------------------------

@dataclass(frozen=True)
class Setting:
    """A value and the line that wins for it."""

    value: Optional[str]  # None: nothing sets it (or the container never gets it)
    where: Location
    from_env: bool  # an env-file line supplies it (directly or through the launcher), not a compose default
    via: str = ""  # how it gets there when not directly, e.g. "the launcher exports GPU_MEMORY_UTILIZATION from ..."

    def described(self) -> str:
        """`0.835 (the launcher exports GPU_MEMORY_UTILIZATION from GPU_MEMORY_UTILIZATION_TEXT)`, for messages."""
        value = "nothing" if self.value is None else self.value
        return f"{value} ({self.via})" if self.via else value


@dataclass(frozen=True)
class DeadLine:
    """An env-file line whose value never reaches anything: a later line or the launcher wins."""

    key: str
    value: str
    where: Location
    winner: Setting
    reason: str


@dataclass(frozen=True)
class SpeculativeSetting:
    config: Optional[dict]
    where: Location  # the SPECULATIVE_CONFIG line
    k_where: Location  # where num_speculative_tokens comes from (the MTP_NUM_TOKENS line when it is used)
    error: Optional[str] = None


class Effective:
    """What one checkout serves on its head rank (see the module docstring for the layers)."""

    def __init__(self, files: CheckoutFiles, environ: Mapping[str, str] | None = None):
        self.files = files
        self.compose = ComposeFile(files.compose.text, files.compose.name)
        self.launcher = launcher_of(files)
        self.env_file = files.env
        self.entries: list[EnvEntry] = parse_env_text(files.env.text) if files.env else []
        compose_dir = files.compose.name[:files.compose.name.rfind("/") + 1]
        self.missing_at = files.env.at(0) if files.env else Location(compose_dir + ENV_NAME, 0)  # where a missing key is named
        self._environ = dict(environ or {})
        self.variables, self.dead_lines = self._variables()
        shell = {**self._environ, **{k: s.value for k, s in self.variables.items() if s.value is not None}, **HEAD_RANK}
        self.spec = container_from_text(files.compose.text, files.compose.name, shell, "lane", base_dir=files.directory,
                                        env_file=files.env.name if files.env else "")

    def _variables(self) -> tuple[dict[str, Setting], list[DeadLine]]:
        """The env file's variables as the launcher exports them, with its overrides applied."""
        values = resolve_env(self.entries, self._environ)
        last = {e.key: e for e in self.entries}
        variables = {k: Setting(values[k], self.env_file.at(e.line), True) for k, e in last.items()}
        dead = [(e, f"line {last[e.key].line} sets {e.key} again") for e in self.entries if last[e.key] is not e]
        for override in self.launcher.overrides:
            switch = variables.get(override.switch)
            choice = override.choice(switch.value if switch else None)
            source = variables.get(choice.source)
            via = f"the launcher exports {override.key} from {choice.source}"
            if source is not None and (source.value or choice.empty_counts):
                winner = Setting(source.value, source.where, True, via if choice.source != override.key else "")
            else:
                unset = f"{via}, which is unset" if choice.source != override.key else f"{override.key} is unset"
                winner = Setting(choice.default, self.launcher.mention(choice.source), False,
                                 f"{unset}: the launcher's default")
            if choice.source != override.key and override.key in last:
                dead.append((last[override.key], via))
            variables[override.key] = winner
        lines = [DeadLine(e.key, values.get(e.key, e.value) if last[e.key] is e else e.value, self.env_file.at(e.line),
                          variables[e.key], reason) for e, reason in dead]
        return variables, lines

    # --- single values -------------------------------------------------------------------------

    def variable(self, key: str) -> Optional[Setting]:
        """A variable as the launcher and Compose see it (None when nothing sets it)."""
        return self.variables.get(key)

    def compose_at(self, line: int) -> Location:
        return self.files.compose.at(line)

    def _supplied(self, value: Optional[str], raw: str, line: int) -> Setting:
        """VALUE located at the line that supplies it: the first variable RAW names that is set non-empty, else
        the first set at all, else the compose line (a default or a literal)."""
        named = [self.variables[n] for n in references(raw) if n in self.variables]
        own = next((s for s in named if s.value), named[0] if named else None)
        if own is not None:
            return Setting(value, own.where, own.from_env, own.via)
        return Setting(value, self.compose_at(line), False)

    def container_env(self, key: str) -> Optional[Setting]:
        """What the container's environment holds for KEY (None when the compose environment: map does not pass it)."""
        item = self.compose.environment.get(key)
        if item is None:
            return None
        raw = f"${{{key}}}" if item.raw is None else item.raw  # a key without a value is Compose's ${KEY}
        return self._supplied(self.spec.environment.get(key), raw, item.line)

    def flag(self, flag: str) -> Optional[Setting]:
        """The value `vllm serve` gets for a flag (None when the compose command has no such flag)."""
        found = self.compose.flag(flag)
        if found is None:
            return None
        return self._supplied(self.spec.arg(flag), *found)

    def model(self) -> Optional[Setting]:
        found = self.compose.served_model()
        if found is None:
            return None
        return self._supplied(self.spec.argv[1] if len(self.spec.argv) > 1 else None, *found)

    def image(self) -> Optional[Setting]:
        found = self.compose.service_value("image")
        return self._supplied(self.spec.image, *found) if found else None

    @cached_property
    def speculative(self) -> SpeculativeSetting:
        """The --speculative-config the image builds, located at the SPECULATIVE_CONFIG line."""
        found = self.compose.speculative_assignments()
        line = found[0][0] if len(found) == 1 else (found[1][0] if found else self.compose.service_line)
        where = self.compose_at(line)
        if len(found) != 1:
            return SpeculativeSetting(None, where, where, f"expected one SPECULATIVE_CONFIG assignment in the command of "
                                                          f"service {self.compose.service_name}, found {len(found)}")
        mtp = self.container_env("MTP_NUM_TOKENS") or self.variable("MTP_NUM_TOKENS")
        k_where = mtp.where if mtp is not None and mtp.from_env and "MTP_NUM_TOKENS" in found[0][1].group(0) else where
        if self.spec.entrypoint_error:
            return SpeculativeSetting(None, where, k_where)
        raw = self.spec.arg("--speculative-config")
        try:
            config = json.loads(raw or "")
        except ValueError as exc:
            return SpeculativeSetting(None, where, k_where, f"SPECULATIVE_CONFIG does not become valid JSON in the "
                                                            f"container ({exc}): {raw}")
        k = config.get("num_speculative_tokens") if isinstance(config, dict) else None
        if not isinstance(k, int) or isinstance(k, bool):
            return SpeculativeSetting(None, where, k_where, f"SPECULATIVE_CONFIG has no integer num_speculative_tokens "
                                                            f"(got {raw})")
        return SpeculativeSetting(config, where, k_where)

    def setting(self, key: str) -> Setting:
        """What the server runs for a lane env key, and the line that wins."""
        found: Optional[Setting] = None
        if key == "DSPARK_MODEL":
            found = self.model()
        elif key == "DSPARK_VLLM_IMAGE":
            found = self.image()
        elif key == "MTP_NUM_TOKENS" and self.speculative.config is not None:
            k = self.speculative.config["num_speculative_tokens"]
            mtp = self.container_env(key) or self.variable(key)
            found = Setting(str(k), self.speculative.k_where, mtp is not None and mtp.from_env, mtp.via if mtp else "")
        elif key in SERVE_FLAGS:
            found = self.flag(SERVE_FLAGS[key])
        if found is None:
            found = self.container_env(key) or self.variable(key)
        return found or Setting(None, self.missing_at, False)


# --- the lane against what runs ---------------------------------------------------------------------

def _number(text: Optional[str]) -> Optional[float]:
    try:
        return float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def same_value(key: str, lane_value: str, running: Optional[str]) -> bool:
    """Whether what runs is the lane's value: numbers compare as numbers (0.85 = 0.850), and an image pinned
    by digest is the lane's when the lane names its tag without a digest."""
    if running is None:
        return False
    if key == "DSPARK_VLLM_IMAGE" and "@" not in lane_value:
        return running.split("@", 1)[0] == lane_value
    number, other = _number(lane_value), _number(running)
    if number is not None and other is not None:
        return number == other
    return running == lane_value


@dataclass(frozen=True)
class Mismatch:
    """A lane value that is not what the server runs."""

    key: str  # an env key, or speculative.FIELD
    lane: str
    running: Setting

    def message(self) -> str:
        return f"{self.key}: the lane says {self.lane}, but the checkout runs {self.running.described()}"


def env_text(value: Any) -> str:
    """A lane env value as the env file holds it (and as Compose reads it back)."""
    text = str(value)
    if "\n" in text:
        raise LanebookError(f"env value {text!r} spans lines; an env file cannot hold it")
    return text


def lane_mismatches(lane: "LaneParams", eff: Effective) -> list[Mismatch]:
    """Every lane value (env keys, the compose-passed keys, the speculative config) the checkout does not run.

    Nothing is compared when the image's entrypoint refuses the configuration: no server runs at all."""
    if eff.spec.entrypoint_error:
        return []
    found = []
    for key, value in lane.env.items():
        want = env_text(value)
        running = eff.setting(key)
        if key in lane.compose_environment and key not in eff.compose.environment:
            running = Setting(None, eff.compose_at(eff.compose.environment_line), False,
                              f"the environment: map of service {eff.compose.service_name} does not pass {key}")
        if not same_value(key, want, running.value):
            found.append(Mismatch(key, want, running))
    spec = eff.speculative
    if spec.config is not None:
        schedule = lane.speculative.schedule
        wanted = {"method": lane.speculative.method, "draft_sample_method": lane.speculative.draft_sample_method,
                  SCHEDULE_KEY: None if schedule is None else [list(r) for r in schedule]}
        for name, want in wanted.items():
            got = spec.config.get(name)
            if got != want:
                show = (lambda v: "none" if v is None else json.dumps(v, separators=(",", ":")) if isinstance(v, list) else str(v))
                found.append(Mismatch(f"speculative.{name}", show(want), Setting(show(got), spec.where, False)))
    return found


# --- the live command against the lane -------------------------------------------------------------

LIVE_FLAGS = ("--served-model-name", "--max-model-len", "--max-num-seqs", "--max-num-batched-tokens",
              "--gpu-memory-utilization")


@dataclass(frozen=True)
class LiveMismatch:
    """A value the lane sets that the running server's command line does not carry."""

    flag: str  # a vllm serve flag, or "--speculative-config FIELD"
    lane: str
    live: Optional[str]  # None: absent from the live command

    def __str__(self) -> str:
        return f"{self.flag}: lane {self.lane}, live {'absent' if self.live is None else self.live}"


def _live_flag(tokens: list[str], flag: str) -> Optional[str]:
    for index, token in enumerate(tokens):
        if token == flag and index + 1 < len(tokens):
            return tokens[index + 1]
        if token.startswith(flag + "="):
            return token[len(flag) + 1:]
    return None


def _live_speculative(command: str) -> Optional[dict]:
    """The JSON after --speculative-config (docker top shows argv joined by spaces, unquoted)."""
    match = re.search(r"--speculative-config[=\s]+['\"]?(?=\{)", command)
    if not match:
        return None
    try:
        config, _end = json.JSONDecoder().raw_decode(command[match.end():])
    except json.JSONDecodeError:
        return None
    return config if isinstance(config, dict) else None


def live_mismatches(lane: "LaneParams", command: str) -> list[LiveMismatch]:
    """Each lane value the live `vllm serve` command line (as `docker top` shows it) does not carry.

    Checked: the served name, max model length, sequences, batched tokens and memory utilization the lane
    sets, and inside --speculative-config num_speculative_tokens and the batch-size schedule (present
    exactly when the lane has one). A flag missing from the command is a mismatch with live value None."""
    tokens = command.split()
    found = []
    for key, flag in SERVE_FLAGS.items():
        if flag in LIVE_FLAGS and key in lane.env:
            want, live = env_text(lane.env[key]), _live_flag(tokens, flag)
            if not same_value(key, want, live):
                found.append(LiveMismatch(flag, want, live))
    config = _live_speculative(command)
    k = None if config is None else config.get("num_speculative_tokens")
    if not same_value("MTP_NUM_TOKENS", str(lane.num_speculative_tokens), None if k is None else str(k)):
        found.append(LiveMismatch("--speculative-config num_speculative_tokens", str(lane.num_speculative_tokens),
                                  None if k is None else str(k)))
    schedule = lane.speculative.schedule_json()
    live_schedule = None if config is None or SCHEDULE_KEY not in config else json.dumps(config[SCHEDULE_KEY],
                                                                                          separators=(",", ":"))
    if schedule != live_schedule:
        found.append(LiveMismatch(f"--speculative-config {SCHEDULE_KEY}", schedule or "none", live_schedule))
    return found
