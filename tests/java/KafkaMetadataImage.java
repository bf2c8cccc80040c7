// What Kafka's own classes read from a KRaft metadata log dir (__cluster_metadata-0), printed as JSON, to check
// mploader.format.metadata_records and mploader.format.metadata_image against Kafka rather than against itself.
// Built and run by tests/java/metadata_oracle.sh (Kafka's metadata and raft modules on top of the oracle build).
//
//   metadata-oracle image DIR     {"snapshot": "OFFSET-EPOCH" | null, "topics": [...], "configs": [...], ...}
//   metadata-oracle records DIR   one line per metadata record read: {"offset", "api_key", "version", "data"}
//                                 ("data": the generated MetadataJsonConverters' JSON of the record)
//
// The path of a broker's start-up: the latest snapshot (Snapshots.parse over the dir, as KafkaMetadataLog's
// recoverSnapshots keeps them) read with RecordsSnapshotReader and replayed into one MetadataDelta ended by
// finishSnapshot (MetadataLoader.handleLoadSnapshot); then the batches of the .log segments from the snapshot's
// offset on, read with RecordsIterator (KafkaRaftClient's reader, MetadataRecordSerde) and given to
// MetadataBatchLoader, flushed after each batch (a schedule MetadataLoader.handleCommit may take). Unlike a
// broker it reads to the log's end, not to the high watermark, which is not on disk.
//
// One adaptation, for logs written by a newer Kafka: a metadata.version level this Kafka does not know (its
// FeaturesDelta refuses it) is replayed as the latest level it knows, and the level read is printed as
// "metadata_version_read". Nothing else of the image depends on metadata.version.
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.TreeMap;
import java.util.stream.Stream;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.metadata.FeatureLevelRecord;
import org.apache.kafka.common.metadata.MetadataJsonConverters;
import org.apache.kafka.common.record.FileRecords;
import org.apache.kafka.common.utils.BufferSupplier;
import org.apache.kafka.image.ConfigurationImage;
import org.apache.kafka.image.MetadataDelta;
import org.apache.kafka.image.MetadataImage;
import org.apache.kafka.image.MetadataProvenance;
import org.apache.kafka.image.TopicImage;
import org.apache.kafka.image.loader.MetadataBatchLoader;
import org.apache.kafka.metadata.MetadataRecordSerde;
import org.apache.kafka.metadata.PartitionRegistration;
import org.apache.kafka.common.utils.LogContext;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.raft.Batch;
import org.apache.kafka.raft.LeaderAndEpoch;
import org.apache.kafka.raft.OffsetAndEpoch;
import org.apache.kafka.raft.internals.RecordsIterator;
import org.apache.kafka.server.common.ApiMessageAndVersion;
import org.apache.kafka.server.common.MetadataVersion;
import org.apache.kafka.snapshot.FileRawSnapshotReader;
import org.apache.kafka.snapshot.RecordsSnapshotReader;
import org.apache.kafka.snapshot.Snapshots;

public class KafkaMetadataImage {
    static final int MAX_BATCH_SIZE = 8 * 1024 * 1024;  // KafkaRaftClient.MAX_BATCH_SIZE_BYTES
    static int metadataVersionRead = -1;

    /** r, or a metadata.version level this Kafka does not know replaced by the latest one it knows. */
    static ApiMessageAndVersion known(ApiMessageAndVersion r) {
        if (r.message() instanceof FeatureLevelRecord f && f.name().equals(MetadataVersion.FEATURE_NAME)) {
            metadataVersionRead = f.featureLevel();
            short latest = MetadataVersion.latestTesting().featureLevel();
            if (f.featureLevel() > latest) {
                return new ApiMessageAndVersion(f.duplicate().setFeatureLevel(latest), r.version());
            }
        }
        return r;
    }

    public static void main(String[] args) throws IOException {
        Path dir = Paths.get(args[1]);
        Optional<OffsetAndEpoch> snapshotId = latestSnapshot(dir);
        if (args[0].equals("records")) {
            printRecords(dir, snapshotId);
            return;
        }
        MetadataImage image = MetadataImage.EMPTY;
        long nextOffset = 0;
        if (snapshotId.isPresent()) {
            image = loadSnapshot(dir, snapshotId.get());
            nextOffset = snapshotId.get().offset();
        }
        image = replayLog(dir, image, nextOffset);
        System.out.println(toJson(image, snapshotId));
    }

    static Optional<OffsetAndEpoch> latestSnapshot(Path dir) throws IOException {
        try (Stream<Path> files = Files.list(dir)) {
            return files.map(Snapshots::parse).flatMap(Optional::stream)
                .filter(p -> !p.partial && !p.deleted).map(p -> p.snapshotId).max(Comparator.naturalOrder());
        }
    }

    static RecordsSnapshotReader<ApiMessageAndVersion> snapshotReader(Path dir, OffsetAndEpoch id) {
        return RecordsSnapshotReader.of(FileRawSnapshotReader.open(dir, id), MetadataRecordSerde.INSTANCE,
            BufferSupplier.create(), MAX_BATCH_SIZE, true);
    }

    static MetadataImage loadSnapshot(Path dir, OffsetAndEpoch id) {
        MetadataDelta delta = new MetadataDelta.Builder().setImage(MetadataImage.EMPTY).build();
        try (RecordsSnapshotReader<ApiMessageAndVersion> reader = snapshotReader(dir, id)) {
            while (reader.hasNext()) {
                for (ApiMessageAndVersion r : reader.next().records()) delta.replay(known(r).message());
            }
        }
        delta.finishSnapshot();
        return delta.apply(new MetadataProvenance(id.offset() - 1, id.epoch(), -1L, true));
    }

    static List<Path> segments(Path dir) throws IOException {
        try (Stream<Path> files = Files.list(dir)) {
            return files.filter(p -> p.getFileName().toString().endsWith(".log")).sorted().toList();
        }
    }

    /** The batches of the log from nextOffset on, records before it dropped (a snapshot may end inside a batch). */
    static List<Batch<ApiMessageAndVersion>> logBatches(Path dir, long nextOffset) throws IOException {
        List<Batch<ApiMessageAndVersion>> out = new ArrayList<>();
        for (Path segment : segments(dir)) {
            try (FileRecords records = FileRecords.open(segment.toFile());
                 RecordsIterator<ApiMessageAndVersion> it = new RecordsIterator<>(records, MetadataRecordSerde.INSTANCE,
                     BufferSupplier.create(), MAX_BATCH_SIZE, true)) {
                while (it.hasNext()) {
                    Batch<ApiMessageAndVersion> batch = it.next();
                    if (batch.lastOffset() < nextOffset || batch.records().isEmpty()) continue;
                    int skip = (int) Math.max(0, nextOffset - batch.baseOffset());
                    List<ApiMessageAndVersion> kept = batch.records().subList(skip, batch.records().size());
                    out.add(Batch.data(batch.baseOffset() + skip, batch.epoch(), batch.appendTimestamp(),
                        batch.sizeInBytes(), kept));
                }
            }
        }
        return out;
    }

    static MetadataImage replayLog(Path dir, MetadataImage image, long nextOffset) throws IOException {
        MetadataImage[] last = {image};
        MetadataBatchLoader loader = new MetadataBatchLoader(new LogContext(), Time.SYSTEM,
            (message, cause) -> { throw new RuntimeException(message, cause); },
            (delta, newImage, manifest) -> last[0] = newImage);
        loader.resetToImage(image);
        LeaderAndEpoch leader = new LeaderAndEpoch(OptionalInt.empty(), 0);
        for (Batch<ApiMessageAndVersion> batch : logBatches(dir, nextOffset)) {
            List<ApiMessageAndVersion> records = batch.records().stream().map(KafkaMetadataImage::known).toList();
            loader.loadBatch(Batch.data(batch.baseOffset(), batch.epoch(), batch.appendTimestamp(),
                batch.sizeInBytes(), records), leader);
            loader.maybeFlushBatches(leader, true);
        }
        return last[0];
    }

    static void printRecords(Path dir, Optional<OffsetAndEpoch> snapshotId) throws IOException {
        if (snapshotId.isPresent()) {
            try (RecordsSnapshotReader<ApiMessageAndVersion> reader = snapshotReader(dir, snapshotId.get())) {
                while (reader.hasNext()) printBatch(reader.next(), "snapshot");
            }
        }
        for (Batch<ApiMessageAndVersion> batch : logBatches(dir, snapshotId.map(OffsetAndEpoch::offset).orElse(0L))) {
            printBatch(batch, "log");
        }
    }

    static void printBatch(Batch<ApiMessageAndVersion> batch, String source) {
        long offset = batch.baseOffset();
        for (ApiMessageAndVersion r : batch.records()) {
            System.out.println("{\"source\":\"" + source + "\",\"offset\":" + (offset++) + ",\"api_key\":"
                + r.message().apiKey() + ",\"version\":" + r.version() + ",\"data\":"
                + MetadataJsonConverters.writeJson(r.message(), r.version()) + "}");
        }
    }

    static String toJson(MetadataImage image, Optional<OffsetAndEpoch> snapshotId) {
        StringBuilder out = new StringBuilder("{\"snapshot\":");
        out.append(snapshotId.map(id -> str(id.offset() + "-" + id.epoch())).orElse("null"));
        out.append(",\"topics\":[");
        String sep = "";
        for (TopicImage t : new TreeMap<>(image.topics().topicsByName()).values()) {
            out.append(sep).append("{\"name\":").append(str(t.name())).append(",\"id\":").append(str(t.id().toString()));
            out.append(",\"partitions\":[");
            String psep = "";
            for (Map.Entry<Integer, PartitionRegistration> e : new TreeMap<>(t.partitions()).entrySet()) {
                out.append(psep).append(partition(e.getKey(), e.getValue()));
                psep = ",";
            }
            out.append("]}");
            sep = ",";
        }
        out.append("],\"configs\":[");
        sep = "";
        List<ConfigResource> resources = new ArrayList<>(image.configs().resourceData().keySet());
        resources.sort(Comparator.comparing((ConfigResource r) -> r.type().id()).thenComparing(ConfigResource::name));
        for (ConfigResource r : resources) {
            ConfigurationImage c = image.configs().resourceData().get(r);
            out.append(sep).append("{\"type\":").append(r.type().id()).append(",\"name\":").append(str(r.name()));
            out.append(",\"data\":").append(strMap(new TreeMap<>(c.data()))).append("}");
            sep = ",";
        }
        out.append("],\"features\":{");
        sep = "";
        for (Map.Entry<String, Short> e : new TreeMap<>(image.features().finalizedVersions()).entrySet()) {
            out.append(sep).append(str(e.getKey())).append(":").append(e.getValue());
            sep = ",";
        }
        out.append("},\"metadata_version\":").append(image.features().metadataVersion().featureLevel());
        out.append(",\"metadata_version_read\":").append(metadataVersionRead);
        return out.append("}").toString();
    }

    static String partition(int id, PartitionRegistration p) {
        StringBuilder out = new StringBuilder("{\"partition\":").append(id);
        out.append(",\"replicas\":").append(ints(p.replicas)).append(",\"isr\":").append(ints(p.isr));
        out.append(",\"removing_replicas\":").append(ints(p.removingReplicas));
        out.append(",\"adding_replicas\":").append(ints(p.addingReplicas));
        out.append(",\"directories\":[");
        String sep = "";
        for (Uuid d : p.directories) {
            out.append(sep).append(str(d.toString()));
            sep = ",";
        }
        out.append("],\"leader\":").append(p.leader).append(",\"leader_recovery_state\":").append(p.leaderRecoveryState.value());
        out.append(",\"leader_epoch\":").append(p.leaderEpoch).append(",\"partition_epoch\":").append(p.partitionEpoch);
        out.append(",\"elr\":").append(ints(p.elr)).append(",\"last_known_elr\":").append(ints(p.lastKnownElr));
        return out.append("}").toString();
    }

    static String ints(int[] values) {
        StringBuilder out = new StringBuilder("[");
        for (int i = 0; i < values.length; i++) out.append(i == 0 ? "" : ",").append(values[i]);
        return out.append("]").toString();
    }

    static String strMap(Map<String, String> m) {
        StringBuilder out = new StringBuilder("{");
        String sep = "";
        for (Map.Entry<String, String> e : m.entrySet()) {
            out.append(sep).append(str(e.getKey())).append(":").append(str(e.getValue()));
            sep = ",";
        }
        return out.append("}").toString();
    }

    static String str(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') out.append('\\').append(c);
            else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
            else out.append(c);
        }
        return out.append('"').toString();
    }
}
