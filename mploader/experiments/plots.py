"""The PNG figures of an experiment (matplotlib, the ``experiments`` extra; no display needed), each with the data
it draws written beside it as JSON (``<figure>.json``: what a reader or a test checks without reading pixels).

* :func:`plot_points`: panels of a figure against mploader's choice (the worker count, "auto", "adaptive",
  ``--partition-workers``) and Kafka's thread count, one series per device class (or per mode and cache); a
  point is the median of its rounds with a bar from the lowest to the highest round (:mod:`.points`), hollow
  where a round ran on a busy host (:mod:`.host_load`); the fixed worker counts are joined by a line;
* :func:`plot_timeline`: one run over time: the device's %util (and the share of a throttle's limit), read
  MB/s, CPU per core with the load's and other processes', the memory of the parent, the workers and the
  shared-memory blocks;
* :func:`plot_worker_counts`: the adaptive runs' worker counts over time, per data dir.

Every figure carries the report's subtitle (the data's size, the CPUs, the device profiles) under its title;
each function takes the figure's path and that subtitle after its data (bound first: a report's ``Draw``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mploader.experiments.points import Figure, Point, points
from mploader.experiments.run import RunResult

BUSY_NOTE = "hollow: a round ran on a busy host"
LOG_SCALE_SPAN = 10.0  # a panel whose values span more than this factor gets a log scale


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    ylabel: str
    runs: Sequence[RunResult]
    value: Figure


def _pyplot() -> Any:
    """matplotlib's pyplot, drawing to files only (imported here: the extra is optional)."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError("the plots need matplotlib: pip install 'mploader[experiments]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def data_path(png: Path) -> Path:
    """Where a figure's data goes."""
    return png.with_suffix(".json")


def _write_data(png: Path, data: dict[str, Any]) -> None:
    data_path(png).write_text(json.dumps(data, indent=1) + "\n")


def _series_of(pts: Sequence[Point], value: Figure, series: Callable[[Point], str]) -> list[dict[str, Any]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for p in pts:
        spread = p.spread(value)
        if spread is not None:
            out.setdefault(series(p), []).append({
                "x": p.spec.choice, **spread.to_json(), "rounds": len(p.runs), "runs": [r.id for r in p.runs],
                "busy": bool(p.busy_rounds)})
    return [{"label": label, "points": rows} for label, rows in out.items()]


def points_data(panels: Sequence[Panel], series: Callable[[Point], str], title: str,
                subtitle: str) -> dict[str, Any]:
    """What :func:`plot_points` draws: per panel, per series, each point's median, min and max."""
    shown: list[dict[str, Any]] = [
        {"title": p.title, "ylabel": p.ylabel, "series": _series_of(points(p.runs), p.value, series)} for p in panels]
    choices = list(dict.fromkeys(pt["x"] for panel in shown for s in panel["series"] for pt in s["points"]))
    return {"title": title, "subtitle": subtitle, "x": choices, "busy_note": BUSY_NOTE, "panels": shown}


def _draw_series(ax: Any, color: str, label: str, rows: list[dict[str, Any]], x: dict[str, float]) -> None:
    xs = [x[r["x"]] for r in rows]
    med = [r["median"] for r in rows]
    yerr = [[r["median"] - r["min"] for r in rows], [r["max"] - r["median"] for r in rows]]
    ax.errorbar(xs, med, yerr=yerr, fmt="none", ecolor=color, elinewidth=1.2, capsize=4)
    fixed = [(xv, m) for xv, m, r in zip(xs, med, rows) if r["x"].startswith("N=")]
    if fixed:
        ax.plot([f[0] for f in fixed], [f[1] for f in fixed], color=color, linewidth=1.2)
    for xv, m, r in zip(xs, med, rows):
        ax.plot([xv], [m], marker="o", markersize=6, color=color, markerfacecolor="none" if r["busy"] else color)
    ax.plot([], [], marker="o", color=color, label=label)  # the legend's entry, once


def _scale(ax: Any, rows: list[dict[str, Any]]) -> None:
    from matplotlib import ticker

    if not rows:
        ax.text(0.5, 0.5, "no figure (no block device)", ha="center", transform=ax.transAxes, color="grey")
        return
    low = min((r["min"] for r in rows if r["min"] > 0), default=0.0)
    high = max((r["max"] for r in rows), default=0.0)
    if low > 0 and high / low > LOG_SCALE_SPAN:
        ax.set_yscale("log")
        plain = ticker.FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    else:
        ax.set_ylim(bottom=0)


def plot_points(panels: Sequence[Panel], series: Callable[[Point], str], path: Path, subtitle: str, title: str,
                columns: int = 2) -> None:
    data = points_data(panels, series, title, subtitle)
    _write_data(path, data)
    plt = _pyplot()
    rows_n = (len(panels) + columns - 1) // columns
    fig, axes = plt.subplots(rows_n, columns, figsize=(6.6 * columns, 4.4 * rows_n + 0.8), squeeze=False)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labels = list(dict.fromkeys(s["label"] for panel in data["panels"] for s in panel["series"]))
    colors = {label: cycle[i % len(cycle)] for i, label in enumerate(labels)}
    for ax, panel in zip(axes.flat, data["panels"]):
        n = len(panel["series"])
        for k, s in enumerate(panel["series"]):  # each series a little aside, so that the bars do not hide each other
            shift = (k - (n - 1) / 2) * 0.08
            _draw_series(ax, colors[s["label"]], s["label"], s["points"],
                         {c: i + shift for i, c in enumerate(data["x"])})
        _scale(ax, [r for s in panel["series"] for r in s["points"]])
        ax.set_xticks(range(len(data["x"])), data["x"], rotation=30, ha="right", fontsize=8)
        ax.set_title(panel["title"], fontsize=10)
        ax.set_ylabel(panel["ylabel"])
        ax.grid(alpha=0.3)
        if n:
            ax.plot([], [], marker="o", linestyle="none", color="grey", markerfacecolor="none", label=BUSY_NOTE)
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    _titles(fig, title, subtitle)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _titles(fig: Any, title: str, subtitle: str) -> None:
    lines = subtitle.count("\n") + 2
    fig.suptitle(f"{title}\n{subtitle}", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.15 * lines / fig.get_figheight()))


def plot_timeline(run: RunResult, path: Path, subtitle: str, title: str) -> None:
    t = [s.t for s in run.samples]
    cores = max((len(s.cpu_percent) for s in run.samples), default=0)
    dev = run.device
    data: dict[str, Any] = {
        "title": title, "subtitle": subtitle, "run": run.id, "t": t,
        "util": [s.disks[dev].util_percent if dev and dev in s.disks else None for s in run.samples],
        "read_mb_s": [s.disks[dev].read_bytes_per_s / 1e6 if dev and dev in s.disks else None for s in run.samples],
        "throttle_use": [s.throttle_use.get(dev) if dev else None for s in run.samples],
        "disk": run.disk,
        "disk_util": [s.disks[run.disk].util_percent if run.disk and run.disk in s.disks else None
                      for s in run.samples],
        "cpu_percent": [s.cpu_percent for s in run.samples],
        "load_cpu_percent_of_all": [s.load_cpu_percent / max(1, cores) for s in run.samples],
        "others_cpu_percent_of_all": [None if s.others_cpu_percent is None else max(0.0, s.others_cpu_percent)
                                      / max(1, cores) for s in run.samples],
        "rss_parent_mb": [(s.rss_parent or 0) / 1e6 for s in run.samples],
        "rss_workers_mb": [sum(s.rss_workers.values()) / 1e6 for s in run.samples],
        "shm_mb": [s.shm_bytes / 1e6 for s in run.samples]}
    _write_data(path, data)
    plt = _pyplot()
    fig, (io, cpu, mem) = plt.subplots(3, 1, figsize=(9, 8.6), sharex=True)
    _timeline_io(io, run, data)
    for c in range(cores):
        cpu.plot(t, [s[c] if c < len(s) else None for s in data["cpu_percent"]], label=f"cpu{c}", linewidth=0.8)
    cpu.plot(t, data["load_cpu_percent_of_all"], label="the load's processes", color="black", linestyle="--")
    cpu.plot(t, data["others_cpu_percent_of_all"], label="other processes", color="tab:red", linestyle=":")
    cpu.set_ylabel("CPU busy % (of all cores)")
    cpu.set_ylim(0, 105)
    cpu.legend(loc="upper left", fontsize=7)
    mem.plot(t, data["rss_parent_mb"], label="parent RSS")
    mem.plot(t, data["rss_workers_mb"], label="workers' RSS (sum)")
    mem.plot(t, data["shm_mb"], label="shared memory blocks")
    mem.set_ylabel("MB")
    mem.set_xlabel("seconds since the process started")
    mem.legend(loc="upper left", fontsize=7)
    for ax in (io, cpu, mem):
        ax.grid(alpha=0.3)
    _titles(fig, title, subtitle)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _timeline_io(io: Any, run: RunResult, data: dict[str, Any]) -> None:
    dev, t = run.device, data["t"]
    io.set_ylabel("%")
    io.set_ylim(0, 105)
    io.set_title("device" if dev else "no block device (tmpfs)", fontsize=9)
    if dev is None:
        return
    io.plot(t, data["util"], label=f"{dev} %util (iostat)", color="tab:red")
    if any(v is not None for v in data["throttle_use"]):
        io.plot(t, data["throttle_use"], label=f"{dev} share of the throttle's limit %", color="tab:orange",
                linestyle="--")
    if run.disk is not None:
        io.plot(t, data["disk_util"], label=f"{run.disk} %util (the disk under it)", color="tab:purple", alpha=0.6)
    rate = io.twinx()
    rate.plot(t, data["read_mb_s"], label=f"{dev} read MB/s", color="tab:blue")
    rate.set_ylabel("read MB/s")
    rate.set_ylim(bottom=0)
    rate.legend(loc="upper right", fontsize=7)
    io.legend(loc="upper left", fontsize=7)


def plot_worker_counts(runs: Sequence[RunResult], path: Path, subtitle: str, title: str) -> None:
    """Each adaptive run's worker count over time, per data dir (a step line)."""
    lines: list[dict[str, Any]] = [
        {"label": f"run {r.id}: {r.place}, {r.spec.data_dirs} dir(s), {os.path.basename(d)}", "steps": steps}
        for r in runs for d, steps in r.worker_counts().items()]
    _write_data(path, {"title": title, "subtitle": subtitle, "lines": lines})
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.6))
    for line in lines:
        steps = line["steps"]
        end = max(steps[-1][0] * 1.05, 0.1)
        ax.step([s[0] for s in steps] + [end], [s[1] for s in steps] + [steps[-1][1]], where="post",
                label=line["label"])
    top = max((s[1] for line in lines for s in line["steps"]), default=1)
    ax.set_ylim(0, math.ceil(top) + 1)
    ax.set_xlabel("seconds into the load")
    ax.set_ylabel("workers scanning (the controller's count)")
    ax.grid(alpha=0.3)
    if lines:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no adaptive run changed its count", ha="center", transform=ax.transAxes)
    _titles(fig, title, subtitle)
    fig.savefig(path, dpi=90)
    plt.close(fig)


__all__ = ["BUSY_NOTE", "Panel", "data_path", "plot_points", "plot_timeline", "plot_worker_counts", "points_data"]
