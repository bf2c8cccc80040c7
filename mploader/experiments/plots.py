"""The PNG figures of an experiment (matplotlib, the ``experiments`` extra; no display needed).

* :func:`plot_against_workers`: panels of a figure against the worker count, one line per series (runs
  grouped by what differs besides the count); an "adaptive" run is a dotted horizontal line of its series;
* :func:`plot_timeline`: one run over time: the device's %util (and the share of a throttle's limit), read
  MB/s, CPU per core, the memory of the parent, the workers and the shared-memory blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mploader.experiments.run import RunResult, best_of

Figure = Callable[[RunResult], float | None]


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


def plot_against_workers(panels: Sequence[Panel], series: Callable[[RunResult], str], path: Path, title: str,
                         columns: int = 2) -> None:
    plt = _pyplot()
    from matplotlib import ticker

    rows = (len(panels) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(6.2 * columns, 4.2 * rows), squeeze=False)
    colors: dict[str, str] = {}
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, panel in zip(axes.flat, panels):
        groups: dict[str, list[RunResult]] = {}
        for r in best_of(panel.runs):  # a spec run in several rounds: its fastest
            groups.setdefault(series(r), []).append(r)
        for label, runs in groups.items():
            color = colors.setdefault(label, cycle[len(colors) % len(cycle)])
            fixed = sorted((r for r in runs if isinstance(r.spec.workers, int)), key=lambda r: int(r.spec.workers))
            points = [(int(r.spec.workers), v) for r in fixed if (v := panel.value(r)) is not None]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=color, label=label)
            for r in runs:
                v = panel.value(r)
                if r.spec.workers == "adaptive" and v is not None:
                    ax.axhline(v, color=color, linestyle=":", label=f"{label}, adaptive")
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel("worker processes per data dir")
        ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        ax.set_ylabel(panel.ylabel)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_timeline(run: RunResult, path: Path, title: str) -> None:
    plt = _pyplot()
    fig, (io, cpu, mem) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    t = [s.t for s in run.samples]
    dev = run.device
    if dev is not None:
        io.plot(t, [s.disks[dev].util_percent if dev in s.disks else None for s in run.samples],
                label=f"{dev} %util (iostat)", color="tab:red")
        if any(s.throttle_use for s in run.samples):
            io.plot(t, [s.throttle_use.get(dev) for s in run.samples], label=f"{dev} share of the throttle's limit %",
                    color="tab:orange", linestyle="--")
        if run.disk is not None:
            io.plot(t, [s.disks[run.disk].util_percent if run.disk in s.disks else None for s in run.samples],
                    label=f"{run.disk} %util (the disk under it)", color="tab:purple", alpha=0.6)
        rate = io.twinx()
        rate.plot(t, [s.disks[dev].read_bytes_per_s / 1e6 if dev in s.disks else None for s in run.samples],
                  label=f"{dev} read MB/s", color="tab:blue")
        rate.set_ylabel("read MB/s")
        rate.set_ylim(bottom=0)
        rate.legend(loc="upper right", fontsize=7)
    io.set_ylabel("%")
    io.set_ylim(0, 105)
    if dev is not None:
        io.legend(loc="upper left", fontsize=7)
    io.set_title("device" if dev else "no block device (tmpfs)", fontsize=9)
    cores = max((len(s.cpu_percent) for s in run.samples), default=0)
    for c in range(cores):
        cpu.plot(t, [s.cpu_percent[c] if c < len(s.cpu_percent) else None for s in run.samples], label=f"cpu{c}")
    cpu.plot(t, [s.load_cpu_percent / max(1, cores) for s in run.samples], label="the load's processes",
             color="black", linestyle="--")
    cpu.set_ylabel("CPU busy % (of all cores)")
    cpu.set_ylim(0, 105)
    cpu.legend(loc="upper left", fontsize=7)
    mem.plot(t, [(s.rss_parent or 0) / 1e6 for s in run.samples], label="parent RSS")
    mem.plot(t, [sum(s.rss_workers.values()) / 1e6 for s in run.samples], label="workers' RSS (sum)")
    mem.plot(t, [s.shm_bytes / 1e6 for s in run.samples], label="shared memory blocks")
    mem.set_ylabel("MB")
    mem.set_xlabel("seconds since the process started")
    mem.legend(loc="upper left", fontsize=7)
    for ax in (io, cpu, mem):
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


__all__ = ["Panel", "plot_against_workers", "plot_timeline"]
