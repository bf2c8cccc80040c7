"""The disk model behind the seek-modelled devices (:mod:`.seek_disk`): how long one request takes, given where
the head is.  Pure arithmetic: the daemon realises these times by sleeping.

A request's service time is *positioning* plus *transfer*:

* positioning, on a disk with a head (``rpm`` set): none when the request starts where the last one ended (the
  head is there, the platter brings the next sector under it); a short forward skip within one track costs the
  rotation past the gap; anything else is a seek, ``settle + k * sqrt(distance / stroke)`` capped at the full
  stroke (the square-root law of short seeks: the arm accelerates half way and decelerates the rest, Ruemmler
  and Wilkes, "An introduction to disk drive modeling", IEEE Computer 27(3), 1994), plus half a revolution of
  rotational latency.  ``k`` is chosen so that the mean seek over uniformly random pairs of positions equals the
  datasheet's average seek (the mean of ``sqrt`` of the distance of two uniform points is 8/15);
* positioning, on a device without a head (``rpm`` None, the SSD-like profile): a fixed access latency, served
  on ``channels`` requests at once;
* transfer: ``size / rate``, the rate falling linearly from the outer (low offsets) to the inner zone (zoned
  recording: an outer track holds more sectors and passes under the head in the same time).

The HDD's figures come from the Hitachi Deskstar 7K1000.C and 7K320 specifications (7200 rpm desktop drives):
average read seek 8.5 ms (7K1000.C, two-disk models, table 9), single-track seek 1.0 ms, full stroke 20 ms and
average latency 4.2 ms at 7200 rpm (7K320, tables 6-8).  The zoned rate (200 MB/s outer, 100 MB/s inner) is
an assumption typical of current 7200 rpm drives of 1-4 TB, not from those sheets.  The SSD-like profile's are
round figures of a SATA SSD (550 MB/s, the SATA 3 interface's limit; 0.1 ms access), not of a named drive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

MEAN_SQRT_DISTANCE = 8 / 15  # E[sqrt(|x - y|)] for x, y uniform on [0, 1]


@dataclass(frozen=True, slots=True)
class DiskProfile:
    name: str
    outer_rate: float  # bytes/s at offset 0
    inner_rate: float  # bytes/s at the last byte
    rpm: float | None = None  # None: no head (no seek, no rotation)
    settle_s: float = 0.0  # the shortest seek (single track)
    average_seek_s: float = 0.0  # the datasheet's average seek
    full_stroke_s: float = 0.0  # the longest seek
    access_s: float = 0.0  # a headless device's latency per request
    channels: int = 1  # requests served at once
    stroke_bytes: int = 0  # the bytes the full stroke crosses: the image's size (set by with_stroke)

    def with_stroke(self, size: int) -> DiskProfile:
        """The profile of a disk of ``size`` bytes: the image stands for the whole platter."""
        return replace(self, stroke_bytes=size)

    @property
    def revolution_s(self) -> float:
        return 60.0 / self.rpm if self.rpm else 0.0

    @property
    def seek_k(self) -> float:
        """The square-root law's factor that gives the datasheet's average seek."""
        return (self.average_seek_s - self.settle_s) / MEAN_SQRT_DISTANCE


HDD_7200 = DiskProfile("hdd", outer_rate=200e6, inner_rate=100e6, rpm=7200, settle_s=0.001, average_seek_s=0.0085,
                       full_stroke_s=0.020)
SSD_LIKE = DiskProfile("ssd", outer_rate=550e6, inner_rate=550e6, access_s=0.0001, channels=4)
PROFILES = {p.name: p for p in (HDD_7200, SSD_LIKE)}


def describe(p: DiskProfile) -> str:
    """The profile in a line, for reports."""
    rate = f"{p.outer_rate / 1e6:.0f}-{p.inner_rate / 1e6:.0f} MB/s" if p.outer_rate != p.inner_rate else \
        f"{p.outer_rate / 1e6:.0f} MB/s"
    if p.rpm is None:
        return f"{p.name}: {rate}, {p.access_s * 1e3:g} ms access, {p.channels} channels"
    return (f"{p.name}: {p.rpm:g} rpm, one head, seek {p.settle_s * 1e3:g} ms track-to-track / "
            f"{p.average_seek_s * 1e3:g} ms average (square-root law), half a turn {p.revolution_s / 2 * 1e3:.2f} ms, "
            f"{rate} outer to inner")


def rate_at(p: DiskProfile, offset: int) -> float:
    """The media rate at ``offset``, in bytes/s: outer zone at 0, inner zone at the end of the stroke."""
    where = min(max(offset / p.stroke_bytes, 0.0), 1.0) if p.stroke_bytes else 0.0
    return p.outer_rate - (p.outer_rate - p.inner_rate) * where


def track_bytes(p: DiskProfile, offset: int) -> float:
    """What one revolution passes under the head at ``offset``."""
    return rate_at(p, offset) * p.revolution_s


def seek_s(p: DiskProfile, distance: int) -> float:
    """The arm's move over ``distance`` bytes (0: none)."""
    if distance == 0 or p.rpm is None:
        return 0.0
    fraction = min(distance / p.stroke_bytes, 1.0) if p.stroke_bytes else 1.0
    return min(p.settle_s + p.seek_k * math.sqrt(fraction), p.full_stroke_s)


def positioning_s(p: DiskProfile, head: int | None, offset: int) -> float:
    """Time before the first byte of a request at ``offset`` passes under the head, the head ending the last
    request at ``head`` (None: unknown, as after start)."""
    if p.rpm is None:
        return p.access_s
    if head == offset:
        return 0.0
    if head is not None and 0 < offset - head <= track_bytes(p, head):
        return (offset - head) / rate_at(p, head)  # the same track: wait for the gap to pass
    distance = abs(offset - head) if head is not None else p.stroke_bytes // 3
    return seek_s(p, distance) + p.revolution_s / 2


def transfer_s(p: DiskProfile, offset: int, size: int) -> float:
    return size / rate_at(p, offset)


def service_s(p: DiskProfile, head: int | None, offset: int, size: int) -> float:
    """The whole time of a request: positioning, then transfer."""
    return positioning_s(p, head, offset) + transfer_s(p, offset, size)


__all__ = ["HDD_7200", "PROFILES", "SSD_LIKE", "DiskProfile", "describe", "positioning_s", "rate_at", "seek_s",
           "service_s", "track_bytes", "transfer_s"]
