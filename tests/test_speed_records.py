"""The records' vocabulary: which chunk kinds open a decode window, and what can stamp a record's chunks."""

from lanebook.speed.records import (
    CONTENT,
    CONTENT_KINDS,
    OTHER,
    REASONING,
    ROLE,
    STAMP_KERNEL,
    STAMP_LOOP,
    TOOL_CALLS,
    USAGE,
    RequestRecord,
    WaveRecord,
)


def test_only_chunks_carrying_text_open_or_close_a_window():
    assert CONTENT_KINDS == {CONTENT, REASONING, TOOL_CALLS}
    assert not {ROLE, USAGE, OTHER} & CONTENT_KINDS


def test_a_record_names_its_stamp_source_only_once_a_stream_was_read():
    record = RequestRecord(index=0, t_sent=1.5)
    assert record.stamp_source is None and record.chunks == [] and record.t_done is None
    assert STAMP_KERNEL != STAMP_LOOP
    wave = WaveRecord(1, 1, [record])
    assert wave.idle_wait_s is None and wave.spec_decode is None
