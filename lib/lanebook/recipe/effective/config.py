"""The effective configuration of one checkout: what its server runs for each value, and the line that wins."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Mapping, Optional

from lanebook.base.errors import LanebookError
from lanebook.recipe.compose import ComposeFile
from lanebook.recipe.effective.checkout import ENV_NAME, CheckoutFiles, Location
from lanebook.recipe.effective.compose_cli import checkout_container
from lanebook.recipe.effective.compose_model import ContainerSpec, container_from_text
from lanebook.recipe.effective.launcher_env import HEAD_RANK, launcher_overrides, worker_exports
from lanebook.recipe.envfile import EnvEntry, parse_env_text, references, resolve_env

# Lane env keys whose value becomes a `vllm serve` flag through the recipe's compose command.
SERVE_FLAGS = {
    "SERVED_MODEL_NAME": "--served-model-name",
    "MAX_MODEL_LEN": "--max-model-len",
    "MAX_NUM_SEQS": "--max-num-seqs",
    "MAX_NUM_BATCHED_TOKENS": "--max-num-batched-tokens",
    "GPU_MEMORY_UTILIZATION": "--gpu-memory-utilization",
    "VLLM_HOST": "--host",
    "VLLM_PORT": "--port",
    "MASTER_ADDR": "--master-addr",
    "MASTER_PORT": "--master-port",
}
# The TP group's size: a lane's node count. The recipe's two-node compose writes both flags as 2; the four-node
# shape's reads them from these env keys (lane.params.RANK_KEYS).
RANK_FLAGS = {"TP_SIZE": "--tensor-parallel-size", "NNODES": "--nnodes"}


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
        self.launcher_overrides = launcher_overrides(files)
        self.env_file = files.env
        self.entries: list[EnvEntry] = parse_env_text(files.env.text) if files.env else []
        compose_dir = files.compose.name[: files.compose.name.rfind("/") + 1]
        self.missing_at = (
            files.env.at(0) if files.env else Location(compose_dir + ENV_NAME, 0)
        )  # where a missing key is named
        self._environ = dict(environ or {})
        self.variables, self.dead_lines = self._variables()
        # What the launcher exports before it calls Compose: its overrides, and the head's rank.
        self.exports = {
            **{o.key: self.variables[o.key].value or "" for o in self.launcher_overrides.overrides},
            **HEAD_RANK,
        }
        decided = checkout_container(files, self.exports, self._environ, self._emulated)
        self.spec, self.decided_by, self.notice = decided.spec, decided.decided_by, decided.notice

    def _emulated(self, exports: Mapping[str, str] = HEAD_RANK) -> ContainerSpec:
        """The container by lanebook's own interpolation (where no Compose v2 can run): the launcher's shell exports
        every env-file variable, then its overrides and EXPORTS (the head's rank, or what it passes the worker)."""
        shell = {**self._environ, **self.values, **exports}
        return container_from_text(
            self.files.compose.text,
            self.files.compose.name,
            shell,
            "lane",
            base_dir=self.files.directory,
            env_file=self.files.env.name if self.files.env else "",
        )

    def _variables(self) -> tuple[dict[str, Setting], list[DeadLine]]:
        """The env file's variables as the launcher exports them, with its overrides applied."""
        try:
            values = resolve_env(self.entries, self._environ)
        except LanebookError as exc:  # `${X:?message}` with X unset: Compose refuses the env file too
            raise LanebookError(f"{self.env_file.name}: {exc}") from None
        last = {e.key: e for e in self.entries}
        variables = {k: Setting(values[k], self.env_file.at(e.line), True) for k, e in last.items()}
        dead = [(e, f"line {last[e.key].line} sets {e.key} again") for e in self.entries if last[e.key] is not e]
        for override in self.launcher_overrides.overrides:
            switch = variables.get(override.switch)
            choice = override.choice(switch.value if switch else None)
            source = variables.get(choice.source)
            via = f"the launcher exports {override.key} from {choice.source}"
            if source is not None and (source.value or choice.empty_counts):
                winner = Setting(source.value, source.where, True, via if choice.source != override.key else "")
            else:
                unset = f"{via}, which is unset" if choice.source != override.key else f"{override.key} is unset"
                winner = Setting(
                    choice.default,
                    self.launcher_overrides.mention(choice.source),
                    False,
                    f"{unset}: the launcher's default",
                )
            if choice.source != override.key and override.key in last:
                dead.append((last[override.key], via))
            variables[override.key] = winner
        lines = [
            DeadLine(
                e.key,
                values.get(e.key, e.value) if last[e.key] is e else e.value,
                self.env_file.at(e.line),
                variables[e.key],
                reason,
            )
            for e, reason in dead
        ]
        return variables, lines

    @property
    def values(self) -> dict[str, str]:
        """The variables that are set, by name (the launcher's overrides applied)."""
        return {k: s.value for k, s in self.variables.items() if s.value is not None}

    @cached_property
    def worker(self) -> ContainerSpec:
        """The worker rank's container: the same checkout's Compose with what the launcher exports to the worker's
        `up -d` (NODE_RANK=1 HEADLESS=1 and the values its worker line passes: launcher_env.worker_exports). The
        worker's env file is the head's (the launcher keeps them the same bytes); a node's checkout is asked of
        that node's Compose."""
        exports = worker_exports(self.files, self.values)
        return checkout_container(self.files, exports, self._environ, lambda: self._emulated(exports)).spec

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
            return SpeculativeSetting(
                None,
                where,
                where,
                f"expected one SPECULATIVE_CONFIG assignment in the command of "
                f"service {self.compose.service_name}, found {len(found)}",
            )
        mtp = self.container_env("MTP_NUM_TOKENS") or self.variable("MTP_NUM_TOKENS")
        k_where = mtp.where if mtp is not None and mtp.from_env and "MTP_NUM_TOKENS" in found[0][1].group(0) else where
        if self.spec.entrypoint_error:
            return SpeculativeSetting(None, where, k_where)
        raw = self.spec.arg("--speculative-config")
        try:
            config = json.loads(raw or "")
        except ValueError as exc:
            return SpeculativeSetting(
                None, where, k_where, f"SPECULATIVE_CONFIG does not become valid JSON in the container ({exc}): {raw}"
            )
        k = config.get("num_speculative_tokens") if isinstance(config, dict) else None
        if not isinstance(k, int) or isinstance(k, bool):
            return SpeculativeSetting(
                None, where, k_where, f"SPECULATIVE_CONFIG has no integer num_speculative_tokens (got {raw})"
            )
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
