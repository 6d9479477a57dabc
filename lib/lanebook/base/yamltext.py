"""YAML text read the one way lanebook reads it (lane files, compose files, Hermes configs, -p values).

ruamel.yaml fails on bad text in more ways than YAMLError: a value Python cannot hold (2001-13-01), its own parser
tripping (`-_` raises IndexError in the round-trip loader, ValueError in the safe one), an alias holding itself
(`&a [*a]`, which every walk of the tree would follow forever). `load` turns each into a YAMLError and `problem`
words it as the one line every caller shows: the source, the line where known, what is wrong.
"""

from __future__ import annotations

from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

try:  # libyaml's parser, through ruamel.yaml.clib (requirements.txt); without it ruamel's own parser reads everything
    from _ruamel_yaml import CParser as _C_PARSER
except ImportError:  # pragma: no cover - an install without the C extension
    _C_PARSER = None
_REFUSED = object()  # what libyaml could not read (or was not asked)


def load(text: str, typ: str = "safe") -> Any:
    """The data in TEXT (typ "safe": plain Python; "rt": the round-trip document with lines and comments).

    Plain data is parsed by libyaml first where ruamel.yaml.clib is installed (several times faster: every process
    that reads a lane pays for it). libyaml follows YAML 1.1, which refuses some text ruamel's own parser reads (a
    URL as a plain value in a flow mapping, `{api: https://x/v1}`): whatever it refuses, ruamel's parser reads again,
    and its result or its error is the answer, so text reads the same with or without the C parser."""
    data: Any = _REFUSED
    try:
        if typ == "safe" and _C_PARSER is not None:
            try:
                data = YAML(typ="safe").load(text)
            except Exception:  # noqa: BLE001 - libyaml's refusal is not the answer: ruamel's own parser gives it
                data = _REFUSED
        if data is _REFUSED:
            data = YAML(typ=typ, pure=True).load(text)
    except (ValueError, OverflowError, IndexError, TypeError) as exc:
        raise YAMLError(f"unreadable value: {exc}") from None
    _refuse_cycles(data, set())
    return data


def problem(source: Any, exc: YAMLError) -> str:
    """'SOURCE line N: not valid YAML (what)', the line left out where ruamel does not know it."""
    mark = getattr(exc, "problem_mark", None)
    where = f" line {mark.line + 1}" if mark else ""
    return f"{source}{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})"


def _refuse_cycles(node: Any, parents: set[int]) -> None:
    if not isinstance(node, (dict, list)):
        return
    if id(node) in parents:
        raise YAMLError("an alias refers to a node holding it (&a [*a])")
    parents.add(id(node))
    for child in node.values() if isinstance(node, dict) else node:
        _refuse_cycles(child, parents)
    parents.discard(id(node))
