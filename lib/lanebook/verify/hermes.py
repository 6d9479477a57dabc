"""The Hermes gates: the operator's Hermes Agent provider block, rendered from the lane (or read from the operator's
own config) and checked, then the recipe's ROUTE_OK smoke through the real `hermes` CLI in an isolated HERMES_HOME.

Hermes runs on this machine (.tools/hermes) or where the lane's `hermes.host` says (over SSH and SFTP). Whether the
model reasoned is read from the session's $HERMES_HOME/state.db, since Hermes prints no reasoning. The operator's own
config follows the lane that serves: only `default_model` and the block's URL change, after confirmation, backed up
first and replaced atomically, every other line kept.
"""

from __future__ import annotations

import io
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from lanebook.base import yamltext
from lanebook.base.checks import ExpectedResult
from lanebook.base.errors import LanebookError
from lanebook.base.files import backup, utc_stamp, write_atomic
from lanebook.base.paths import REPO
from lanebook.base.redact import REDACTED, redact, redact_data
from lanebook.lane.keys import lane_keys
from lanebook.lane.params import KEYLESS_VALUES, LaneParams, NodeParams
from lanebook.nodes.ssh import Executor, LaneNodes, Node, q, qpath
from lanebook.ops.checkout_env import replace_command, run_replace
from lanebook.recipe.render import sha256
from lanebook.verify.gates import not_observed, show_gate, thinking_intended, thinking_problems

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook

OWN_INSTALL = REPO / ".tools" / "hermes" / "bin" / "hermes"  # `make setup` installs the pinned Hermes Agent here
TOOLSETS = "safe"
RUN_TIMEOUT_S = 300.0


# --- the provider block (pure) ------------------------------------------------------------------------


def key_setting(params: LaneParams) -> dict:
    """How the lane's provider block gives Hermes its key: a keyed lane names the environment variable Hermes reads
    it from (`key_env`: Hermes Agent 0.19.0 resolves a `providers:` entry's key_env before its api_key,
    hermes_cli/runtime_provider.py), so the block holds no key; a keyless lane says `api_key: no-key-required`."""
    if params.hermes_key_env:
        return {"key_env": params.hermes_key_env}
    return {"api_key": params.hermes.api_key}


def lane_provider_block(params: LaneParams) -> dict:
    """The recipe's providers.<name> block for this lane: its API, key, advertised context, model, extra_body."""
    return {
        "api": params.api,
        **key_setting(params),
        "context_length": params.hermes.context_length,
        "default_model": params.served_model_name,
        "extra_body": params.hermes.extra_body,
    }


def config_text(provider: str, block: Mapping[str, Any]) -> str:
    """$HERMES_HOME/config.yaml holding the one provider block, values typed as given (a string stays quoted)."""
    out = io.StringIO()
    yaml = YAML(typ="safe", pure=True)  # ruamel's own emitter: the text the tests and Hermes know
    yaml.default_flow_style = False
    yaml.dump({"providers": {provider: dict(block)}}, out)
    return out.getvalue()


# Hermes's local toolchain probe (python3/pip/uv/PEP 668, ~1 s of CPU through pyenv shims on every start) only adds
# a line about this machine's Python to the system prompt; the smoke's home turns it off with Hermes's documented
# switch (agent.environment_probe, "Set False to disable entirely": hermes_cli/config.py, tools/env_probe.py).
SMOKE_AGENT = {"environment_probe": False}


def smoke_config_text(provider: str, block: Mapping[str, Any]) -> str:
    """The route smoke's $HERMES_HOME/config.yaml: the one provider block, and the agent settings of a smoke."""
    out = io.StringIO()
    yaml = YAML(typ="safe", pure=True)  # ruamel's own emitter: the text the tests and Hermes know
    yaml.default_flow_style = False
    yaml.dump({"agent": dict(SMOKE_AGENT)}, out)
    return config_text(provider, block) + out.getvalue()


def block_from_config(text: str, provider: str, source: str) -> dict:
    """The operator's providers.<provider> block from a Hermes config.yaml's text."""
    try:
        doc = yamltext.load(text)
    except YAMLError as exc:
        raise LanebookError(yamltext.problem(source, exc)) from None
    providers = doc.get("providers") if isinstance(doc, Mapping) else None
    block = providers.get(provider) if isinstance(providers, Mapping) else None
    if not isinstance(block, Mapping):
        known = ", ".join(providers) if isinstance(providers, Mapping) else "none"
        raise LanebookError(f"{source}: no providers.{provider} block (providers there: {known})")
    return dict(block)


URL_KEYS = ("api", "base_url", "url")  # what a provider block may call its server's URL


def followed_config(text: str, params: LaneParams, source: str) -> tuple[str, list[str]]:
    """The operator's config.yaml text with providers.<provider> pointed at PARAMS' lane (default_model, each URL key
    the block has, and the lane's key: a keyed lane's key_env, a keyless lane's api_key no-key-required, a literal key
    the operator wrote kept), every other line as it was; and the changes as `key: old → new` (none: already there)."""
    try:
        doc = yamltext.load(text, "rt")
    except YAMLError as exc:
        raise LanebookError(yamltext.problem(source, exc)) from None
    block_from_config(text, params.hermes.provider, source)  # the one message for a config without the block
    block = doc["providers"][params.hermes.provider]
    wanted = {"default_model": params.served_model_name}
    wanted.update({key: params.api for key in [k for k in URL_KEYS if k in block] or ["api"]})
    if params.hermes_key_env:
        wanted["key_env"] = params.hermes_key_env
    elif not params.keyed:
        wanted["api_key"] = params.hermes.api_key
    changes = []
    for key, value in wanted.items():
        old = block.get(key)
        if old is None or str(old).rstrip("/") != value.rstrip("/"):
            block[key] = value
            changes.append(f"{key}: {shown_key(key, old)} → {value}")
    if not params.keyed and "key_env" in block:  # Hermes would read a key from it first: a keyless lane names none
        changes.append(f"key_env: {block.pop('key_env')} → (none)")
    out = io.StringIO()
    YAML(typ="rt").dump(doc, out)
    return out.getvalue(), changes


def shown_key(key: str, value: Any) -> Any:
    """A block's value as a change line may show it: an api_key that is a key, redacted."""
    if key == "api_key" and isinstance(value, str) and value.strip().lower() not in KEYLESS_VALUES:
        return REDACTED
    return value


def key_check(block: Mapping[str, Any], params: LaneParams) -> tuple[str, bool, str]:
    """P09 on a provider block: a keyless lane's says api_key no-key-required (not "none"); a keyed lane's gives a key
    (its key_env, or a literal api_key), never no-key-required. What is expected, whether it holds, what was seen."""
    api_key, key_env = block.get("api_key"), block.get("key_env")
    shown = shown_key("api_key", api_key)
    if not params.keyed:
        seen = repr(shown) + (': "none" is not the keyless value' if api_key == "none" else "")
        return f"api_key is {params.hermes.api_key}", api_key == params.hermes.api_key, seen
    literal = isinstance(api_key, str) and api_key.strip().lower() not in KEYLESS_VALUES
    want = params.hermes_key_env
    ok = (key_env == want) if want else (bool(key_env) or literal)
    seen = f"key_env {key_env!r}, api_key {shown!r}"
    if not key_env and not literal:
        seen += ": a keyless block; the lane wants a key"
    expected = f"key_env is {want}" if want else "a key (key_env or api_key), never no-key-required"
    return f"{expected} (a keyed lane)", ok, seen


def shown_block(block: Mapping[str, Any]) -> dict:
    """The block as a notebook may show it (a real key redacted)."""
    return redact_data(dict(block))


def block_checks(
    step: str, block: Mapping[str, Any], params: LaneParams, *, local: bool = True
) -> list[ExpectedResult]:
    """The provider block against the lane: its API, its key (P09: key_check), thinking a JSON boolean as the lane
    means it, the advertised context, the default model."""
    want_kwargs = params.hermes.extra_body.get("chat_template_kwargs")
    extra = block.get("extra_body")
    kwargs = extra.get("chat_template_kwargs") if isinstance(extra, Mapping) else None
    problems = thinking_problems(kwargs, "extra_body.chat_template_kwargs")
    same_thinking = thinking_intended(kwargs) == thinking_intended(want_kwargs) and (
        kwargs is not None or want_kwargs is None
    )
    key_expected, key_ok, key_seen = key_check(block, params)
    context = block.get("context_length")
    api = str(block.get("api") or block.get("base_url") or block.get("url") or "")
    judged = ExpectedResult.judged
    return [
        judged(step, "api is the lane's API", api.rstrip("/") == params.api.rstrip("/"), api, local=local),
        judged(step, key_expected, key_ok, key_seen, "P09", local=local),
        judged(
            step,
            "thinking is a JSON boolean, as the lane means it",
            not problems and same_thinking,
            "; ".join(problems) or f"chat_template_kwargs {kwargs!r}",
            "P10",
            local=local,
        ),
        judged(
            step,
            f"context_length is {params.hermes.context_length:,} (within the server's {params.max_model_len:,})",
            context == params.hermes.context_length and isinstance(context, int) and context <= params.max_model_len,
            repr(context),
            local=local,
        ),
        judged(
            step,
            f"default_model is {params.served_model_name}",
            block.get("default_model") == params.served_model_name,
            repr(block.get("default_model")),
            local=local,
        ),
    ]


# --- where Hermes runs ---------------------------------------------------------------------------------


def route_argv(command: str, provider: str, model: str, prompt: str) -> list[str]:
    """The recipe's route smoke command line."""
    return [command, "--provider", provider, "-m", model, "-t", TOOLSETS, "-z", prompt]


def shell_line(argv: list[str], home: str) -> str:
    return f"HERMES_HOME={q(home)} " + " ".join(q(a) for a in argv)


def local_command(setting: Optional[str]) -> str:
    """The hermes command here: the lane's setting, else lanebook's own install, else `hermes` on PATH."""
    if setting:
        return setting
    if OWN_INSTALL.exists():
        return str(OWN_INSTALL)
    found = shutil.which("hermes")
    if found:
        return found
    raise LanebookError(
        f"no hermes command: run `make setup` (it installs Hermes Agent into {OWN_INSTALL.parent.parent}), "
        "or set the lane's hermes.bin"
    )


def parse_destination(destination: str) -> NodeParams:
    """An ssh destination [user@]host[:port] as a node to run Hermes on."""
    user, _, rest = destination.rpartition("@")
    host, _, port = rest.partition(":")
    if not host or (port and not port.isdigit()):
        raise LanebookError(f"hermes.host {destination!r}: use a node alias of the lane or [user@]host[:port]")
    return NodeParams(
        alias=destination, role="worker", host=host, port=int(port or 22), user=user or None, roce_ip=host
    )


class LocalHost:
    """Hermes on this machine; each step recorded in the executor's history, none made in a dry run."""

    where = "this machine"

    def __init__(self, executor: Executor, command: Optional[str]):
        self.executor = executor
        self.command = command or self._own_command(executor.dry_run)

    @staticmethod
    def _own_command(dry_run: bool) -> str:
        try:
            return local_command(None)
        except LanebookError:
            if dry_run:  # a dry run only shows the line
                return "hermes"
            raise

    def read(self, path: str) -> str:
        try:
            return Path(path).expanduser().read_text()
        except OSError as exc:
            raise LanebookError(f"cannot read the Hermes config {path}: {exc.strerror}") from None

    def replace(self, path: str, read: str, text: str) -> Optional[str]:
        """Back PATH up beside itself, then write TEXT atomically, refusing if it no longer holds READ. The backup's
        path (None in a dry run)."""
        target = Path(path).expanduser()
        self.executor.record_local(f"back up {path} to {path}.bak-UTCSTAMP, then write it atomically")
        if self.executor.dry_run:
            return None
        if self.read(path) != read:
            raise LanebookError(f"{path} changed since it was read: nothing changed")
        kept = backup(target)
        write_atomic(target, text)
        return str(kept)

    def make_home(self) -> str:
        if self.executor.dry_run:
            self.executor.record_local("mktemp -d -t lanebook-hermes-XXXXXX")
            return "/tmp/lanebook-hermes-XXXXXX"
        home = tempfile.mkdtemp(prefix="lanebook-hermes-")
        self.executor.record_local(f"mktemp -d -t lanebook-hermes-XXXXXX → {home}")
        return home

    def write_config(self, home: str, text: str, name: str = "config.yaml") -> None:
        self.executor.record_local(f"write {home}/{name} (mode 0600)")
        if not self.executor.dry_run:
            path = Path(home) / name
            path.touch(mode=0o600)
            path.write_text(text)

    def run(self, argv: list[str], home: str, timeout_s: float) -> tuple[int, str, str, float]:
        line = shell_line(argv, home)
        if self.executor.dry_run:
            self.executor.record_local(line)
            return 0, "", "", 0.0
        started = time.monotonic()
        try:
            done = subprocess.run(
                argv,
                env={**os.environ, "HERMES_HOME": home},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            self.executor.record_local(line, exit_code=124, duration_s=time.monotonic() - started)
            raise LanebookError(f"hermes did not finish within {timeout_s:g} s: {line}") from None
        except OSError as exc:
            raise LanebookError(f"cannot run {argv[0]}: {exc.strerror}") from None
        duration = time.monotonic() - started
        self.executor.record_local(line, exit_code=done.returncode, duration_s=duration, detail=done.stdout)
        return done.returncode, done.stdout, done.stderr, duration

    def fetch_state(self, home: str, into: Path) -> Optional[Path]:
        db = Path(home) / "state.db"
        return db if db.exists() else None

    def remove_home(self, home: str) -> None:
        if not self.executor.dry_run:
            shutil.rmtree(home, ignore_errors=True)


class RemoteHost:
    """Hermes on another host over SSH: config put by SFTP, state.db fetched back by SFTP."""

    def __init__(self, node: Node, command: Optional[str]):
        self.node = node
        self.command = command or "hermes"
        self.where = f"{node.alias} over SSH"

    def read(self, path: str) -> str:
        return self.node.run(f"cat {qpath(path)}", timeout=30).stdout

    def replace(self, path: str, read: str, text: str) -> Optional[str]:
        """As LocalHost.replace, in one command on the host (the env runbook's: refuse, back up, temp file, rename)."""
        directory, _, name = path.rpartition("/")
        command = replace_command(directory or ".", name, utc_stamp(), sha256(read.encode()), from_stdin=True)
        with tempfile.TemporaryDirectory() as scratch:
            local = Path(scratch) / name
            local.write_text(text)
            hashes = run_replace(self.node, command, path, stdin=local)
        kept = [n for n in hashes if n != name]
        return f"{directory}/{kept[0]}" if kept else None

    def make_home(self) -> str:
        return self.node.run(
            "mktemp -d -t lanebook-hermes-XXXXXX", timeout=30, dry_stdout="/tmp/lanebook-hermes-XXXXXX"
        ).stdout.strip()

    def write_config(self, home: str, text: str, name: str = "config.yaml") -> None:
        with tempfile.TemporaryDirectory() as scratch:  # the home is mktemp -d's: mode 0700 from the start
            local = Path(scratch) / name
            local.touch(mode=0o600)
            local.write_text(text)
            self.node.put(local, f"{home}/{name}")
        self.node.run(f"chmod 600 {q(home + '/' + name)}", timeout=30)

    def run(self, argv: list[str], home: str, timeout_s: float) -> tuple[int, str, str, float]:
        result = self.node.run(shell_line(argv, home) + " </dev/null", check=False, timeout=timeout_s)
        return result.exit_code, result.stdout, result.stderr, result.duration_s

    def fetch_state(self, home: str, into: Path) -> Optional[Path]:
        if self.node.executor.dry_run:
            self.node.get(f"{home}/state.db", into / "state.db")
            return None
        if not self.node.run(f"test -f {q(home + '/state.db')}", check=False, timeout=30).ok:
            return None
        self.node.get(f"{home}/state.db", into / "state.db")
        return into / "state.db"

    def remove_home(self, home: str) -> None:
        self.node.run(f"rm -rf {q(home)}", check=False, timeout=30)


def hermes_host(nodes: LaneNodes):
    """Where the lane's Hermes runs: this machine, a node of the lane, or an ssh destination."""
    host = nodes.params.hermes.host
    if not host:
        return LocalHost(nodes.executor, nodes.params.hermes.bin)
    if any(n.alias == host for n in nodes):
        return RemoteHost(nodes.node(host), nodes.params.hermes.bin)
    return RemoteHost(Node(parse_destination(host), nodes.executor, None), nodes.params.hermes.bin)


@dataclass(frozen=True)
class ProviderBlock:
    """The block the Hermes gates use: rendered from the lane, or read from the operator's config (None when a dry
    run did not read it), where it came from, and whether it was read on this machine (a dry run checks it then)."""

    settings: Optional[dict]
    source: str
    local: bool


def provider_block_in_use(nodes: LaneNodes, hermes_config: Optional[str]) -> ProviderBlock:
    """The operator's block from `hermes_config` (a config.yaml on the Hermes host), else the lane's rendering."""
    provider = nodes.params.hermes.provider
    if not hermes_config:
        return ProviderBlock(lane_provider_block(nodes.params), f"rendered from lane {nodes.params.name}", True)
    host = hermes_host(nodes)
    source = f"{hermes_config} on {host.where}"
    local = isinstance(host, LocalHost)
    if nodes.executor.dry_run and not local:
        host.read(hermes_config)  # recorded, not sent
        return ProviderBlock(None, source, False)
    return ProviderBlock(block_from_config(host.read(hermes_config), provider, source), source, local)


# --- state.db -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateReading:
    """What Hermes recorded of the run: the assistant's replies and the reasoning it received."""

    sessions: int
    replies: tuple[str, ...]
    reasoning_chars: int
    reasoning_messages: int
    reasoning_tokens: int

    @property
    def thinking_seen(self) -> bool:
        return self.reasoning_chars > 0 or self.reasoning_tokens > 0

    def summary(self) -> str:
        if not self.thinking_seen:
            return f"state.db: {self.sessions} session(s), no reasoning recorded"
        return (
            f"state.db: reasoning of {self.reasoning_chars} characters in {self.reasoning_messages} assistant "
            f"message(s), reasoning_tokens {self.reasoning_tokens}"
        )


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def read_state(path: Path) -> StateReading:
    """Read Hermes' state.db: sessions, assistant messages and their reasoning, reasoning_tokens (sessions and
    session_model_usage, whichever the version keeps)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise LanebookError(f"cannot open Hermes' state.db ({path}): {exc}") from None
    try:
        sessions = db.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        reasoning_cols = [c for c in ("reasoning", "reasoning_content") if c in _columns(db, "messages")]
        rows = db.execute(
            f"SELECT content, {', '.join(reasoning_cols) or 'NULL'} FROM messages WHERE role = 'assistant' ORDER BY id"
        ).fetchall()
        tokens = 0
        for table in ("sessions", "session_model_usage"):
            if "reasoning_tokens" in _columns(db, table):
                tokens = max(
                    tokens, db.execute(f"SELECT COALESCE(SUM(reasoning_tokens), 0) FROM {table}").fetchone()[0]
                )
    except sqlite3.Error as exc:
        raise LanebookError(f"Hermes' state.db ({path}) is not as Hermes Agent 0.19 writes it: {exc}") from None
    finally:
        db.close()
    reasoning = [max((len(r or "") for r in row[1:]), default=0) for row in rows]
    return StateReading(
        sessions, tuple(str(row[0] or "") for row in rows), sum(reasoning), sum(1 for n in reasoning if n), int(tokens)
    )


# --- the route smoke --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RouteRun:
    """One run of the route smoke: the command line, its exit, what it printed, and state.db read after it."""

    command: str
    where: str
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float
    state: Optional[StateReading]


def run_route_smoke(nodes: LaneNodes, block: Mapping[str, Any], timeout_s: float = RUN_TIMEOUT_S) -> Optional[RouteRun]:
    """Write the block into a fresh HERMES_HOME (and, for a keyed lane whose block names key_env, the lane's key as
    that variable in the home's .env, mode 0600, which Hermes loads), run the recipe's command there, read state.db,
    remove the home. None in a dry run (every step recorded, none made)."""
    params = nodes.params
    host = hermes_host(nodes)
    argv = route_argv(
        host.command, params.hermes.provider, params.served_model_name, f"Reply exactly {params.gates.hermes_route}."
    )
    home = host.make_home()
    try:
        host.write_config(home, smoke_config_text(params.hermes.provider, block))
        keys = lane_keys(params)
        if keys is not None and block.get("key_env"):  # Hermes loads $HERMES_HOME/.env over its environment
            host.write_config(home, f"{block['key_env']}={keys.client_key}\n", ".env")
        code, out, err, duration = host.run(argv, home, timeout_s)
        with tempfile.TemporaryDirectory() as scratch:
            db = host.fetch_state(home, Path(scratch))
            state = read_state(db) if db is not None else None
    finally:
        host.remove_home(home)
    if nodes.executor.dry_run:
        return None
    return RouteRun(redact(shell_line(argv, home)), host.where, code, redact(out), redact(err), duration, state)


def judge_route(step: str, run: RouteRun, params: LaneParams, block: Mapping[str, Any]) -> list[ExpectedResult]:
    """Hermes exited 0 and printed exactly ROUTE_OK; state.db recorded the reply, and reasoning exactly when the
    block means thinking on (reasoning with thinking meant off is pitfall 10: a string "false")."""
    route = params.gates.hermes_route
    printed = run.stdout.strip()
    tail = (run.stderr.strip().splitlines() or [""])[-1]
    extra = block.get("extra_body")
    intended = thinking_intended(extra.get("chat_template_kwargs") if isinstance(extra, Mapping) else None)
    judged = ExpectedResult.judged
    checks = [
        judged(
            step,
            "hermes exited 0",
            run.exit_code == 0,
            f"exit {run.exit_code} on {run.where}" + (f": {tail[:200]}" if run.exit_code and tail else ""),
        ),
        judged(step, f"hermes printed exactly {route}", printed == route, repr(printed[-200:])),
    ]
    if run.state is None:
        return checks + [judged(step, "Hermes recorded the session in state.db", False, "no state.db in HERMES_HOME")]
    return checks + [
        judged(
            step,
            f"state.db holds the reply {route}",
            route in (r.strip() for r in run.state.replies),
            f"assistant replies {list(run.state.replies)!r}"[:300],
        ),
        judged(
            step,
            f"thinking {'on' if intended else 'off'} as the provider block means it (reasoning in state.db)",
            run.state.thinking_seen == intended,
            run.state.summary()
            + (' — thinking was ON: a string "false" is truthy' if run.state.thinking_seen and not intended else ""),
            "P10",
        ),
    ]


# --- the two gates -----------------------------------------------------------------------------------------


def block_gate(
    step: str, nodes: LaneNodes, hermes_config: Optional[str]
) -> tuple[Optional[ProviderBlock], list[ExpectedResult]]:
    """Gate 5: the provider block (the operator's or the lane's) and its checks; a block that cannot be read is
    the gate's failed check."""
    try:
        provider = provider_block_in_use(nodes, hermes_config)
    except LanebookError as exc:
        return None, [ExpectedResult.judged(step, "the provider block was read", False, str(exc), local=True)]
    if provider.settings is None:
        return provider, not_observed(step, [f"the provider block ({provider.source})"])
    return provider, block_checks(step, provider.settings, nodes.params, local=provider.local)


def route_gate(
    step: str, nodes: LaneNodes, provider: Optional[ProviderBlock]
) -> tuple[Optional[RouteRun], list[ExpectedResult]]:
    """Gate 6: the route smoke through the CLI with the block gate 5 checked, judged on its output and state.db."""
    if provider is None:
        return None, [
            ExpectedResult.judged(step, "hermes routed the smoke", False, "not run: no provider block (gate 5)")
        ]
    # a dry run's stand-in when the operator's block was not read
    block = provider.settings if provider.settings is not None else lane_provider_block(nodes.params)
    try:
        run = run_route_smoke(nodes, block)
    except LanebookError as exc:
        return None, [ExpectedResult.judged(step, "hermes routed the smoke", False, str(exc))]
    if run is None:
        return None, not_observed(step, [f"hermes printed exactly {nodes.params.gates.hermes_route}"])
    return run, judge_route(step, run, nodes.params, block)


def block_text(provider: Optional[ProviderBlock], name: str) -> str:
    """The provider block the gate checked, as config.yaml text under where it came from ("" when none was read)."""
    if provider is None or provider.settings is None:
        return ""
    return f"# providers.{name}, {provider.source}\n{config_text(name, shown_block(provider.settings))}\n"


def route_text(route: Optional[RouteRun]) -> str:
    """The route smoke as the operator would see it: the command, what it printed, and what state.db says."""
    if route is None:
        return ""
    lines = [
        f"$ {route.command}    # on {route.where}, {route.duration_s:.1f} s",
        route.stdout.strip() or "(nothing printed)",
    ]
    return "\n".join(lines + ([route.state.summary()] if route.state is not None else [])) + "\n"


def route_figures(route: Optional[RouteRun]) -> dict:
    """The reasoning state.db recorded for the route smoke (none when it was not read)."""
    if route is None or route.state is None:
        return {}
    return {
        "hermes_reasoning_chars": route.state.reasoning_chars,
        "hermes_reasoning_tokens": route.state.reasoning_tokens,
    }


def block_step(rb: "Runbook", *, config: Optional[str] = None) -> tuple[Optional[ProviderBlock], list[ExpectedResult]]:
    """Gate 5 in the runbook's current step: the provider block (the operator's `config`, else the lane's) printed,
    its checks shown as the gate's table; the block, for gate 6, and the checks."""
    provider, found = block_gate(rb.current_step, rb.nodes, config)
    print(block_text(provider, rb.params.hermes.provider), end="")
    return provider, show_gate(rb, found)


def route_smoke_step(rb: "Runbook", provider: Optional[ProviderBlock]) -> list[ExpectedResult]:
    """Gate 6 in the runbook's current step: ROUTE_OK through the CLI with gate 5's block, its command and output
    printed, state.db's reasoning recorded, its checks shown as the gate's table; the checks."""
    route, found = route_gate(rb.current_step, rb.nodes, provider)
    print(route_text(route), end="")
    rb.record(**route_figures(route))
    return show_gate(rb, found)


# --- the operator's config follows the lane that serves ------------------------------------------------------------


def follow_step(rb: "Runbook", *, target: Optional[LaneNodes] = None, config: Optional[str] = None) -> None:
    """Point the operator's Hermes config at the lane now serving (the runbook's, or `target`): read it on the
    Hermes host, and when its default_model or URL is another lane's, back it up and change those lines (after
    confirmation); then read it again and check it names that lane. No config named: nothing to follow."""
    nodes = rb.nodes if target is None else target
    params = nodes.params
    if not config:
        rb.skip(
            f"the operator's Hermes config names {params.served_model_name}",
            "no Hermes config named (the lane's hermes.config, or -p hermes_config=PATH)",
        )
        return
    host = hermes_host(nodes)
    source = f"{config} on {host.where}"
    text = host.read(config)
    if nodes.executor.dry_run and not isinstance(host, LocalHost):
        host.replace(config, text, text)  # recorded, not sent
        return
    followed, changes = followed_config(text, params, source)
    rb.record(hermes_config_changes=changes)
    if changes:
        rb.confirm(f"back up {source} and change providers.{params.hermes.provider}: {'; '.join(changes)}")
        rb.record(hermes_config_backup=host.replace(config, text, followed))
    if nodes.executor.dry_run:
        return
    left = followed_config(host.read(config), params, source)[1]
    done = "; ".join(changes) + " (backed up first)" if changes else "it already did: nothing changed"
    rb.expect(
        not left,
        what=f"the operator's Hermes config names {params.served_model_name} at {params.api}",
        detail="; ".join(left) or done,
    )


def route_step(rb: "Runbook", *, target: Optional[LaneNodes] = None, config: Optional[str] = None) -> None:
    """The operator's config, as it now is, checked against the runbook's lane (or `target`) and its ROUTE_OK smoke
    run through the real CLI (gates 5 and 6 on that config). No config named: nothing to prove here (the lane's
    gates ran the rendered block)."""
    nodes = rb.nodes if target is None else target
    if not config:
        rb.skip(
            f"ROUTE_OK through the operator's Hermes config on {nodes.params.name}",
            "no Hermes config named: the gates run routed the block rendered from the lane",
        )
        return
    step = rb.current_step
    provider, found = block_gate(step, nodes, config)
    rb.show(markdown=f"```yaml\n{block_text(provider, nodes.params.hermes.provider)}```")
    route, routed = route_gate(step, nodes, provider)
    rb.show(markdown=f"```text\n{route_text(route)}```")
    rb.record(hermes_route={"lane": nodes.params.name, "config": config, **route_figures(route)})
    rb.expect(found + routed)
