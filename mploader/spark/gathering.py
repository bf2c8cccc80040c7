"""One Spark job for a whole fleet: the brokers' calls of one phase gathered into one call.

A fleet run (:mod:`mploader.spark.fleet`) loads or verifies every broker with the single-host functions, each in
a thread of the driver.  Where each broker would start a Spark job of its own (its partitions' recovery, its
segments' audits), it takes its :class:`Seat` at a :class:`Gathering` instead::

    broker threads (load_logs / verify_logs)        the gathering
    ----------------------------------------        -------------
    preflight, plan (each its own)
    seat.submit(work)  ─────────────────────────►   waits until every seated broker has submitted
      (waits)                                         or left (a broker Kafka refuses to start, one
    seat.submit(work)  ─────────────────────────►     with nothing to load)
      (waits)                                       the last to arrive runs ``run(all work)``:
                                                      one Spark job
    its own answer ◄────────────────────────────    each seat's answer (its work's results)
    finish (each its own)                           (the job's error: raised in every seat)

A seat that submits again waits for the next round, with the seats still there.  A seat leaves when its
broker is done (:meth:`Seat.close`, idempotent), submitted or not, so that no round waits for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
A = TypeVar("A")


class Gathering(Generic[T, A]):
    """``seats`` brokers' calls of one phase, served by one ``run`` per round (see the module docstring).
    ``run`` is given every waiting seat's work by seat number, and answers each seat's answer by its number."""

    def __init__(self, seats: int, run: Callable[[dict[int, T]], dict[int, A]]) -> None:
        self._run = run
        self._free = list(range(seats - 1, -1, -1))
        self._present = seats  # seats not yet closed
        self._waiting: dict[int, T] = {}
        self._answers: dict[int, A | BaseException] = {}
        self._cond = threading.Condition()
        self.rounds = 0  # the runs so far (one Spark job each)
        self._cancelled: BaseException | None = None

    def seat(self) -> Seat[T, A]:
        with self._cond:
            return Seat(self, self._free.pop())

    def cancel(self, error: BaseException) -> None:
        """No round runs from now on: the seats waiting and those that submit later raise ``error`` (Ctrl-C)."""
        with self._cond:
            self._cancelled = error
            for n in self._waiting:
                self._answers[n] = error
            self._waiting = {}
            self._cond.notify_all()

    def _submit(self, number: int, work: T) -> A:
        with self._cond:
            if self._cancelled is not None:
                raise self._cancelled
            self._waiting[number] = work
            self._maybe_run()
            while number not in self._answers:
                self._cond.wait()
            answer = self._answers.pop(number)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def _leave(self) -> None:
        with self._cond:
            self._present -= 1
            self._maybe_run()

    def _maybe_run(self) -> None:
        """With the lock held: once every present seat waits, the round runs in this thread (the last to come)."""
        if not self._waiting or len(self._waiting) < self._present:
            return
        waiting, self._waiting = self._waiting, {}
        self._cond.release()  # the job runs without the lock: the seats it serves wait, the others may leave
        try:
            answers: dict[int, A] | BaseException = self._run(waiting)
        except BaseException as e:  # noqa: BLE001 - every waiting seat raises it
            answers = e
        finally:
            self._cond.acquire()
        self.rounds += 1
        for n in waiting:
            self._answers[n] = answers if isinstance(answers, BaseException) else answers[n]
        self._cond.notify_all()


class Seat(Generic[T, A]):
    """One broker's place at a :class:`Gathering`: :meth:`submit` its work and wait for its answer;
    :meth:`close` when the broker is done (a context manager)."""

    def __init__(self, gathering: Gathering[T, A], number: int) -> None:
        self._gathering, self.number = gathering, number
        self._closed = False

    def submit(self, work: T) -> A:
        if self._closed:
            raise RuntimeError("this seat was closed")
        return self._gathering._submit(self.number, work)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._gathering._leave()

    def __enter__(self) -> Seat[T, A]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Gathering", "Seat"]
