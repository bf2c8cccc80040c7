"""A recovered segment's effect on producer state, computed for all its batches at once (docs/loading.md §7.2).

Kafka's ``LogSegment.recover`` feeds the batches to the ProducerStateManager one at a time:
prepareUpdate, append, update, and for a marker that closes a transaction the last stable
offset, a ``.txnindex`` entry if it aborts, and completeTxn.  The same end state, computed with
numpy over the segment's batch table::

    batch table (log order) --sort by producer id--> one run of rows per producer
        |  per producer: last epoch, data batches since its last change (5 retained), last timestamp,
        |                last marker's coordinator epoch, transaction open at the end or not
        |  per transaction: a producer's rows between two of its markers form a span; the span's
        |                first transactional batch opens it (unless the segment began with one
        |                open), the marker that ends the span completes it
        v
    the only coupling between producers: an aborted transaction's last stable offset, the first
    offset of the oldest *other* transaction open at its marker (a prefix maximum and a search)

Python runs once per producer and once per retained batch (at most 5 per producer), not once
per batch.  A segment of fewer than :data:`REPLAY_BELOW` producer batches is replayed with Kafka's own steps
(numpy's fixed cost per call is then the larger one).  Input outside that shape (a batch Kafka
rejects, first offsets that do not increase, an ongoing-transaction map that disagrees with the
entries) is replayed batch by batch too, so the outcome, exception included, stays Kafka's.
"""

from __future__ import annotations

import numpy as np

from mploader.errors import StartupFailedError
from mploader.format.records import last_sequences
from mploader.recovery.producer_entry import NUM_BATCHES_TO_RETAIN, BatchMetadata, ProducerEntry
from mploader.recovery.producer_state import ATTR_CONTROL, ATTR_TRANSACTIONAL, ProducerStateManager
from mploader.scan import BatchColumns, Field, Marker

TxnIndexEntry = tuple[int, int, int, int]  # producer id, first offset, last offset, last stable offset

# Below this many batches Kafka's own loop is the faster of the two (measured: ~3.6 us a batch against
# ~105 us for the vectorised pass whatever its size; they cross at about 28, and below 24 the replay is
# clearly ahead): small segments replay.
REPLAY_BELOW = 24


def apply_producer_batches(psm: ProducerStateManager, rows: BatchColumns, by_producer: np.ndarray,
                           txn_entries: list[TxnIndexEntry], path: str) -> None:
    """Apply the batches ``by_producer`` of ``rows`` (v2 batches with a producer id, none INVALID or FATAL,
    sorted by producer id and log order: :func:`mploader.scan.draft.producer_order`) to ``psm``; the aborted
    transactions' index entries are appended to ``txn_entries``."""
    if len(by_producer) < REPLAY_BELOW:  # Kafka's loop enters the producers in order of appearance itself
        if len(by_producer):
            replay(psm, rows.table[np.sort(by_producer)], txn_entries, path)
        return
    pid = rows["producer_id"][by_producer]
    head = np.ones(len(pid), bool)
    head[1:] = pid[1:] != pid[:-1]
    first = by_producer[head]
    for p in pid[head][np.argsort(first)].tolist():  # producers enter Kafka's HashMap in order of appearance
        psm.ensure_producer(p)
    live = rows["marker"][by_producer] != Marker.EMPTY_CONTROL  # an empty control batch changes nothing
    n_live = int(np.count_nonzero(live))
    if n_live and (n_live < REPLAY_BELOW or not _apply_vectorised(psm, rows, by_producer[live], txn_entries)):
        replay(psm, rows.table[np.sort(by_producer)], txn_entries, path)


def replay(psm: ProducerStateManager, rows: np.ndarray, txn_entries: list[TxnIndexEntry], path: str) -> None:
    """Kafka's loop, one batch at a time.  A data batch of a known producer that cannot fail (no transaction open,
    or one open and the batch transactional) updates its entry in place: prepareUpdate's copy, appendDataBatch on
    it and update's merge back leave the entry as appending to it directly does (the copy only matters when the
    append throws)."""
    producers = psm.producers
    for row in rows.tolist():
        pid = row[Field.PRODUCER_ID]
        entry = producers.get(pid)
        attributes = row[Field.ATTRIBUTES]
        if entry is not None and not attributes & ATTR_CONTROL:
            transactional = bool(attributes & ATTR_TRANSACTIONAL)
            if entry.current_txn_first_offset is None or transactional:
                first = row[Field.BASE_OFFSET]
                if entry.append_data(row[Field.PRODUCER_EPOCH], first, row[Field.LAST_OFFSET],
                                     row[Field.BASE_SEQUENCE], row[Field.MAX_TIMESTAMP], transactional, path):
                    psm.ongoing[first] = pid
                continue
        info = psm.prepare_update(pid)
        completed = info.append(row, path)
        psm.update(info)
        if completed is not None:
            lso = psm.last_stable_offset(completed)
            if completed.is_aborted:
                if txn_entries and completed.last_offset <= txn_entries[-1][2]:
                    raise StartupFailedError(path, "IllegalArgumentException",
                                             "transaction index offsets must increase")
                txn_entries.append((completed.producer_id, completed.first_offset, completed.last_offset, lso))
            psm.complete_txn(completed, path)


def _apply_vectorised(psm: ProducerStateManager, rows: BatchColumns, row: np.ndarray,
                      txn_entries: list[TxnIndexEntry]) -> bool:
    """The batches ``row`` of ``rows`` (sorted by producer id, log order within each) at once; False (and
    ``psm`` untouched beyond the producers already entered) when they need :func:`replay`.  A row's table
    index is also its place in log order."""
    n = len(row)

    def column(name: str) -> np.ndarray:
        col: np.ndarray = rows[name][row]
        return col

    pid = column("producer_id")
    k = np.arange(n)
    head = np.ones(n, bool)  # first row of a producer's run
    head[1:] = pid[1:] != pid[:-1]
    lo = np.flatnonzero(head)
    hi = np.append(lo[1:], n) - 1
    gid = np.cumsum(head) - 1
    attributes = column("attributes")
    ctrl = (attributes & ATTR_CONTROL) != 0
    marker = column("marker")
    if np.any(ctrl & (marker != Marker.ABORT) & (marker != Marker.COMMIT)):
        return False
    txn = ~ctrl & ((attributes & ATTR_TRANSACTIONAL) != 0)
    base = column("base_offset")

    entries = [psm.producers[p] for p in pid[lo].tolist()]
    init_open = np.array([e.current_txn_first_offset is not None for e in entries])
    init_first = np.array([e.current_txn_first_offset or 0 for e in entries], np.int64)
    if not _ongoing_agrees(psm, entries):
        return False

    # spans: a marker ends its producer's span; the span's first transactional batch opens a transaction
    new_span = head.copy()
    new_span[1:] |= ctrl[:-1]
    span = np.cumsum(new_span) - 1
    n_spans = int(span[-1]) + 1
    first_txn = np.full(n_spans, n)
    t = np.flatnonzero(txn)
    spans_with_txn, at = np.unique(span[t], return_index=True)
    first_txn[spans_with_txn] = t[at]
    inherited = (span == span[lo][gid]) & init_open[gid]  # still in the transaction open when the segment began
    open_before = inherited | (first_txn[span] < k)
    if np.any(~ctrl & ~txn & open_before):  # InvalidTxnStateException: let the replay raise it
        return False
    txn_first = np.where(inherited, init_first[gid], base[np.minimum(first_txn[span], n - 1)])
    starts = np.flatnonzero(txn & (first_txn[span] == k) & ~inherited)
    starts = starts[np.argsort(row[starts])]
    done = np.flatnonzero(ctrl & open_before)
    done = done[np.argsort(row[done])]
    aborted = done[marker[done] == Marker.ABORT]

    # the last stable offset and sorted(ongoing) need first offsets that grow in log order
    keys = sorted(psm.ongoing)
    start_first = base[starts]
    if len(starts) and (np.any(np.diff(start_first) <= 0) or (keys and int(start_first[0]) <= keys[-1])):
        return False
    abort_last = base[aborted]
    if len(aborted) and (np.any(np.diff(abort_last) <= 0)
                         or (txn_entries and int(abort_last[0]) <= txn_entries[-1][2])):
        return False

    # every transaction open at some point of the segment: first offset, rows where it opens and closes
    span_close = np.full(n_spans, -1)
    span_close[span[ctrl]] = k[ctrl]
    never = len(rows)

    def close_row(c: np.ndarray) -> np.ndarray:  # table row of the marker ending a span, or never
        return np.where(c >= 0, row[c], never)

    group_of = dict(zip(pid[lo].tolist(), range(len(lo))))
    init_close = np.full(len(keys), never)
    for i, key in enumerate(keys):
        g = group_of.get(psm.ongoing[key])
        if g is not None:
            init_close[i] = close_row(span_close[span[lo[g]]])
    opened = np.concatenate((np.full(len(keys), -1), row[starts]))
    closed = np.concatenate((init_close, close_row(span_close[span[starts]])))
    firsts = np.concatenate((np.array(keys, np.int64), start_first))
    lso = abort_last + 1
    if len(firsts) and len(aborted):
        when = row[aborted]
        # the oldest transaction still open after the marker: the first whose close comes later (its own
        # closes at the marker itself), provided it had opened by then
        j = np.searchsorted(np.maximum.accumulate(closed), when, side="right")
        jj = np.minimum(j, len(firsts) - 1)
        other = (j < len(firsts)) & (opened[jj] < when)
        lso = np.where(other, firsts[jj], lso)

    # ---- from here on psm changes ----
    _update_entries(entries, rows, row, column("producer_epoch"), head, lo, hi, gid, ctrl, txn_first, inherited,
                    first_txn, span)
    still_open = span_close[span[starts]] < 0
    psm.ongoing.update(zip(start_first[still_open].tolist(), pid[starts[still_open]].tolist()))
    closed_firsts = txn_first[done].tolist()
    for first_offset in txn_first[done[inherited[done]]].tolist():
        del psm.ongoing[first_offset]
    psm.unreplicated.update(zip(closed_firsts, zip(pid[done].tolist(), base[done].tolist())))
    txn_entries.extend(zip(pid[aborted].tolist(), txn_first[aborted].tolist(), abort_last.tolist(), lso.tolist()))
    return True


def _ongoing_agrees(psm: ProducerStateManager, entries: list[ProducerEntry]) -> bool:
    """One ongoing transaction per producer, and it is the one its entry has open (always so unless a
    snapshot or an earlier segment was inconsistent, which the replay handles)."""
    if len(set(psm.ongoing.values())) != len(psm.ongoing):
        return False
    by_producer = {p: first for first, p in psm.ongoing.items()}
    return all(by_producer.get(e.producer_id) == e.current_txn_first_offset for e in entries
               if e.current_txn_first_offset is not None or e.producer_id in by_producer)


def _update_entries(entries: list[ProducerEntry], rows: BatchColumns, row: np.ndarray, epoch: np.ndarray,
                    head: np.ndarray, lo: np.ndarray, hi: np.ndarray, gid: np.ndarray, ctrl: np.ndarray,
                    txn_first: np.ndarray, inherited: np.ndarray, first_txn: np.ndarray, span: np.ndarray) -> None:
    """Each producer's entry after its run of rows (:meth:`ProducerEntry.append_data` and markers, folded)."""
    n = len(row)
    k = np.arange(n)
    change = np.zeros(n, bool)
    change[1:] = (epoch[1:] != epoch[:-1]) & ~head[1:]
    last_change = np.maximum.reduceat(np.where(change, k, -1), lo)
    since_change = ~ctrl & (k >= np.maximum(last_change, lo)[gid])  # data batches since the last epoch change
    count = np.cumsum(since_change)
    retained = np.flatnonzero(since_change & (count[hi][gid] - count < NUM_BATCHES_TO_RETAIN))  # at most 5 per producer
    at = row[retained]
    last_ctrl = np.maximum.reduceat(np.where(ctrl, k, -1), lo)
    last = row[hi]
    last_ts = np.where(ctrl[hi], rows.at("marker_timestamp", last), rows.at("max_timestamp", last))
    open_at_end = ~ctrl[hi] & (inherited[hi] | (first_txn[span[hi]] < n))
    coordinator = rows.at("coordinator_epoch", row[np.maximum(last_ctrl, 0)])
    for e, changed, first_epoch, last_epoch, ts, c, coordinator_epoch, is_open, first in zip(
            entries, (last_change >= 0).tolist(), epoch[lo].tolist(), epoch[hi].tolist(), last_ts.tolist(),
            last_ctrl.tolist(), coordinator.tolist(), open_at_end.tolist(), txn_first[hi].tolist()):
        if changed or first_epoch != e.epoch:
            e.batches.clear()
        e.epoch = last_epoch
        e.last_timestamp = ts
        if c >= 0:
            e.coordinator_epoch = coordinator_epoch
        e.current_txn_first_offset = first if is_open else None
    # the retained batches' metadata, grouped by producer (a deque keeps the last 5, as addBatchMetadata does)
    b = rows.at("base_offset", at)
    last_offset = rows.at("last_offset", at)
    delta = (last_offset - b).astype(np.int32)  # Java's (int) cast
    last_seq = last_sequences(rows.at("base_sequence", at), delta)
    metadata = list(map(BatchMetadata, last_seq.tolist(), last_offset.tolist(), delta.tolist(),
                        rows.at("max_timestamp", at).tolist()))
    cuts = np.searchsorted(gid[retained], np.arange(len(entries) + 1)).tolist()
    for e, i, j in zip(entries, cuts[:-1], cuts[1:]):
        if i < j:
            e.add_batches(metadata[i:j])
