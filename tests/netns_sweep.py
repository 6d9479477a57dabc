"""Stop every process left in this network namespace (tests/netns-python runs it once its pytest-xdist worker has
exited): processes outlive the namespace's creator, and nothing the suite started may stay running. Each one
stopped is named on stderr, since the suite's own teardown should have stopped it."""

import os
import signal
import sys
import time

HERE = os.readlink("/proc/self/ns/net")
SPARED = {os.getpid(), os.getppid()}  # this sweep and the wrapper's shell, which exits after it


def left() -> dict[int, str]:
    """pid -> command line of every other process in this namespace."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in SPARED:
            continue
        try:
            if os.readlink(f"/proc/{name}/ns/net") == HERE:
                with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                    found[int(name)] = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()[:100]
        except OSError:
            continue  # gone meanwhile, or a zombie
    return found


def main() -> None:
    stray = left()
    if not stray:
        return
    print(
        f"netns-python: stopping what the worker left running: {'; '.join(f'{p} {c}' for p, c in stray.items())}",
        file=sys.stderr,
        flush=True,
    )
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in stray:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3.0
        while (stray := left()) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not stray:
            return


main()
