"""A checkout's files: the one reader of them, from a local directory or from a node over SSH."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional

from lanebook.base.errors import LanebookError
from lanebook.recipe.compose import COMPOSE_NAME

if TYPE_CHECKING:
    from lanebook.nodes.ssh import Node

ENV_NAME = ".env.dspark"
EXAMPLE_NAMES = (".env.dspark.example", "env.dspark.example")  # the recipe's name, and the one its fixture copy uses
START_NAME = "start-deepseek-v4-flash-dspark.sh"
REFERENCE = Path(__file__).parents[1] / "reference"  # lanebook's short copy of the recipe checkout's compose, example


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
SOURCED_RE = re.compile(
    r"""^\s*(?:\.|source)\s+["']?(?:\$\{?SCRIPT_DIR\}?/|\./)?((?:[\w-]+/)*[\w.-]+\.sh)["']?\s*$""", re.M
)
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
    node: Optional["Node"] = field(default=None, repr=False)  # a node's checkout: its Compose decides the container
    node_checkout: str = ""  # the checkout's path on that node

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

        def read(names: list[str]) -> dict[str, bytes]:
            return {n: (directory / n).read_bytes() for n in names if (directory / n).is_file()}

        return cls.from_bytes(_checkout_bytes(read), f"{directory}/", directory)

    @classmethod
    def from_bytes(cls, data: Mapping[str, bytes], prefix: str, directory: Optional[Path] = None) -> "CheckoutFiles":
        """From checkout-relative name → bytes (read_checkout's answer). The compose and env files must be UTF-8:
        lanebook parses and edits them; the others are read with undecodable bytes replaced."""
        texts = {}
        for name, raw in data.items():
            try:
                texts[name] = raw.decode("utf-8", errors="strict" if name in (COMPOSE_NAME, ENV_NAME) else "replace")
            except UnicodeDecodeError as exc:
                raise LanebookError(f"{prefix}{name} is not UTF-8 text (byte {exc.start})") from None
        return cls.from_texts(texts, prefix, directory)

    @classmethod
    def fetch(cls, node: "Node", checkout: str) -> "CheckoutFiles":
        """A checkout on a node (see read_checkout); its effective configuration is asked of that node."""
        files = cls.from_bytes(read_checkout(node, checkout), node_prefix(node, checkout))
        return files.replace(node=node, node_checkout=checkout)

    @property
    def launcher_files(self) -> list[TextFile]:
        """Where the launcher's own logic is: the start script and what it sources."""
        return [self.start, *self.sourced] if self.start else []

    def replace(self, **changes: Any) -> "CheckoutFiles":
        return CheckoutFiles(**{**self.__dict__, **changes})


def node_prefix(node: "Node", checkout: str) -> str:
    """How findings name a node's checkout files: NODE:CHECKOUT/."""
    return f"{node.alias}:{checkout.rstrip('/')}/"


def read_node_files(node: "Node", paths: Iterable[str]) -> list[Optional[bytes]]:
    """The bytes of each path on the node, in order (None where no regular file is), in one command."""
    from lanebook.nodes.ssh import qpath

    paths = list(paths)
    if not paths:
        return []
    listed = " ".join(qpath(p) for p in paths)
    result = node.run(
        f'for f in {listed}; do if test -f "$f"; then printf +; base64 -w0 < "$f"; echo; else echo -; fi; done',
        timeout=60,
    )
    lines = result.stdout.splitlines()
    if result.dry_run:
        return [None] * len(paths)
    if len(lines) != len(paths):
        raise LanebookError(f"{node.alias}: reading {len(paths)} files gave {len(lines)} lines")
    return [base64.b64decode(line[1:]) if line.startswith("+") else None for line in lines]


def _checkout_bytes(read: Callable[[list[str]], dict[str, bytes]]) -> dict[str, bytes]:
    """The checkout files that decide what it serves (CHECKOUT_NAMES, then the files its start script sources), by
    checkout-relative name, as bytes; READ gives the bytes of those of some names that are files."""
    found = read(list(CHECKOUT_NAMES))
    start = found.get(START_NAME)
    more = [n for n in sourced_names(start.decode("utf-8", errors="replace")) if n not in found] if start else []
    return {**found, **(read(more) if more else {})}


def read_checkout(node: "Node", checkout: str) -> dict[str, bytes]:
    """A node's checkout files (see _checkout_bytes) over SSH: one command, and a second for the sourced files."""

    def read(names: list[str]) -> dict[str, bytes]:
        found = read_node_files(node, [f"{checkout.rstrip('/')}/{n}" for n in names])
        return {n: data for n, data in zip(names, found) if data is not None}

    return _checkout_bytes(read)
