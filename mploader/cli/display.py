"""The progress bars of ``mploader load`` on a terminal (``rich``), drawn from the same figures a harness gets
through ``Progress.update`` (:class:`mploader.progress.DirProgress`).

One row per data dir, and a total row when there are several::

    /data1/kafka  ━━━━━━━━━━━━━━╸━━━━━━━━━━━━━━━  46.7%  1.2 GB / 2.5 GB  410.3 MB/s  ETA 0:03  partitions 11/24

Until a dir's scans are planned its row says ``planning``; a dir that was not planned (a clean dir loaded
in this process) counts by partitions and shows the bytes it scanned.  The bars are redrawn a few times a
second by rich's own thread; the log lines of the command go through the display (above the bars).
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any, TextIO

from mploader.cli.logs import set_log_stream
from mploader.cli.units import format_bytes
from mploader.progress import DirProgress, Progress

REFRESH_PER_SECOND = 2  # a redraw costs ~1.6 ms of CPU (rich lays out a table): 2 a second is ~0.3% of a core


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA -:--"
    s = int(seconds + 0.999)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"ETA {h}:{m:02d}:{s:02d}" if h else f"ETA {m}:{s:02d}"


def row_fields(f: DirProgress) -> dict[str, Any]:
    """The text of a row's columns (also what the tests read)."""
    if not f.planned:
        return {"percent": "", "amount": "planning", "rate": "", "eta": "",
                "partitions": f"logs {f.partitions_done}/{f.partitions_total}"}
    amount = (f"{format_bytes(f.bytes_done)}/{format_bytes(f.bytes_total)}" if f.bytes_total is not None
              else f"{format_bytes(f.bytes_done)} scanned")
    rate = f.rate_bytes_per_second
    return {"percent": f"{f.percent:3.0f}%", "amount": amount,
            "rate": "" if rate is None else f"{format_bytes(rate)}/s",
            "eta": format_eta(f.eta_seconds) if not f.finished else f"done {f.elapsed_seconds:.1f}s",
            "partitions": f"logs {f.partitions_done}/{f.partitions_total}"}


def total_of(figures: list[DirProgress]) -> DirProgress:
    """The figures of all data dirs together: sums, the longest elapsed time; bytes to do are known when
    every dir was planned."""
    totals = [f.bytes_total for f in figures]
    segments = [f.segments_total for f in figures]
    return DirProgress(
        "total", sum(f.partitions_done for f in figures), sum(f.partitions_total for f in figures),
        sum(f.segments_done for f in figures), None if None in segments else sum(s or 0 for s in segments),
        sum(f.bytes_done for f in figures), None if None in totals else sum(t or 0 for t in totals),
        max((f.elapsed_seconds for f in figures), default=0.0), all(f.planned for f in figures))


class LoadDisplay(Progress):
    """The bars on ``stream`` (a terminal) from :meth:`start` to :meth:`close`.  :meth:`update` only keeps the
    latest figures of a dir (a loading thread pays a dict store per event); rich's refresh thread draws them."""

    def __init__(self, stream: TextIO):
        from rich.console import Console
        from rich.progress import BarColumn, Progress as Bars, TextColumn

        self._lock = threading.Lock()
        self._tasks: dict[str, Any] = {}
        self._figures: dict[str, DirProgress] = {}
        self._changed = False
        self._total_task: Any = None
        self._log_stream: TextIO | None = None
        self._started = False
        sync = self._sync

        class _Bars(Bars):
            def get_renderables(self) -> Any:  # every redraw: the latest figures first
                sync()
                yield from super().get_renderables()

        self.console = Console(file=stream)
        # 80 columns hold a row with a 10-character bar and a label of 10; the label takes what is left, up to 40
        self._label_width = max(10, min(40, self.console.width - 70))
        self.bars = _Bars(
            TextColumn("{task.description}"), BarColumn(bar_width=10 if self.console.width < 120 else 30),
            TextColumn("{task.fields[percent]}"),
            TextColumn("{task.fields[amount]}"), TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[eta]}"),
            TextColumn("{task.fields[partitions]}"),
            console=self.console, refresh_per_second=REFRESH_PER_SECOND, redirect_stdout=False,
            redirect_stderr=False)

    def start(self, partitions_per_dir: dict[str, int]) -> None:
        from rich.file_proxy import FileProxy

        with self._lock:
            width = min(self._label_width, max((len(d) for d in [*partitions_per_dir, "total"]), default=0))
            for d, n in partitions_per_dir.items():
                self._figures[d] = DirProgress(d, 0, n, 0, None, 0, None, 0.0, planned=False)
                self._tasks[d] = self.bars.add_task(_label(d, width), total=None, start=False)
            if len(partitions_per_dir) > 1:
                self._total_task = self.bars.add_task(_label("total", width), total=None, start=False)
            self._changed = True
            self._started = True
        self.bars.start()
        self._log_stream = set_log_stream(FileProxy(self.console, self.console.file))  # type: ignore[arg-type]

    def update(self, figures: DirProgress) -> None:
        with self._lock:
            before = self._figures.get(figures.data_dir)
            if before is None or not self._started:
                return
            self._figures[figures.data_dir] = figures
            self._changed = True
            # the last dir's totals are known: show them all now, not at the next redraw
            planned_now = not before.planned and figures.planned and all(f.planned for f in self._figures.values())
        if planned_now:
            self.bars.refresh()

    def _sync(self) -> None:
        """The latest figures into rich's tasks (called by rich before each redraw)."""
        with self._lock:
            if not self._changed:
                return
            self._changed = False
            figures = dict(self._figures)
        for d, task in self._tasks.items():
            self._draw(task, figures[d])
        if self._total_task is not None:
            self._draw(self._total_task, total_of(list(figures.values())))

    def _draw(self, task: Any, f: DirProgress) -> None:
        self.bars.update(task, total=1.0 if f.planned else None, completed=f.fraction, **row_fields(f))

    def close(self) -> None:
        with self._lock:
            if not self._started:
                return
            self._started = False
            self._changed = True
        self.bars.stop()  # draws the last figures
        if self._log_stream is not None:
            set_log_stream(self._log_stream)
            self._log_stream = None


def _label(data_dir: str, width: int) -> str:
    text = data_dir if len(data_dir) <= width else "…" + data_dir[-(width - 1):]
    return text.ljust(width)


def terminal_display(args: argparse.Namespace) -> LoadDisplay | None:
    """The bars on stderr when it is a terminal and neither ``--json`` nor ``--no-progress`` was given (rich is
    imported only then, by :class:`LoadDisplay`)."""
    if args.json or args.no_progress or not sys.stderr.isatty():
        return None
    return LoadDisplay(sys.stderr)


__all__ = ["LoadDisplay", "format_eta", "row_fields", "terminal_display", "total_of"]
