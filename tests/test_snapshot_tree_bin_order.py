"""A producer snapshot's entry order when producer ids collide in one bucket of Kafka's producers map (a
java.util.HashMap bin grown into a red-black tree bin): the partition loads as Kafka loads it, and the snapshot
lists the entries in the JVM's order (mploader/format/java_hashmap.py).

The test cites the Kafka 4.x source (1eb7644349cb) that decides the expected outcome.
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
# models tree bins (mploader/format/java_hashmap.py) and writes the entries in the JVM's order.
def test_eleven_colliding_producer_ids_load_like_kafka(tmp_path):
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d).segment(0, *(P(i, pid=64 * i, seq=0) for i in range(11)))
    r = load(d)
    lg = r.logs[TP]
    assert sorted(lg.producers) == [64 * i for i in range(11)]
    entries = parse_snapshot(pb.read(name(11, ".snapshot")), "s")
    # keySet() order of these 11 keys on OpenJDK 17: the tree's root first, the rest in list order
    assert [e.producer_id for e in entries] == [192, 0, 64, 128, 256, 320, 384, 448, 512, 576, 640]
