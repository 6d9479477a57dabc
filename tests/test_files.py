"""lanebook.base.files: a change replaces a file atomically after a backup, and a file an operator names is read with
one
clear line when it cannot be."""

import os
from datetime import datetime, timezone

import pytest
from lanebook.base import files
from lanebook.base.errors import LanebookError


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / ".env.dspark"
    target.write_text("OLD=1\n")
    target.chmod(0o600)

    def crash(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        files.write_atomic(target, "NEW=1\n")
    assert target.read_text() == "OLD=1\n" and sorted(p.name for p in tmp_path.iterdir()) == [".env.dspark"]
    monkeypatch.undo()
    files.write_atomic(target, "NEW=1\n")
    assert target.read_text() == "NEW=1\n" and target.stat().st_mode & 0o777 == 0o600  # the mode is kept


def test_a_backup_copies_the_bytes_and_never_overwrites_an_earlier_one(tmp_path):
    target = tmp_path / "docker-compose.dspark.yml"
    target.write_bytes(b"first\n")
    one = files.backup(target, "20260101T000000Z")
    target.write_bytes(b"second\n")
    two = files.backup(target, "20260101T000000Z")
    assert (one.name, two.name) == (
        "docker-compose.dspark.yml.bak-20260101T000000Z",
        "docker-compose.dspark.yml.bak-20260101T000000Z-2",
    )
    assert (one.read_bytes(), two.read_bytes()) == (b"first\n", b"second\n")


def test_a_file_that_cannot_be_read_is_one_line(tmp_path):
    (tmp_path / "bin.yml").write_bytes(b"a: \x80\n")
    for path, message in [
        (tmp_path / "missing.yml", f"env file not found: {tmp_path / 'missing.yml'}"),
        (tmp_path, f"env file is a directory: {tmp_path}"),
        (tmp_path / "bin.yml", f"env file {tmp_path / 'bin.yml'} is not UTF-8 text (byte 3)"),
    ]:
        with pytest.raises(LanebookError) as exc:
            files.read_text(path, "env file")
        assert str(exc.value) == message


def test_utc_stamp_is_now_in_utc_to_the_second(tmp_path):
    before = datetime.now(timezone.utc).replace(microsecond=0)
    stamp = files.utc_stamp()
    after = datetime.now(timezone.utc)
    assert before <= datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc) <= after
    target = tmp_path / "x"
    target.write_text("1\n")
    assert files.backup(target, stamp).name == f"x.bak-{stamp}"


def test_a_record_id_is_eight_hex_digits_that_yaml_reads_as_text():
    ids = {files.record_id() for _ in range(50)}
    assert len(ids) == 50 and all(len(i) == 8 and i[0] in "abcdef" and int(i, 16) >= 0 for i in ids)


def test_an_exclusive_write_makes_a_new_file_and_never_replaces_one(tmp_path):
    from lanebook.base.files import write_atomic

    path = tmp_path / "new.yaml"
    write_atomic(path, "one\n", 0o644, exclusive=True)
    assert path.read_text() == "one\n" and oct(path.stat().st_mode & 0o777) == "0o644"
    with pytest.raises(FileExistsError):
        write_atomic(path, "two\n", exclusive=True)
    assert path.read_text() == "one\n" and [p.name for p in tmp_path.iterdir()] == ["new.yaml"]  # no temp file left
