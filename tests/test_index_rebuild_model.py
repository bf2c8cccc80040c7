"""The vectorised index rebuild (``scan.indexes.plan_indexes``) against the sequential reference model.

For random batch tables the model (``tests.index_model``: Kafka's OffsetIndex and TimeIndex,
one append at a time) is driven through the docs/loading.md §7.1 loop of ``LogSegment.recover``; the plan must
give the same offset- and time-index entries, the same failing row (InvalidOffsetException, which Kafka's
recoverLog catches), the same failed final time entry, and the same fatal exception (anything else).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, example, given, settings, strategies as st

from mploader.errors import StartupFailedError
from mploader.format.index import round_down
from mploader.scan import BATCH_TABLE, indexes as indexes_mod
from mploader.scan.draft import index_draft
from mploader.scan.indexes import IndexPlan, plan_indexes
from tests.examples import examples
from tests.index_model import InvalidOffsetException, KafkaIndexError, OffsetIndex, TimeIndex

INT32_MAX = 2**31 - 1
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024


@dataclass
class Outcome:
    offset_entries: list[tuple[int, int]]  # (relative offset, position)
    time_entries: list[tuple[int, int]]  # (timestamp, relative offset)
    failed_at_row: int | None = None
    final_time_failed: bool = False
    fatal: str | None = None  # Kafka exception name


def model_recover(base: int, rows: np.ndarray, interval: int, max_index_size: int) -> Outcome:
    """LogSegment.recover's index part (docs/loading.md §7.1), batch by batch, on the reference model."""
    # recover() resets indexes that exist (an empty file here): entries 0, grown to max_index_size
    oi = OffsetIndex(base, max_index_size, b"")
    ti = TimeIndex(base, max_index_size, b"")
    oi.reset()
    ti.reset()
    out = Outcome([], [])
    max_ts = ti.last_entry  # (-1, base): maxTimestampAndOffsetSoFar read from the empty time index
    valid = last_indexed = 0
    try:
        for i, row in enumerate(rows):
            last_offset, ts = int(row["last_offset"]), int(row["max_timestamp"])
            if ts > max_ts[0]:
                max_ts = (ts, last_offset)
            if valid - last_indexed > interval:
                try:
                    oi.append(last_offset, valid)
                    ti.maybe_append(*max_ts)
                except InvalidOffsetException:
                    out.failed_at_row = i
                    break
                except KafkaIndexError as e:  # a full index: start-up fails, the entries appended so far stay
                    out.failed_at_row, out.fatal = i, e.kafka_exception
                    break
                last_indexed = valid
            valid += int(row["size"])
        else:
            oi.trim_to_valid_size()
            try:
                ti.maybe_append(*max_ts, skip_full_check=True)
            except InvalidOffsetException:
                out.final_time_failed = True
            else:
                ti.trim_to_valid_size()
    except KafkaIndexError as e:
        out.fatal = e.kafka_exception
        return out
    out.offset_entries = [(o - base, p) for o, p in (oi.entry(k) for k in range(oi.entries))]
    out.time_entries = [(t, o - base) for t, o in (ti.entry(k) for k in range(ti.entries))]
    return out


def plan_outcome(base: int, rows: np.ndarray, interval: int, max_index_size: int) -> Outcome:
    offset_slots = round_down(max_index_size, 8) // 8
    time_slots = round_down(max_index_size, 12) // 12
    try:
        plan = plan_indexes(base, rows, offset_slots, time_slots, "seg.log", index_draft(rows, base, interval))
    except StartupFailedError as e:
        return Outcome([], [], fatal=e.kafka_exception)
    return outcome_of(plan)


def outcome_of(plan: IndexPlan) -> Outcome:
    """A plan as the model's outcome: a full index is Kafka's IllegalArgumentException, the entries appended before
    it kept (recover_segment writes them into the reset indexes before start-up fails)."""
    return Outcome(
        [(int(r), int(p)) for r, p in zip(plan.offset_rel, plan.offset_pos)],
        [(int(t), int(r)) for t, r in zip(plan.time_ts, plan.time_rel)],
        plan.failed_at_row, plan.final_time_failed, "IllegalArgumentException" if plan.full is not None else None,
    )


def batch_table(base: int, sizes: list[int], rel_offsets: list[int], timestamps: list[int]) -> np.ndarray:
    rows = np.zeros(len(sizes), BATCH_TABLE)
    rows["size"] = sizes
    rows["position"] = np.concatenate(([0], np.cumsum(sizes)[:-1])) if sizes else []
    rows["last_offset"] = np.asarray(rel_offsets, np.int64) + base
    rows["base_offset"] = rows["last_offset"]
    rows["max_timestamp"] = timestamps
    return rows


@st.composite
def segments(draw):
    base = draw(st.sampled_from([0, 45, 2**40]))
    n = draw(st.integers(0, 40))
    sizes = draw(st.lists(st.integers(14, 3000), min_size=n, max_size=n))
    disorder = draw(st.booleans())  # sometimes let last offsets repeat or go back
    step = st.integers(-4, 5) if disorder else st.integers(1, 5)
    rel = draw(st.integers(0, 3))
    rel_offsets = []
    for _ in range(n):
        rel_offsets.append(rel)
        rel = min(INT32_MAX, max(0, rel + draw(step)))
    if n and draw(st.booleans()):  # near the top of the relative range
        top = INT32_MAX - max(rel_offsets)
        rel_offsets = [r + top for r in rel_offsets]
    ts = st.one_of(st.integers(0, 60), st.just(-1), st.integers(-3, -2), st.integers(2**40, 2**40 + 3))
    timestamps = draw(st.lists(ts, min_size=n, max_size=n))
    interval = draw(st.one_of(st.integers(0, 5000), st.sampled_from([0, 1, 13, 4096])))
    # small sizes make the indexes fill up; 4096 never fills with <= 40 batches and behaves as the 10 MiB
    # default (which is slow to allocate 400 times; the examples below use it)
    max_index_size = draw(st.one_of(st.just(4096), st.integers(4, 100)))
    return base, sizes, rel_offsets, timestamps, interval, max_index_size


def check(base, sizes, rel_offsets, timestamps, interval, max_index_size):
    """The plan is the model's whichever way it is made: vectorised, or Kafka's checks one entry at a time
    (the way a plan of fewer than SEQUENTIAL_BELOW entries, or one where an append fails, is made)."""
    rows = batch_table(base, sizes, rel_offsets, timestamps)
    expected = model_recover(base, rows, interval, max_index_size)
    default = indexes_mod.SEQUENTIAL_BELOW
    try:
        for below in (0, 10**9):
            indexes_mod.SEQUENTIAL_BELOW = below
            assert plan_outcome(base, rows, interval, max_index_size) == expected, below
    finally:
        indexes_mod.SEQUENTIAL_BELOW = default


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments())
# full offset index meets a non-increasing offset: Kafka's full check comes first (IllegalArgument, fatal)
@example((0, [100] * 5, [0, 1, 2, 3, 3], [-1] * 5, 0, 24))
# the final time entry goes back in offset (InvalidOffsetException after the loop)
@example((0, [100, 10, 100], [10, 20, 15], [5, 50, 60], 50, DEFAULT_MAX_INDEX_SIZE))
# a time index with no slot for its final entry (segment.index.bytes 4..11): BufferOverflowException
@example((0, [100], [0], [5], 0, 8))
def test_plan_indexes_matches_sequential_model(seg):
    check(*seg)


def test_known_cases_by_hand():
    # interval 0: every batch but the first is indexed; running max timestamp, holder = first batch reaching it
    out = model_recover(10, batch_table(10, [100, 100, 100, 100], [0, 2, 4, 6], [7, 5, 9, 9]), 0,
                        DEFAULT_MAX_INDEX_SIZE)
    assert out == Outcome([(2, 100), (4, 200), (6, 300)], [(7, 0), (9, 4)])
    check(10, [100, 100, 100, 100], [0, 2, 4, 6], [7, 5, 9, 9], 0, DEFAULT_MAX_INDEX_SIZE)

    cases = {
        # offset index: the repeated last offset 1 fails at row 2 (docs/loading.md §7.1; scenario 39)
        (0, (100,) * 4, (0, 1, 1, 2), (-1,) * 4, 0, DEFAULT_MAX_INDEX_SIZE): Outcome([(1, 100)], [], 2),
        # time index: row 3 is indexed (offset 30 fine) but the max timestamp is held by offset 15 < 20
        (0, (100, 10, 100, 100), (10, 20, 15, 30), (5, 50, 60, 0), 50, DEFAULT_MAX_INDEX_SIZE):
            Outcome([(20, 100), (30, 210)], [(50, 20)], 3),
        # the same but row 3 not indexed: the final time entry fails, after the loop
        (0, (100, 10, 100), (10, 20, 15), (5, 50, 60), 50, DEFAULT_MAX_INDEX_SIZE):
            Outcome([(20, 100)], [(50, 20)], None, True),
        # full offset index (3 slots) meeting a repeated offset: full comes first, fatal, the 3 entries kept
        (0, (100,) * 5, (0, 1, 2, 3, 3), (-1,) * 5, 0, 24):
            Outcome([(1, 100), (2, 200), (3, 300)], [], 4, fatal="IllegalArgumentException"),
        # segment.index.bytes 8: no time slot at all, so even the final entry has nowhere to go
        (0, (100,), (0,), (5,), 0, 8): Outcome([], [], fatal="BufferOverflowException"),
        # ... and with an indexed batch the normal append finds the time index full first
        # (the offset entry of that batch is in: OffsetIndex.append came first)
        (0, (100, 100), (0, 1), (5, 6), 0, 8): Outcome([(1, 100)], [], 1, fatal="IllegalArgumentException"),
    }
    for (base, sizes, offs, ts, interval, size), expected in cases.items():
        assert model_recover(base, batch_table(base, list(sizes), list(offs), list(ts)), interval, size) == expected
        check(base, list(sizes), list(offs), list(ts), interval, size)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments(), st.integers(0, 40))
# the outcomes the generator rarely or never reaches, through a draft of a longer table
@example((0, [100] * 6, [0, 1, 2, 3, 3, 4], [-1] * 6, 0, 24), 5)  # full offset index, then a repeat: fatal
@example((0, [100, 10, 100, 100], [10, 20, 15, 30], [5, 50, 60, 0], 50, DEFAULT_MAX_INDEX_SIZE), 3)  # final entry
@example((0, [100, 100], [0, 1], [5, 6], 0, 8), 1)  # no slot for the final time entry: BufferOverflowException
def test_a_draft_of_the_whole_scan_serves_any_prefix(seg, cut):
    """Phase 1 drafts the index entries of the whole scan; recovery may apply only a prefix of it (a batch
    whose offset overflows the segment ends it): the draft's rows inside the prefix give the model's outcome."""

    base, sizes, rel_offsets, timestamps, interval, max_index_size = seg
    rows = batch_table(base, sizes, rel_offsets, timestamps)
    prefix = rows[: min(cut, len(rows))]
    expected = model_recover(base, prefix, interval, max_index_size)
    offset_slots = round_down(max_index_size, 8) // 8
    time_slots = round_down(max_index_size, 12) // 12
    try:
        plan = plan_indexes(base, prefix, offset_slots, time_slots, "seg.log", index_draft(rows, base, interval))
    except StartupFailedError as e:
        assert expected.fatal == e.kafka_exception
        return
    assert outcome_of(plan) == expected
