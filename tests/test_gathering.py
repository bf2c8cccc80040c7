"""mploader.spark.gathering: many threads' calls of one phase served by one call (no Spark needed)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from mploader.spark.gathering import Gathering, Seat

pytestmark = pytest.mark.quick


class Calls:
    """A gathering's run that doubles every number, remembering what each call was given."""

    def __init__(self) -> None:
        self.given: list[dict[int, list[int]]] = []

    def __call__(self, work: dict[int, list[int]]) -> dict[int, list[int]]:
        self.given.append(dict(work))
        return {seat: [2 * x for x in xs] for seat, xs in work.items()}


def test_every_seat_in_one_call_and_each_gets_its_own_answer() -> None:
    calls = Calls()
    gathering: Gathering[list[int], list[int]] = Gathering(5, calls)

    def broker(k: int) -> list[int]:
        with gathering.seat() as seat:
            return seat.submit(list(range(k)))

    with ThreadPoolExecutor(5) as threads:
        answers = list(threads.map(broker, range(5)))
    assert answers == [[2 * x for x in range(k)] for k in range(5)]
    assert len(calls.given) == 1 and gathering.rounds == 1
    assert sorted(len(xs) for xs in calls.given[0].values()) == [0, 1, 2, 3, 4]


def test_a_seat_that_leaves_without_submitting_is_not_waited_for() -> None:
    calls = Calls()
    gathering: Gathering[list[int], list[int]] = Gathering(3, calls)
    left = threading.Event()

    def broker(k: int) -> list[int] | None:
        with gathering.seat() as seat:
            if k == 0:  # e.g. a broker Kafka refuses to start: it leaves once the others wait
                left.wait(5)
                return None
            if k == 2:
                left.set()
            return seat.submit([k])

    with ThreadPoolExecutor(3) as threads:
        answers = list(threads.map(broker, range(3)))
    assert answers == [None, [2], [4]] and len(calls.given) == 1 and len(calls.given[0]) == 2


def test_the_run_waits_for_every_seat_before_it_starts() -> None:
    calls = Calls()
    gathering: Gathering[list[int], list[int]] = Gathering(2, calls)
    first = gathering.seat()
    answer: list[list[int]] = []
    waiter = threading.Thread(target=lambda: answer.append(first.submit([1])))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and calls.given == []  # the second seat has neither submitted nor left
    second = gathering.seat()
    second.close()
    waiter.join(5)
    assert answer == [[2]] and len(calls.given) == 1
    first.close()


def test_a_failed_run_raises_in_every_waiting_seat() -> None:
    def fail(work: dict[int, list[int]]) -> dict[int, list[int]]:
        raise RuntimeError(f"the job failed ({len(work)} seats)")

    gathering: Gathering[list[int], list[int]] = Gathering(3, fail)

    def broker(k: int) -> str:
        with gathering.seat() as seat:
            try:
                seat.submit([k])
            except RuntimeError as e:
                return str(e)
            return "answered"

    with ThreadPoolExecutor(3) as threads:
        assert list(threads.map(broker, range(3))) == ["the job failed (3 seats)"] * 3


def test_a_second_round_gathers_the_seats_still_there() -> None:
    calls = Calls()
    gathering: Gathering[list[int], list[int]] = Gathering(3, calls)

    def broker(k: int) -> list[list[int]]:
        with gathering.seat() as seat:
            rounds = [seat.submit([k])]
            if k > 0:  # two brokers have a second phase; the third is done
                rounds.append(seat.submit([10 * k]))
            return rounds

    with ThreadPoolExecutor(3) as threads:
        answers = list(threads.map(broker, range(3)))
    assert answers == [[[0]], [[2], [20]], [[4], [40]]]
    assert [sorted(c) for c in calls.given] == [[0, 1, 2], [1, 2]] and gathering.rounds == 2


def test_a_closed_seat_cannot_submit() -> None:
    gathering: Gathering[list[int], list[int]] = Gathering(1, Calls())
    seat: Seat[list[int], list[int]] = gathering.seat()
    seat.close()
    seat.close()  # idempotent: the seat leaves once
    with pytest.raises(RuntimeError, match="closed"):
        seat.submit([1])


def test_a_cancelled_gathering_answers_its_waiting_seats_and_runs_no_more() -> None:
    calls = Calls()
    gathering: Gathering[list[int], list[int]] = Gathering(2, calls)
    first, second = gathering.seat(), gathering.seat()
    raised: list[BaseException] = []

    def wait() -> None:
        try:
            first.submit([1])
        except KeyboardInterrupt as e:
            raised.append(e)

    waiter = threading.Thread(target=wait)
    waiter.start()
    waiter.join(0.2)
    gathering.cancel(KeyboardInterrupt("Ctrl-C"))
    waiter.join(5)
    assert [str(e) for e in raised] == ["Ctrl-C"]
    with pytest.raises(KeyboardInterrupt):
        second.submit([2])
    assert calls.given == []
