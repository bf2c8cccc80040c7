"""``LeaderEpochCache`` against Kafka's ``LeaderEpochFileCache``.

* ``assign(epoch, startOffset)``: a negative epoch or offset is an ``IllegalArgumentException``.  Nothing
  changes unless ``isUpdateNeeded``: the cache is empty, the epoch differs from the latest entry's, or the
  offset is below the latest entry's.  Otherwise ``maybeTruncateNonMonotonicEntries`` drops entries from
  the end while their epoch is >= the new epoch or their start offset is >= the new offset, and the entry
  is added.  Only an assignment that changed the cache writes the checkpoint (``dirty``).
* Loading (the constructor) feeds the checkpoint's entries through the same rule without writing.
* ``truncateFromEnd(endOffset)``: when ``endOffset >= 0`` and the latest entry starts at or after it,
  drops entries from the end while their start offset is >= ``endOffset``; a write only if one went.
* ``truncateFromStart(startOffset)``: drops entries from the front while their start offset is
  <= ``startOffset`` and puts the last one dropped back with ``startOffset`` as its start; a write
  whenever one was dropped, even if it comes back unchanged.
* ``clearAndFlush``: empties the cache and always writes.
"""

from __future__ import annotations

import pytest

from mploader.errors import StartupFailedError
from mploader.recovery.epoch_cache import LeaderEpochCache

THREE = [(1, 0), (2, 5), (3, 10)]


def cache(entries: list[tuple[int, int]] = THREE) -> LeaderEpochCache:
    c = LeaderEpochCache("leader-epoch-checkpoint")
    c.load(entries)
    assert (c.entries, c.dirty) == (list(entries), False)
    return c


# ---- assign ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("epoch,start,after", [
    # the latest epoch again: only a lower start offset replaces it
    (3, 11, THREE),
    (3, 10, THREE),
    (3, 9, [(1, 0), (2, 5), (3, 9)]),
    # a higher epoch: entries starting at or after its offset go
    (4, 11, THREE + [(4, 11)]),
    (4, 10, [(1, 0), (2, 5), (4, 10)]),
    (4, 9, [(1, 0), (2, 5), (4, 9)]),
    (4, 5, [(1, 0), (4, 5)]),
    (4, 4, [(1, 0), (4, 4)]),
    (4, 0, [(4, 0)]),
    # a lower epoch: entries with an epoch at or above it go, whatever their offsets
    (2, 20, [(1, 0), (2, 20)]),
    (2, 6, [(1, 0), (2, 6)]),
    (1, 20, [(1, 20)]),
    (0, 20, [(0, 20)]),
])
def test_assign(epoch: int, start: int, after: list[tuple[int, int]]) -> None:
    c = cache()
    c.assign(epoch, start)
    assert c.entries == after
    assert c.dirty is (after != THREE)
    assert c.latest_epoch == after[-1][0]


def test_assign_to_an_empty_cache() -> None:
    c = cache([])
    assert c.latest_epoch is None
    c.assign(0, 0)
    assert (c.entries, c.dirty, c.latest_epoch) == ([(0, 0)], True, 0)


@pytest.mark.parametrize("epoch,start", [(-1, 0), (0, -1), (-(2**31), 0), (0, -(2**63))])
def test_assign_rejects_a_negative_field(epoch: int, start: int) -> None:
    c = cache()
    with pytest.raises(StartupFailedError) as info:
        c.assign(epoch, start)
    assert info.value.kafka_exception == "IllegalArgumentException"
    assert (c.entries, c.dirty) == (THREE, False)


# ---- loading ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("lines,entries", [
    ([(1, 0), (3, 10), (2, 5)], [(1, 0), (2, 5)]),
    ([(2, 5), (2, 3)], [(2, 3)]),
    ([(2, 5), (2, 7)], [(2, 5)]),
    ([(2, 5), (3, 5)], [(3, 5)]),
    ([(5, 9), (1, 20)], [(1, 20)]),
])
def test_load_applies_the_assign_rule_without_writing(lines: list[tuple[int, int]],
                                                      entries: list[tuple[int, int]]) -> None:
    c = LeaderEpochCache("leader-epoch-checkpoint")
    c.load(lines)
    assert (c.entries, c.dirty) == (entries, False)


@pytest.mark.parametrize("lines", [[(1, 0), (-1, 5)], [(1, -1)]])
def test_load_rejects_a_negative_field(lines: list[tuple[int, int]]) -> None:
    with pytest.raises(StartupFailedError) as info:
        LeaderEpochCache("leader-epoch-checkpoint").load(lines)
    assert info.value.kafka_exception == "IllegalArgumentException"


# ---- truncateFromEnd ----------------------------------------------------------------------------------

@pytest.mark.parametrize("end,after", [
    (11, THREE),
    (10, [(1, 0), (2, 5)]),
    (9, [(1, 0), (2, 5)]),
    (6, [(1, 0), (2, 5)]),
    (5, [(1, 0)]),
    (4, [(1, 0)]),
    (1, [(1, 0)]),
    (0, []),
])
def test_truncate_from_end(end: int, after: list[tuple[int, int]]) -> None:
    c = cache()
    c.truncate_from_end(end)
    assert (c.entries, c.dirty) == (after, after != THREE)


@pytest.mark.parametrize("end", [0, 5, -1])
def test_truncate_from_end_of_an_empty_cache(end: int) -> None:
    c = cache([])
    c.truncate_from_end(end)
    assert (c.entries, c.dirty) == ([], False)


@pytest.mark.parametrize("end", [-1, -(2**63)])
def test_truncate_from_end_below_zero_does_nothing(end: int) -> None:
    c = cache()
    c.truncate_from_end(end)
    assert (c.entries, c.dirty) == (THREE, False)


# ---- truncateFromStart --------------------------------------------------------------------------------

@pytest.mark.parametrize("start,after,dirty", [
    (-1, THREE, False),
    (0, THREE, True),  # (1, 0) is dropped and put back as it was: still a write
    (1, [(1, 1), (2, 5), (3, 10)], True),
    (4, [(1, 4), (2, 5), (3, 10)], True),
    (5, [(2, 5), (3, 10)], True),
    (6, [(2, 6), (3, 10)], True),
    (9, [(2, 9), (3, 10)], True),
    (10, [(3, 10)], True),
    (11, [(3, 11)], True),
    (2**40, [(3, 2**40)], True),
])
def test_truncate_from_start(start: int, after: list[tuple[int, int]], dirty: bool) -> None:
    c = cache()
    c.truncate_from_start(start)
    assert (c.entries, c.dirty) == (after, dirty)


def test_truncate_from_start_below_the_first_entry() -> None:
    c = cache([(4, 7)])
    c.truncate_from_start(6)
    assert (c.entries, c.dirty) == ([(4, 7)], False)
    c.truncate_from_start(7)
    assert (c.entries, c.dirty) == ([(4, 7)], True)


def test_truncate_from_start_of_an_empty_cache() -> None:
    c = cache([])
    c.truncate_from_start(5)
    assert (c.entries, c.dirty) == ([], False)


# ---- clearAndFlush ------------------------------------------------------------------------------------

@pytest.mark.parametrize("entries", [THREE, []])
def test_clear_empties_and_always_writes(entries: list[tuple[int, int]]) -> None:
    c = cache(entries)
    c.clear()
    assert (c.entries, c.dirty, c.latest_epoch) == ([], True, None)
