"""The recipe's docker-compose.dspark.yml: find the vllm serve service, read it with line numbers, patch it.

Reading uses ruamel.yaml's round-trip loader, which keeps each key's and item's line, so lint can
name the line of an environment key, a volume, a flag or the SPECULATIVE_CONFIG assignment.

Patching edits the file's lines, not a re-dump of the document: ruamel's dumper reproduces this file
only with indentation settings guessed per file, and it attaches a comment block to the key above
it, so a key inserted after VLLM_USE_FLASHINFER_SAMPLER would land between the next key and its
comment. A line edit leaves every other byte as it was. Each patch is then re-parsed and must equal
the original document with exactly the intended change applied (same keys in the same order, the
command string changed only by the replaced assignment), or nothing is written.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from lanebook.base import yamltext
from lanebook.base.errors import LanebookError
from lanebook.base.files import read_text

COMPOSE_NAME = "docker-compose.dspark.yml"
SERVE_MARK = "vllm serve"
# SPECULATIVE_CONFIG="...shell double-quoted JSON with \" escapes...";  (group 1: the quoted body)
ASSIGNMENT_RE = re.compile(r'SPECULATIVE_CONFIG="((?:[^"\\]|\\.)*)";?')


@dataclass(frozen=True)
class EnvItem:
    """One entry of the service's environment (map `KEY: value` or list `- KEY=value`)."""

    key: str
    # The value as Compose reads it, before interpolation; None for a key without one (`KEY:` or `- KEY`), which
    # Compose takes from the environment it runs in, or leaves unset: not the empty string `KEY: ""` sets.
    raw: Optional[str]
    line: int  # 1-based
    col: int  # column of the key (map) or of the dash (list)


@functools.lru_cache(maxsize=16)
def _round_trip(text: str) -> Any:
    """A compose text's round-trip document, parsed once per text (ruamel's pure-Python parse of the recipe's file
    takes tens of ms, and render and lint read the same text many times). Nothing changes a parsed document."""
    return yamltext.load(text, "rt")


@functools.lru_cache(maxsize=16)
def _safe(text: str) -> Any:
    return yamltext.load(text)


def safe_data(text: str) -> Any:
    """A compose text as plain data (YAML's safe loader), a fresh copy the caller may change; parsed once per text."""
    return copy.deepcopy(_safe(text))


def service_names(text: str) -> list[str]:
    """A compose text's services in the file's order, from the round-trip parse ComposeFile reads too (parsed once per
    text): Compose's own output sorts them. Refuses what does not parse as ComposeFile does (YAMLError)."""
    doc = _round_trip(text)
    services = doc.get("services") if isinstance(doc, CommentedMap) else None
    return list(services) if isinstance(services, CommentedMap) else []


def _text(value: Any) -> str:
    """A YAML scalar as text (no value, None, as the empty string)."""
    return "" if value is None else str(value)


def _serve_text(command: Any) -> str:
    return " ".join(map(str, command)) if isinstance(command, list) else str(command or "")


class ComposeFile:
    """A compose file's text plus what lint and render need from its vllm serve service."""

    def __init__(self, text: str, path: str | Path):
        self.text = text
        self.path = str(path)
        self.lines = text.splitlines()
        try:
            self.doc = _round_trip(text)
        except YAMLError as exc:
            raise LanebookError(yamltext.problem(path, exc)) from None
        services = self.doc.get("services") if isinstance(self.doc, CommentedMap) else None
        if not isinstance(services, CommentedMap):
            raise LanebookError(f"{path}: no services: map")
        names = [
            n
            for n, s in services.items()
            if isinstance(s, CommentedMap) and SERVE_MARK in _serve_text(s.get("command"))
        ]
        if len(names) != 1:
            found = "no service" if not names else f"{len(names)} services ({', '.join(names)})"
            raise LanebookError(f"{path}: expected one service whose command runs `{SERVE_MARK}`, found {found}")
        self.service_name = names[0]
        self.service: CommentedMap = services[self.service_name]
        self._services = services

    # --- where things are -------------------------------------------------------------------

    def _key_line(self, mapping: CommentedMap, key: str) -> int:
        return mapping.lc.key(key)[0] + 1

    def _block_end(self, key: str) -> int:
        """Last line of the service key's block: up to the next key of the service, service or top level."""
        candidates = []
        for mapping, name in ((self.service, key), (self._services, self.service_name), (self.doc, "services")):
            keys = list(mapping)
            later = keys[keys.index(name) + 1 :]
            if later:
                candidates.append(self._key_line(mapping, later[0]) - 1)
        return min(candidates, default=len(self.lines))

    @property
    def service_line(self) -> int:
        return self._key_line(self._services, self.service_name)

    @property
    def environment_line(self) -> int:
        """The `environment:` line: where a missing key is reported (the service line if there is none)."""
        if "environment" in self.service:
            return self._key_line(self.service, "environment")
        return self.service_line

    @property
    def environment(self) -> dict[str, EnvItem]:
        env = self.service.get("environment")
        items: dict[str, EnvItem] = {}
        if isinstance(env, CommentedMap):
            for key, value in env.items():
                line, col = env.lc.key(key)
                items[str(key)] = EnvItem(str(key), None if value is None else str(value), line + 1, col)
        elif isinstance(env, CommentedSeq):
            for index, entry in enumerate(env):
                key, sep, value = str(entry).partition("=")
                line, col = env.lc.item(index)
                items[key] = EnvItem(key, value if sep else None, line + 1, col - 2)
        return items

    def command_lines(self) -> list[tuple[int, str]]:
        """(line number, text) of every line of the service's command block."""
        if "command" not in self.service:
            return []
        start = self._key_line(self.service, "command")
        return [(n, self.lines[n - 1]) for n in range(start, self._block_end("command") + 1)]

    def speculative_assignments(self) -> list[tuple[int, re.Match]]:
        return [(n, m) for n, text in self.command_lines() for m in ASSIGNMENT_RE.finditer(text)]

    def flag(self, name: str) -> Optional[tuple[str, int]]:
        """The raw argument of a vllm serve flag (`--max-num-seqs ${MAX_NUM_SEQS:-6}`) and its line."""
        found = self._flag_match(name)
        return None if found is None else (found[1].group(1).strip("'\""), found[0])

    def _flag_match(self, name: str) -> Optional[tuple[int, re.Match]]:
        """The first command line writing a vllm serve flag, and the match of `FLAG VALUE` (group 1 the value)."""
        pattern = re.compile(rf"(?<!\S){re.escape(name)}(?:=|\s+)(\S+)")
        for number, text in self.command_lines():
            match = pattern.search(text)
            if match:
                return number, match
        return None

    def served_model(self) -> Optional[tuple[str, int]]:
        """The raw model argument of `vllm serve` (`${DSPARK_MODEL:-deepseek-ai/...}`) and its line."""
        pattern = re.compile(r"\bvllm\s+serve\s+([^\s;]+)")
        for number, text in self.command_lines():
            match = pattern.search(text)
            if match:
                return match.group(1).strip("'\""), number
        return None

    def service_value(self, key: str) -> Optional[tuple[str, int]]:
        """A scalar key of the service (`image: ${DSPARK_VLLM_IMAGE:-...}`) as written, and its line."""
        if key not in self.service or isinstance(self.service[key], (CommentedMap, CommentedSeq)):
            return None
        return _text(self.service[key]), self._key_line(self.service, key)

    def volumes(self) -> list[tuple[str, int]]:
        """(host source as written, line) of each volume; long-form entries give their `source:`."""
        vols = self.service.get("volumes")
        found = []
        if isinstance(vols, CommentedSeq):
            for index, entry in enumerate(vols):
                line = vols.lc.item(index)[0] + 1
                if isinstance(entry, CommentedMap):
                    found.append((str(entry.get("source", "")), line))
                else:
                    found.append((str(entry), line))
        return found

    # --- patching ---------------------------------------------------------------------------

    def patched(
        self, environment: dict[str, str], speculative_assignment: str, flags: Optional[dict[str, str]] = None
    ) -> str:
        """The file's text with each environment key set to its value, SPECULATIVE_CONFIG replaced, and each of
        FLAGS (a `vllm serve` flag the command writes literally, `--kv-cache-dtype nvfp4_ds_mla`) given its value.
        A flag the command does not write is left out: there is no line of the recipe's to set it on.

        A missing key goes right after the existing key sharing most leading `_` words with it
        (VLLM_USE_BREAKABLE_CUDAGRAPH after VLLM_USE_FLASHINFER_SAMPLER), at that key's indentation.
        """
        assignments = self.speculative_assignments()
        if len(assignments) != 1:
            raise LanebookError(
                f'{self.path}: expected one SPECULATIVE_CONFIG="..."; assignment in the command of '
                f"service {self.service_name}, found {len(assignments)}"
            )
        items = self.environment
        if not items:
            raise LanebookError(
                f"{self.path}: service {self.service_name} has no environment: entries to inject next to"
            )
        lines = list(self.lines)
        spec_line, match = assignments[0]
        text = lines[spec_line - 1]
        lines[spec_line - 1] = text[: match.start()] + speculative_assignment + text[match.end() :]
        replaced = [(match.group(0), speculative_assignment)]
        for name, value in (flags or {}).items():
            found = self._flag_match(name)
            if found is not None and found[1].group(1).strip("'\"") != value:
                number, flag_match = found
                old, new = flag_match.group(0), flag_match.group(0)[: flag_match.start(1) - flag_match.start()] + value
                text = lines[number - 1]
                lines[number - 1] = text[: flag_match.start()] + new + text[flag_match.end() :]
                replaced.append((old, new))

        inserts: dict[int, list[str]] = {}
        for key, value in environment.items():
            if key in items:
                if items[key].raw != value:
                    lines[items[key].line - 1] = self._env_line(items[key], key, value, lines[items[key].line - 1])
            else:
                anchor = _closest_key(key, list(items))
                inserts.setdefault(items[anchor].line, []).append(self._env_line(items[anchor], key, value))
        for after in sorted(inserts, reverse=True):
            lines[after:after] = inserts[after]
        new_text = "\n".join(lines) + ("\n" if self.text.endswith("\n") else "")
        if new_text != self.text:
            self._verify(new_text, environment, replaced)
        return new_text

    def _env_line(self, item: EnvItem, key: str, value: str, replacing: Optional[str] = None) -> str:
        """An environment line in the file's own form, keeping an end-of-line comment it replaces."""
        if isinstance(self.service["environment"], CommentedSeq):
            entry = f"{key}={value}"  # plain like its neighbours when YAML allows, else quoted
            body = f"- {entry}" if re.fullmatch(r"[A-Za-z_][^\s\"'#]*[^\s\"'#:]", entry) else f"- {json.dumps(entry)}"
        else:
            body = f"{key}: {json.dumps(value)}"
        comment = re.search(r"""\s+#[^"']*$""", replacing or "")
        return " " * item.col + body + (comment.group(0) if comment else "")

    def _verify(self, new_text: str, environment: dict[str, str], replaced: list[tuple[str, str]]) -> None:
        """Re-parse the patch: it must equal the original with only the intended changes, or nothing is written."""
        try:
            after = safe_data(new_text)
        except YAMLError as exc:
            raise LanebookError(
                f"{self.path}: patch would break the file ({yamltext.problem('', exc)}); nothing written"
            ) from None
        expected = safe_data(self.text)
        service = expected["services"][self.service_name]
        for old, new in replaced:  # each replaced text once in the command, as the patch left it
            command = service["command"]
            if isinstance(command, list):
                hits = [i for i, part in enumerate(command) if isinstance(part, str) and old in part]
                if len(hits) == 1 and command[hits[0]].count(old) == 1:
                    command[hits[0]] = command[hits[0]].replace(old, new)
            elif isinstance(command, str) and command.count(old) == 1:
                service["command"] = command.replace(old, new)
        env = service["environment"]
        if isinstance(env, list):
            keys = [str(e).partition("=")[0] for e in env]
            for key, value in environment.items():
                if key in keys:
                    _, sep, was = str(env[keys.index(key)]).partition("=")
                    if not sep or was != value:
                        env[keys.index(key)] = f"{key}={value}"
                else:
                    position = keys.index(_closest_key(key, keys)) + 1
                    env.insert(position, f"{key}={value}")
                    keys.insert(position, key)
        else:
            keys = list(env)
            for key, value in environment.items():
                if key not in keys:
                    keys.insert(keys.index(_closest_key(key, keys)) + 1, key)
                if key not in env or env[key] is None or str(env[key]) != value:
                    env[key] = value
            service["environment"] = {k: env[k] for k in keys}
        got_env = after["services"][self.service_name]["environment"] if isinstance(after, dict) else None
        if after != expected or list(got_env or []) != list(service["environment"]):
            raise LanebookError(
                f"{self.path}: cannot patch this file's shape safely (the re-parsed result differs "
                f"from the intended change); nothing written"
            )


def _closest_key(key: str, keys: list[str]) -> str:
    """The first key sharing the most leading `_`-separated words with `key` (the last key if none)."""
    words = key.split("_")

    def shared(other: str) -> int:
        count = 0
        for a, b in zip(words, other.split("_")):
            if a != b:
                break
            count += 1
        return count

    best = max(keys, key=shared)  # max returns the first of equals
    return best if shared(best) else keys[-1]


def load_compose(path: str | Path) -> ComposeFile:
    return ComposeFile(read_text(path, "compose file"), path)
