"""Smoke-level checks of the format layer against the constants FORMATS.md gives."""

from crc32c import crc32c

from mploader.format import legacy, records, snapshot


def test_crc32c_test_vector():
    assert crc32c(bytes(4)) == 0x48674BC7


def test_canonical_sizes():
    b = records.build_batch(0, records.simple_records([b"test"]), partition_leader_epoch=0)
    assert len(b) == 72  # 68 + k, FORMATS.md §5
    assert len(records.build_end_txn_marker_batch(0, 1, 0, True)) == 78
    assert len(legacy.build_message(0, b"v" * 7, magic=1)) == 34 + 7
    assert len(legacy.build_message(0, b"v" * 7, magic=0)) == 26 + 7


def test_empty_snapshot_bytes():
    assert snapshot.snapshot_bytes([]) == bytes.fromhex("000148674bc700000000")
