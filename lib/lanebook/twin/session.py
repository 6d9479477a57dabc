"""What a twin node's session runs: the client's command line, with the node's own system paths.

Before bash runs a line, the node session (sshd's ForceCommand, lanebook.twin.nodes) maps each of NODE_PATHS
(/dev/shm, /proc/sys/vm/drop_caches, /etc/systemd/system) to the node's copy under its root (map_paths, run there as
the Perl program perl_mapping gives), wherever it starts a path: unquoted, quoted or inside an `sh -c '...'`
script, globs and all; never as the tail of another path (`$HOME/dev/shm`) or the prefix of another name
(`/dev/shmx`). The root is spelt with [A-Za-z0-9_./-] only (else an alias symlink), so mapping never changes how a
line is quoted or split. A line leaving for another node over ssh (the node's `ssh` shim) gets the real paths back.
Not mapped: paths a program builds or reads from a file or stdin, an interactive shell, sftp.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path
from typing import Optional

NODE_PATHS = ("/dev/shm", "/proc/sys/vm/drop_caches", "/etc/systemd/system")
SAFE_PATH = re.compile(r"/[A-Za-z0-9_./-]*")
ALIAS_DIR = Path("/tmp")
SSH = "/usr/bin/ssh"
# Starts a path: not preceded by a character of a path or a variable; not followed by one of a name.
_BEFORE, _AFTER = r"[\w./~$-]", r"[\w.-]"
_NODE_PATH_RE = re.compile(rf"(?<!{_BEFORE})(" + "|".join(re.escape(p) for p in NODE_PATHS) + rf")(?!{_AFTER})")


def mapped_root(node_root: Path) -> str:
    """The node's root as mapped paths spell it: itself when every character is safe, else an alias symlink."""
    root = str(Path(node_root).resolve())
    if SAFE_PATH.fullmatch(root):
        return root
    alias = ALIAS_DIR / f"lanebook-twin-{os.getuid()}" / hashlib.sha256(root.encode()).hexdigest()[:16]
    alias.parent.mkdir(mode=0o700, exist_ok=True)
    if not (alias.is_symlink() and os.readlink(alias) == root):
        alias.unlink(missing_ok=True)
        alias.symlink_to(root)
    return str(alias)


def map_paths(command: str, root: str) -> str:
    """The command line with every node path moved under `root` (see the module docstring)."""
    if not SAFE_PATH.fullmatch(root):
        raise ValueError(f"not a mapping root (characters outside [A-Za-z0-9_./-]): {root!r}")
    return _NODE_PATH_RE.sub(lambda match: root + match.group(1), command)


def unmap_paths(text: str, root: str) -> str:
    """Undo map_paths: this node's mapped paths back to the real ones, for a command bound for another node."""
    for path in NODE_PATHS:
        text = text.replace(root + path, path)
    return text


def perl_mapping() -> str:
    """map_paths as a Perl program for the node session, `perl -e PROGRAM ROOT COMMAND`: it prints COMMAND mapped,
    or exits 1 for a root map_paths refuses. A node's sessions run it before bash reads their line, where starting
    Python each time would cost tens of ms of CPU; the pattern is this module's."""
    before = _BEFORE.replace("$", "\\$")  # in a Perl pattern, `$` followed by a name would interpolate a variable
    paths = "|".join(re.escape(p) for p in NODE_PATHS)
    return (
        rf"exit 1 unless $ARGV[0] =~ m{{\A{SAFE_PATH.pattern}\z}}; $_ = $ARGV[1]; "
        rf"s{{(?<!{before})({paths})(?!{_AFTER})}}{{$ARGV[0]$1}}g; print"
    )


def main(argv: Optional[list[str]] = None) -> int:
    """`ssh ARGS...` runs ssh with the args unmapped (the node's ssh shim)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    root = os.environ.get("LANEBOOK_NODE_MAPPED_ROOT", "")
    if argv[:1] == ["ssh"] and root:
        config = str(Path(os.environ["HOME"]) / ".ssh" / "config")
        os.execv(SSH, ["ssh", "-F", config, *(unmap_paths(arg, root) for arg in argv[1:])])
    print("usage: python -m lanebook.twin.session ssh ARGS... (on a twin node)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
