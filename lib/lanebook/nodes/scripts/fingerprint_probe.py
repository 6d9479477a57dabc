"""Fingerprint a lane's checkout and its hub model dir in place and print one JSON report (runs ON the node).

Sent over SSH as `python3 - CHECKOUT HUB_DIR < fingerprint_probe.py`, one round trip per node. Standard library
only: the node's python3 runs it. Each tree becomes a manifest, one line per entry in path order: a directory
by its mode, a symlink by its target, a file by its mode, size, mtime and content. The checkout's files are
read and hashed (a checkout is small). The weights are not read: a blob's name under blobs/ is its content's
hash (sha256 for the shards), so a blob is its name, size and mtime; the few other files (refs/main) are hashed.
The tree's fingerprint is the sha256 of its manifest, so any file added, removed, rewritten or touched changes it.
"""

import hashlib
import json
import os
import stat
import sys
import time


def content_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def entry_line(root, rel, hash_file):
    """The manifest line of one entry, and (size, mtime_ns) for a file (else None)."""
    path = os.path.join(root, rel)
    st = os.lstat(path)
    mode = "%o" % stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return "l %s -> %s" % (rel, os.readlink(path)), None
    if stat.S_ISDIR(st.st_mode):
        return "d %s %s" % (rel, mode), None
    if not stat.S_ISREG(st.st_mode):
        return "o %s %s" % (rel, mode), None
    content = content_sha256(path) if hash_file(rel) else "-"
    return "f %s %s %d %d %s" % (rel, mode, st.st_size, st.st_mtime_ns, content), (st.st_size, st.st_mtime_ns)


def tree_fingerprint(root, hash_file):
    """{"path", "exists", "sha256", "entries", "bytes", "newest"} for the tree at root (symlinks not followed)."""
    report = {"path": root, "exists": os.path.isdir(root), "sha256": None, "entries": 0, "bytes": 0, "newest": None}
    if not report["exists"]:
        return report
    rels = []
    for current, dirs, files in os.walk(root):
        dirs.sort()
        for name in dirs + sorted(files):
            rels.append(os.path.relpath(os.path.join(current, name), root))
    digest, newest = hashlib.sha256(), (-1, None)
    for rel in sorted(rels):
        line, sized = entry_line(root, rel, hash_file)
        digest.update(line.encode("utf-8", "surrogateescape") + b"\n")
        if sized:
            report["bytes"] += sized[0]
            newest = max(newest, (sized[1], rel))
    report.update(sha256=digest.hexdigest(), entries=len(rels), newest=newest[1])
    return report


def main(argv):
    checkout, hub_dir = (os.path.expanduser(a) for a in argv[1:3])
    started = time.monotonic()
    report = {
        "checkout": tree_fingerprint(checkout, lambda rel: True),
        "weights": tree_fingerprint(hub_dir, lambda rel: not rel.startswith("blobs" + os.sep)),
    }
    report["seconds_on_node"] = round(time.monotonic() - started, 3)
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv)
