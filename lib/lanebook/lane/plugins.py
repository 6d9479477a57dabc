"""Where an environment plugs into lanebook: what a named `ssh_config:` resolves to, what brings a lane
up before a run, what launches a lane a runbook needs serving, which APIs are a twin's, and pages it adds to the
book. The product names no environment; the digital twin is one such plugin.

A plugin is a function `register(registry)` published under the setuptools entry point group
`lanebook.lane.plugins` (pyproject.toml declares the twin's). Entry points are read from the installed
package metadata, so every process finds the same plugins without importing them by name: the CLI, a test,
and the fresh kernel papermill starts for `papermill runbooks/launch.ipynb OUT.ipynb`, which must bring
the twin up by itself. papermill finds its own engines and I/O handlers the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Optional

from lanebook.base.errors import LanebookError
from lanebook.lane.params import LaneParams

ENTRY_POINT_GROUP = "lanebook.plugins"

SshConfigResolver = Callable[[], Path]
LanePreparer = Callable[[LaneParams], None]
PageRenderer = Callable[[], str]
# Called with the running runbook (lanebook.steps.runbook.Runbook, a layer above this one: it is not imported).
LaneLauncher = Callable[[Any], None]
ApiProbe = Callable[[str], bool]


@dataclass
class Registry:
    """What the loaded plugins provide."""

    ssh_configs: dict[str, SshConfigResolver] = field(default_factory=dict)
    preparers: list[LanePreparer] = field(default_factory=list)
    book_pages: dict[str, PageRenderer] = field(default_factory=dict)
    launchers: list[LaneLauncher] = field(default_factory=list)
    twin_probes: list[ApiProbe] = field(default_factory=list)
    plugins: list[str] = field(default_factory=list)  # entry point names, for messages

    def ssh_config(self, name: str, resolver: SshConfigResolver) -> None:
        """`ssh_config: NAME` in a lane file means the path `resolver()` returns at connection time."""
        self.ssh_configs[name] = resolver

    def before_run(self, preparer: LanePreparer) -> None:
        """`preparer(lane)` runs before a runbook acts on a lane (not in a dry run); it decides whether the lane is its
        own."""
        self.preparers.append(preparer)

    def launch_when_down(self, launcher: LaneLauncher) -> None:
        """`launcher(rb)` runs where a runbook needs its lane serving (speed, diagnose): it may launch a lane of its own
        found down, recording that in rb; it decides whether the lane is its own."""
        self.launchers.append(launcher)

    def twin_api(self, probe: ApiProbe) -> None:
        """`probe(api)` says whether the OpenAI-compatible API at that URL is a twin's (its figures are labelled
        twin)."""
        self.twin_probes.append(probe)

    def book_page(self, name: str, render: PageRenderer) -> None:
        """A Markdown page NAME.md in the book (starting with its `# Title`), rendered when the book is built."""
        self.book_pages[name] = render


_loaded: Optional[Registry] = None


def load_registry() -> Registry:
    """Every installed plugin, registered once per process."""
    registry = Registry()
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        point.load()(registry)
        registry.plugins.append(point.name)
    return registry


def registry() -> Registry:
    global _loaded
    if _loaded is None:
        _loaded = load_registry()
    return _loaded


def resolve_ssh_config(value: Optional[str]) -> Optional[Path]:
    """The ssh config file a lane's `ssh_config:` names: a plugin's name, or a path (~ expanded); None = ssh's
    defaults."""
    if not value:
        return None
    resolver = registry().ssh_configs.get(value)
    if resolver is not None:
        return resolver()
    path = Path(value).expanduser()
    if "/" not in value and not path.exists():
        known = ", ".join(sorted(registry().ssh_configs)) or "none"
        raise LanebookError(
            f"ssh_config '{value}' is neither a file nor a plugin's name (plugins' names: {known}; "
            "a plugin missing here may need the package reinstalled: make setup)"
        )
    return path


def prepare_lane(params: LaneParams) -> None:
    """Let every plugin ready the lane before a run (the twin starts itself when a twin lane finds it down)."""
    for preparer in registry().preparers:
        preparer(params)


def launch_lane_if_down(rb: Any) -> None:
    """Let every plugin launch the runbook's lane when it is its own and found down (the twin's, through `launch`)."""
    for launcher in registry().launchers:
        launcher(rb)


def serves_twin(api: str) -> bool:
    """Whether a plugin knows the API at that URL for a twin's, when no lane file says so."""
    return any(probe(api) for probe in registry().twin_probes)
