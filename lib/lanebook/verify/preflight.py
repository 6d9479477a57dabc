"""`lanebook check`: everything that would stop a promotion before it starts, node by node, each with its fix.

A preflight changes nothing: every probe reads (`command -v`, `docker info`, `sudo -n -l`, `df`, `systemctl
is-active`, an `ssh ... true` from the head to each worker's RoCE address as the recipe's launcher makes it), and the
link's rails are measured (lanebook.verify.link: seconds of load per rail; a degraded rail stops a promotion with its
documented recovery). A dry run records the probes through the one Executor and opens no connection. The promotion
runs the same list first (`lanebook promote` refuses a lane that is not ready), so there is one list.

The RoCE link and image probes are the recipe launcher's own first checks (`ssh -o BatchMode=yes ... "$WORKER_HOST"
true`, `docker image inspect` on the worker: start-deepseek-v4-flash-dspark.sh of
https://github.com/MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark), made before anything starts.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

from lanebook.base.checks import NOT_OBSERVED_DRY_RUN
from lanebook.base.errors import LanebookError
from lanebook.lane.params import LaneParams
from lanebook.nodes.ssh import LaneNodes, Node, NodeError, q, qpath
from lanebook.ops.memory import parse_unit_states, sudo_commands, unit_probe
from lanebook.verify.hermes import OWN_INSTALL, parse_destination
from lanebook.verify.link import ERROR, measure_link, outcome, rail_line

# DeepSeek-V4-Flash's shards take about 160 GB (issue 32, from the recipe's weights step): the space a node needs
# where its copy is missing.
WEIGHTS_GIB = 160
LEGACY_ITEM = "legacy units (P13)"
HF_ITEM = "HF cache path"
# Items a promotion deals with itself, so only warnings: the launch runbook masks legacy units, the weights runbook
# makes the HF cache's hub folder and downloads into it.
WARNINGS = (LEGACY_ITEM, HF_ITEM)


@dataclass(frozen=True)
class Item:
    """One prerequisite on one node: ok (None: not observed), what was seen, and what to do."""

    node: str
    name: str
    ok: Optional[bool]
    seen: str
    fix: str = ""
    blocking: bool = True  # False: the promotion deals with it itself (it masks legacy units), so only a warning

    def to_json(self) -> dict:
        return {("item" if key == "name" else key): value for key, value in asdict(self).items()}


class NotReady(LanebookError):
    """A promotion refused before it starts: a prerequisite fails (exit 1: the lane, not the usage, is wrong)."""

    exit_code = 1


def sudoers_line(user: str, commands: list[str]) -> str:
    """The narrow sudoers line allowing exactly COMMANDS as `sh -c COMMAND` without a password (sudoers escapes
    `,:=\\` in arguments)."""
    escaped = [re.sub(r"([,:=\\])", r"\\\1", c) for c in commands]
    return f"{user} ALL=(root) NOPASSWD: " + ", ".join(f"/bin/sh -c {c}" for c in escaped)


def _login(node: Node) -> str:
    return node.params.user or "$USER"


def _ssh_fix(node: Node, params: LaneParams) -> str:
    jump = f" -J {node.params.jump}" if node.params.jump else ""
    config = f" -F {params.ssh_config}" if params.ssh_config else ""
    return (
        f"make `ssh{config}{jump} {node.address.rsplit(':', 1)[0]} true` work without a prompt: the lane's user "
        f"({_login(node)}), a key in its authorized_keys (ssh-copy-id), the jump host where one is named"
    )


def _reach(node: Node, params: LaneParams) -> list[Item]:
    try:
        node.run("true", timeout=30)
    except NodeError as exc:
        text = str(exc)
        if "known_hosts" in text or "not found in known" in text or "Host key" in text:
            host, port = node.params.host, node.params.port
            return [
                Item(node.alias, "ssh reach", True, "the node answers"),
                Item(
                    node.alias,
                    "host key known",
                    False,
                    "the node's host key is not in known_hosts: lanebook refuses unknown keys",
                    "compare the key with the node's console (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`), "
                    f"then "
                    f"`ssh-keyscan -p {port} {host} >> ~/.ssh/known_hosts` (or the UserKnownHostsFile your ssh config "
                    "names)",
                ),
            ]
        return [Item(node.alias, "ssh reach", False, text, _ssh_fix(node, params))]
    return [Item(node.alias, "ssh reach", True, "ok"), Item(node.alias, "host key known", True, "ok")]


Probe = tuple[str, str, Callable[[int, str], tuple[bool, str]], str]


def _probes(node: Node, params: LaneParams) -> list[Probe]:
    """(item, command, judge(exit, output) → (ok, seen), fix) for one reachable node."""
    image = str(params.env.get("DSPARK_VLLM_IMAGE", ""))
    user = _login(node)
    weights = params.weights
    commands = sudo_commands(list(params.legacy_units))
    listed = " && ".join(f"sudo -n -l sh -c {q(c)}" for c in commands)

    def found(code: int, out: str) -> tuple[bool, str]:
        return code == 0, out.strip().splitlines()[-1] if out.strip() else f"exit {code}"

    probes: list[Probe] = [
        ("python3", "command -v python3", found, "install it: `sudo apt-get install -y python3`"),
        ("rsync", "command -v rsync", found, "install it: `sudo apt-get install -y rsync`"),
        (
            "docker without a password",
            "docker ps -q 2>&1",
            lambda code, out: (code == 0, "the daemon answers" if code == 0 else out.strip()[-240:] or f"exit {code}"),
            f"add the user to the docker group: `sudo usermod -aG docker {user}`, then log in again",
        ),
        (
            "Compose v2",
            "docker compose version --short 2>&1",
            lambda code, out: (code == 0 and out.strip().lstrip("v").startswith("2"), out.strip() or f"exit {code}"),
            "install Docker Compose v2 (the docker-compose-plugin package): `sudo apt-get install -y "
            "docker-compose-plugin`",
        ),
        (
            "sudo for lanebook's commands",
            f"{listed} 2>&1",
            lambda code, out: (code == 0, "allowed" if code == 0 else (out.strip().splitlines() or ["refused"])[-1]),
            "allow exactly these without a password (visudo -f /etc/sudoers.d/lanebook): "
            + sudoers_line(user, commands),
        ),
        (
            HF_ITEM,
            f"test -d {qpath(weights.hf_cache)} && echo {q(weights.hf_cache)}",
            lambda code, out: (code == 0, out.strip() if code == 0 else f"no {weights.hf_cache}"),
            "the weights runbook makes it and downloads into it; where your weights already are elsewhere, set "
            "weights.hf_cache in the lane file to that path",
        ),
        (
            "weights or room for them",
            f"n=$(ls -1 {qpath(weights.hub_dir)}/snapshots/*/ 2>/dev/null | grep -c '\\.safetensors$'); "
            f'd={qpath(weights.hf_cache)}; while [ ! -d "$d" ]; do d=$(dirname "$d"); done; '
            'echo "$n $(df -Pk "$d" | awk \'NR==2 {print $4}\')"',
            lambda code, out: _room(out, weights.shards),
            f"free {WEIGHTS_GIB} GB under {weights.hf_cache} (or point weights.hf_cache at a disk with room)",
        ),
    ]
    if image:
        probes.append(
            (
                "the lane's image",
                f"docker image inspect --format '{{{{.Id}}}}' {q(image)} 2>&1",
                found,
                f"pull it on this node: `docker pull {image}`",
            )
        )
    if params.legacy_units:
        probes.append(
            (
                LEGACY_ITEM,
                unit_probe(list(params.legacy_units)),
                lambda code, out: _units(out),
                "the launch runbook masks them (`sudo systemctl mask --now "
                + " ".join(params.legacy_units)
                + "`): a legacy unit can restart and take the pair's memory",
            )
        )
    if node.role == "head":
        for worker in params.workers:
            probes.append(
                (
                    f"RoCE link to {worker.alias} ({worker.roce_ip})",
                    f"ssh -o BatchMode=yes -o ConnectTimeout=5 {q(worker.roce_ip)} true 2>&1",
                    lambda code, out: (code == 0, "answers" if code == 0 else out.strip()[-200:] or f"exit {code}"),
                    f"from the head, `ssh {worker.roce_ip} true` must work without a prompt (the launcher reaches "
                    "the worker so): check the RoCE link (ip addr on both), the head's key in the worker's "
                    "authorized_keys",
                )
            )
    return probes


def _room(out: str, shards: int) -> tuple[bool, str]:
    parts = out.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return False, out.strip() or "no answer"
    have, free_gib = int(parts[0]), int(parts[1]) / 1024**2
    if have >= shards:
        return True, f"{have} of {shards} shards present"
    return free_gib >= WEIGHTS_GIB, f"{have} of {shards} shards present; {free_gib:.0f} GiB free (need {WEIGHTS_GIB})"


def _units(out: str) -> tuple[bool, str]:
    states = parse_unit_states(out)
    active = [u for u, (state, _) in states.items() if state == "active"]
    return not active, (f"active: {', '.join(active)}" if active else "none active")


def _remote_hermes(nodes: LaneNodes) -> list[Item]:
    """The Hermes CLI and its config on the host the lane names (a node of the lane, or an ssh destination)."""
    hermes = nodes.params.hermes
    aliases = {n.alias for n in nodes}
    node = (
        nodes.node(hermes.host)
        if hermes.host in aliases
        else Node(parse_destination(hermes.host), nodes.executor, None)
    )
    where = f"hermes on {hermes.host}"
    checks = [
        ("Hermes CLI", f"command -v {q(hermes.bin or 'hermes')}", "install Hermes Agent there, or set hermes.bin")
    ]
    if hermes.config:
        checks.append(
            ("Hermes config", f"test -f {qpath(hermes.config)} && echo {q(hermes.config)}", "run `hermes setup` there")
        )
    items = []
    for name, command, fix in checks:
        try:
            result = node.run(command, check=False, timeout=30)
        except NodeError as exc:
            items.append(Item(where, name, False, str(exc), fix))
            continue
        if result.dry_run:
            items.append(Item(where, name, None, NOT_OBSERVED_DRY_RUN))
        else:
            seen = result.stdout.strip() or f"not found (exit {result.exit_code})"
            items.append(Item(where, name, result.ok, seen, "" if result.ok else fix))
    return items


def _hermes(params: LaneParams) -> list[Item]:
    """The Hermes CLI and its config where the gates will look, on this machine (hermes.host not set)."""
    hermes = params.hermes
    command = hermes.bin or (str(OWN_INSTALL) if OWN_INSTALL.exists() else "hermes")
    import shutil

    present = Path(command).exists() if "/" in command else shutil.which(command) is not None
    items = [
        Item(
            "local",
            "Hermes CLI",
            present,
            command if present else f"no {command}",
            "run `make setup` (it installs Hermes Agent into .tools/hermes) or set hermes.bin in the lane file",
        )
    ]
    if hermes.config:
        config = Path(hermes.config).expanduser()
        items.append(
            Item(
                "local",
                "Hermes config",
                config.is_file(),
                str(config) if config.is_file() else f"no {config}",
                "run `hermes setup` there, or set hermes.config to the config.yaml Hermes reads",
            )
        )
    return items


def preflight(nodes: LaneNodes) -> list[Item]:
    """Every prerequisite on every node of the lane (a dry run records the probes and observes nothing)."""
    params = nodes.params
    items: list[Item] = []
    every_node_reached = True
    for node in nodes:
        if nodes.executor.dry_run:
            node.run("true")
            reached = True
        else:
            reach = _reach(node, params)
            items += reach
            reached = all(i.ok for i in reach)
        every_node_reached = every_node_reached and reached
        for name, command, judge, fix in _probes(node, params):
            if not reached:
                items.append(Item(node.alias, name, None, "not probed: the node is not reached"))
                continue
            try:
                result = node.run(command, check=False, timeout=60)
            except NodeError as exc:
                items.append(Item(node.alias, name, False, str(exc), fix))
                continue
            if result.dry_run:
                items.append(Item(node.alias, name, None, NOT_OBSERVED_DRY_RUN))
                continue
            ok, seen = judge(result.exit_code, result.stdout + result.stderr)
            items.append(Item(node.alias, name, ok, seen, "" if ok else fix, blocking=name not in WARNINGS))
    items += _link(nodes, every_node_reached)
    return items + (_remote_hermes(nodes) if params.hermes.host else _hermes(params))


LINK_ITEM = "RoCE link"


def _link(nodes: LaneNodes, reached: bool) -> list[Item]:
    """The RoCE rails measured (lanebook.verify.link): a rail degraded, down or not measurable stops a promotion with
    its fix; a suspect one (under the healthy band, an MTU off) warns; NCCL's bus bandwidth where measured."""
    head = nodes.head.alias
    if not reached:
        return [Item(head, LINK_ITEM, None, "not measured: a node is not reached")]
    report = measure_link(nodes, nodes.params)
    items = []
    for rail in report.rails:
        ok, found = outcome(report, rail)
        errors = [f for f in found if f.severity == ERROR]
        seen = (
            (rail_line(rail, report.figures_label) + "".join(f" | {f.id} {f.cause}" for f in found))
            if ok is not None
            else rail_line(rail, report.figures_label)
        )
        fix = "; ".join(f"{f.fix} (source: {f.source})" for f in (errors or found))
        items.append(
            Item(
                rail.worker,
                f"RoCE rail {rail.rail}",
                None if ok is None else not found,
                seen,
                fix,
                blocking=bool(errors),
            )
        )
    for f in report.findings:
        if f.worker is None:
            items.append(
                Item(head, f.id, False, f.cause, f"{f.fix} (source: {f.source})", blocking=f.severity == ERROR)
            )
    if not report.rails:
        items.append(Item(head, LINK_ITEM, None, report.not_measured or "not measured"))
    busbw = report.bus_bandwidth_gbs
    items.append(Item(head, "NCCL bus bandwidth", None, f"{busbw:.2f} GB/s" if busbw is not None else report.nccl_note))
    return items


def failures(items: list[Item]) -> list[Item]:
    """The items that stop a promotion."""
    return [i for i in items if i.ok is False and i.blocking]


def ready(items: list[Item]) -> bool:
    """Nothing stops a promotion, and something was observed."""
    return not failures(items) and any(i.ok for i in items)


def check_before_promotion(params: LaneParams) -> list[Item]:
    """The promotion's prerequisites, the same list `lanebook check` shows: NotReady names each failure with its
    fix; the items are returned for the promotion's first record."""
    with LaneNodes(params) as nodes:
        items = preflight(nodes)
    blocked = failures(items)
    if blocked:
        listed = "; ".join(f"{i.node} {i.name}: {i.seen} (fix: {i.fix})" for i in blocked)
        raise NotReady(
            f"lane {params.name} is not ready, nothing was run: {listed}. See `lanebook check --lane {params.name}`"
        )
    return items


def table(items: list[Item]) -> str:
    """A plain-text table: node, item, result, what was seen, and the fix where it failed."""
    rows = [("node", "item", "result", "seen / fix")]
    for i in items:
        mark = "ok" if i.ok else ("-" if i.ok is None else ("FAIL" if i.blocking else "WARN"))
        rows.append((i.node, i.name, mark, i.seen + (f"\n    fix: {i.fix}" if i.fix and i.ok is False else "")))
    widths = [max(len(r[c]) for r in rows) for c in range(3)]
    lines = []
    for r in rows:
        first, *rest = r[3].split("\n")
        lines.append("  ".join(r[c].ljust(widths[c]) for c in range(3)) + "  " + first)
        lines += [" " * (sum(widths) + 6) + line for line in rest]
    return "\n".join(lines)
