"""Smoke-level checks of the format layer against the constants docs/formats.md gives."""

from crc32c import crc32c

from mploader.format import legacy, records, snapshot


def test_crc32c_test_vector():
    assert crc32c(bytes(4)) == 0x48674BC7


def test_canonical_sizes():
    b = records.build_batch(0, records.simple_records([b"test"]), partition_leader_epoch=0)
    assert len(b) == 72  # 68 + k, docs/formats.md §5
    assert len(records.build_end_txn_marker_batch(0, 1, 0, True)) == 78
    assert len(legacy.build_message(0, b"v" * 7, magic=1)) == 34 + 7
    assert len(legacy.build_message(0, b"v" * 7, magic=0)) == 26 + 7


def test_empty_snapshot_bytes():
    assert snapshot.snapshot_bytes([]) == bytes.fromhex("000148674bc700000000")


# DefaultRecordBatch.incrementSequence evaluated on OpenJDK 17 (int arithmetic, overflow included)
JAVA_LAST_SEQUENCE = [(5, -1, -2147483644), (-5, -3, 2147483640), (-2**31, -1, 2**31 - 1), (2**31 - 1, 1, 0),
                      (2**31 - 3, 5, 2), (-2, 7, 5), (0, -2**31, 0), (100, 2**31 - 1, 99), (-100, -2**31, 2147483548)]


def test_last_sequence_is_java_int_arithmetic():
    import numpy as np
    from hypothesis import given, strategies as st

    for base, delta, java in JAVA_LAST_SEQUENCE:
        assert records.last_sequence(base, delta) == java
    assert records.last_sequence(-1, 5) == -1  # NO_SEQUENCE stays

    int32 = st.integers(-2**31, 2**31 - 1)

    @given(st.lists(st.tuples(int32, int32), min_size=1, max_size=20))
    def vector_equals_scalar(pairs):  # type: ignore[no-untyped-def]
        base, delta = (np.array(c, np.int64) for c in zip(*pairs))
        assert records.last_sequences(base, delta).tolist() == [records.last_sequence(b, d) for b, d in pairs]

    vector_equals_scalar()
