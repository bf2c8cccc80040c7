"""Second review pass (split, snapshot sequence, producer state, -future/-stray, index garbage).

Each test cites the Kafka 4.x source (1eb7644349cb) that decides the expected outcome.  Every test here
passes: the divergences found were fixed.
"""

from __future__ import annotations

from mploader import TopicPartition
from mploader.format.snapshot import parse_snapshot
from tests.kafkadir import P, PartitionBuilder, data_dir, load, name

TP = TopicPartition("t", 0)


# ------------------------------------------------------------------------------------------------
# Producer ids that collide in one bucket of ProducerStateManager.producers (a java.util.HashMap)
# make Kafka treeify the bin; Kafka loads the partition normally (the snapshot's entry order is the
# tree bin's linked order: HashMap.treeifyBin -> TreeNode.treeify -> moveRootToFront, and
# putTreeVal inserts a new node right after its tree parent: xp.next = x).
#   ProducerStateManager: private final Map<Long, ProducerStateEntry> producers = new HashMap<>();
#   LogSegment.recover -> updateProducerState -> ProducerStateManager.update -> addProducerId -> producers.put
#   LogLoader.recoverSegment -> producerStateManager.takeSnapshot() -> writeSnapshot(file, producers, sync)
#       (iterates producers.entrySet())
# Keys 0, 64, ..., 640 all hash to bucket 0: the 9th and 10th puts resize (16 -> 32 -> 64), the 11th
# treeifies (TREEIFY_THRESHOLD 8, MIN_TREEIFY_CAPACITY 64).  mploader used to fail the load here; it now
# loads with the same producers and logs that the entry order inside that bucket is not Kafka's tree order
# (the tree order itself is not modelled: see the closing note).
def test_eleven_colliding_producer_ids_load_like_kafka(tmp_path):
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d).segment(0, *(P(i, pid=64 * i, seq=0) for i in range(11)))
    r = load(d)
    lg = r.logs[TP]
    assert sorted(lg.producers) == [64 * i for i in range(11)]
    entries = parse_snapshot(pb.read(name(11, ".snapshot")), "s")
    assert sorted(e.producer_id for e in entries) == [64 * i for i in range(11)]
