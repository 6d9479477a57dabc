"""Check a Hugging Face hub model dir in place and print one JSON report (runs ON the node).

Sent over SSH as `python3 - HUB_DIR SHARDS [--sha256 WORKERS] < weights_probe.py`, so verifying a
160 GB tree costs one round trip, not one per file. Standard library only: the node's python3 runs it.
It reads shard headers (a few KiB each), never the weights, unless --sha256 is asked for: then each
shard blob is hashed (in parallel threads; hashlib releases the GIL) against its blob name, which the
hub sets to the file's sha256.
"""

import hashlib
import json
import os
import re
import struct
import sys
import time
from concurrent.futures import ThreadPoolExecutor

SHARD = re.compile(r"^model-(\d+)-of-(\d+)\.safetensors$")
INDEX = "model.safetensors.index.json"
SHA256_NAME = re.compile(r"^[0-9a-f]{64}$")
MAX_HEADER = 100 * 1024 * 1024


def shard_layout(path):
    """(file size, tensor bytes, tensor names) from a safetensors header; raises ValueError when unreadable."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise ValueError("shorter than a safetensors header")
        n = struct.unpack("<Q", raw)[0]
        if n > MAX_HEADER or 8 + n > size:
            raise ValueError("header length %d does not fit the file" % n)
        header = json.loads(f.read(n).decode("utf-8"))
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    data_end = max((v["data_offsets"][1] for v in tensors.values()), default=0)
    tensor_bytes = sum(v["data_offsets"][1] - v["data_offsets"][0] for v in tensors.values())
    if size != 8 + n + data_end:
        raise ValueError("size %d, header says %d" % (size, 8 + n + data_end))
    return size, tensor_bytes, set(tensors)


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(8 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def pick_snapshot(hub, problems):
    """The revision refs/main names, else the only snapshot."""
    snapshots_dir = os.path.join(hub, "snapshots")
    snapshots = sorted(os.listdir(snapshots_dir)) if os.path.isdir(snapshots_dir) else []
    ref = os.path.join(hub, "refs", "main")
    revision = open(ref).read().strip() if os.path.isfile(ref) else None
    if revision in snapshots:
        return revision
    if revision:
        problems.append("refs/main names %s but no such snapshot" % revision)
    if len(snapshots) == 1:
        return snapshots[0]
    problems.append("no snapshot" if not snapshots else "%d snapshots and no usable refs/main" % len(snapshots))
    return None


def check(hub, expected, sha_workers):
    report = {
        "hub_dir": hub,
        "expected_shards": expected,
        "problems": [],
        "incomplete": [],
        "broken_symlinks": [],
        "not_blob_links": [],
        "missing_shards": [],
        "bad_shards": {},
        "shard_files_in_tree": 0,
        "shard_count": 0,
        "revision": None,
        "total_size": None,
        "tensor_bytes": 0,
        "file_bytes": 0,
        "size_basis": None,
        "sha256_checked": 0,
        "sha256_mismatches": [],
    }
    problems = report["problems"]
    if not os.path.isdir(hub):
        problems.append("no model dir at %s" % hub)
        return report
    for root, _dirs, files in os.walk(hub):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, hub)
            if name.endswith(".incomplete"):
                report["incomplete"].append(rel)
            if os.path.islink(path) and not os.path.exists(path):
                report["broken_symlinks"].append(rel)
            if SHARD.match(name):
                report["shard_files_in_tree"] += 1  # what the seed's `find -name 'model-*-of-*.safetensors'` counts
    revision = report["revision"] = pick_snapshot(hub, problems)
    if revision is None:
        return finish(report)
    snapshot = os.path.join(hub, "snapshots", revision)
    blobs = os.path.realpath(os.path.join(hub, "blobs")) + os.sep
    shards = sorted(n for n in os.listdir(snapshot) if SHARD.match(n))
    report["shard_count"] = len(shards)
    index_path = os.path.join(snapshot, INDEX)
    weight_map = {}
    if os.path.exists(index_path):
        index = json.load(open(index_path))
        weight_map = index.get("weight_map", {})
        report["total_size"] = index.get("metadata", {}).get("total_size")
    else:
        problems.append("no %s in the snapshot" % INDEX)
    named = set(weight_map.values())
    report["missing_shards"] = sorted(named - set(shards))
    to_hash = []
    for name in shards:
        path = os.path.join(snapshot, name)
        if not os.path.islink(path) or not os.path.realpath(path).startswith(blobs):
            report["not_blob_links"].append(name)
        if not os.path.exists(path):
            continue  # counted as a broken symlink
        try:
            size, tensor_bytes, tensors = shard_layout(path)
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, OSError) as exc:
            report["bad_shards"][name] = str(exc)
            continue
        absent = sorted(t for t, shard in weight_map.items() if shard == name and t not in tensors)
        if absent:
            report["bad_shards"][name] = "%d tensors of the index missing (e.g. %s)" % (len(absent), absent[0])
        report["file_bytes"] += size
        report["tensor_bytes"] += tensor_bytes
        blob = os.path.basename(os.path.realpath(path))
        if sha_workers and SHA256_NAME.match(blob):
            to_hash.append((name, os.path.realpath(path), blob))
    if to_hash:
        with ThreadPoolExecutor(max_workers=sha_workers) as pool:
            digests = list(pool.map(lambda item: sha256_of(item[1]), to_hash))
        report["sha256_checked"] = len(to_hash)
        report["sha256_mismatches"] = [name for (name, _p, blob), digest in zip(to_hash, digests) if digest != blob]
    return finish(report)


def finish(report):
    """Turn the findings into problem lines (empty = the tree is whole)."""
    problems = report["problems"]
    expected, count = report["expected_shards"], report["shard_count"]
    if report["revision"] is not None and count != expected:
        problems.append("%d shards in the snapshot, expected %d" % (count, expected))
    for key, what in (
        ("incomplete", "*.incomplete files"),
        ("broken_symlinks", "broken symlinks"),
        ("not_blob_links", "snapshot shards that are not links into blobs/"),
        ("missing_shards", "shards the index names but the snapshot lacks"),
        ("bad_shards", "shards whose size does not match their header"),
        ("sha256_mismatches", "blobs whose sha256 differs from their name"),
    ):
        if report[key]:
            problems.append("%d %s" % (len(report[key]), what))
    total = report["total_size"]
    if total is not None and not report["bad_shards"] and not report["missing_shards"] and count == expected:
        # The hub's index counts tensor bytes; some writers count whole files. Either must match exactly.
        basis = {report["tensor_bytes"]: "tensor bytes", report["file_bytes"]: "file bytes"}.get(total)
        report["size_basis"] = basis
        if basis is None:
            problems.append(
                "index total_size %d matches neither tensor bytes %d nor file bytes %d"
                % (total, report["tensor_bytes"], report["file_bytes"])
            )
    return report


def main(argv):
    started = time.time()
    hub, expected = os.path.expanduser(argv[1]), int(argv[2])
    sha_workers = int(argv[4]) if len(argv) > 4 and argv[3] == "--sha256" else 0
    report = check(hub, expected, sha_workers)
    report["seconds_on_node"] = round(time.time() - started, 3)
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv)
