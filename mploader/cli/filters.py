"""``--topic`` and ``--partition``: which partitions a dry run's or verify's report shows (the load reads them all)."""

from __future__ import annotations

from dataclasses import replace

from mploader.cli.dirs import partitions_in
from mploader.result import LoadedLog, LoadResult


def filter_problem(dirs: list[str], topics: list[str], partitions: list[int]) -> str | None:
    """A --topic/--partition that matches no partition directory of ``dirs`` (from their listings): a usage error
    naming what is there, before anything is read."""
    present = partitions_in(dirs)
    if any(_selected(tp.topic, tp.partition, topics, partitions) for tp in present):
        return None
    chosen = " and ".join(x for x in (f"--topic {', '.join(topics)}" if topics else "",
                                      f"--partition {', '.join(map(str, partitions))}" if partitions else "") if x)
    there = sorted({tp.topic for tp in present})
    shown = ", ".join(there[:20]) + (f" and {len(there) - 20} more" if len(there) > 20 else "")
    return f"no partition of {', '.join(dirs)} matches {chosen} (topics there: {shown or 'none'})"


def _selected(topic: str, partition: int, topics: list[str], partitions: list[int]) -> bool:
    return (not topics or topic in topics) and (not partitions or partition in partitions)


def filtered_result(result: LoadResult, topics: list[str], partitions: list[int]) -> LoadResult:
    """``result`` with only the partitions --topic/--partition choose (the data dirs' states and the stats stay
    those of the whole load: it read every partition)."""
    if not topics and not partitions:
        return result

    def keep(lg: LoadedLog) -> bool:
        return _selected(lg.topic, lg.partition, topics, partitions)

    return replace(result, logs={tp: lg for tp, lg in result.logs.items() if keep(lg)},
                   future_logs={tp: lg for tp, lg in result.future_logs.items() if keep(lg)},
                   logs_to_delete=[lg for lg in result.logs_to_delete if keep(lg)],
                   stray_logs=[lg for lg in result.stray_logs if keep(lg)])


__all__ = ["filter_problem", "filtered_result"]
