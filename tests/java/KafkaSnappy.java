// Snappy record batches written and read by Kafka's own record classes (those the Kafka oracle builds from
// Kafka's source, see tests/test_snappy.py), to check mploader against Kafka rather than against itself.
//
//   java -cp <oracle classes and jars> KafkaSnappy.java write   JSON of batches Kafka wrote (tests/data/kafka_snappy.json)
//   java -cp <...> KafkaSnappy.java read < hex lines          one JSON line per batch of each log Kafka read
//   java -cp <...> KafkaSnappy.java stream < hex lines        what SnappyCompression's input stream yields
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.record.ControlRecordType;
import org.apache.kafka.common.record.EndTransactionMarker;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.MemoryRecordsBuilder;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.utils.BufferSupplier;

public class KafkaSnappy {
    static final long T0 = 1_700_000_000_000L;
    static final HexFormat HEX = HexFormat.of();

    // the records of the fixture; tests/test_snappy.py computes the same
    static byte[] key(int i) {
        return i % 4 == 0 ? null : ("key-" + i).getBytes(StandardCharsets.UTF_8);
    }

    static byte[] value(int i) {
        return ("record " + i + " of the snappy fixture; ").repeat(1 + i % 13).getBytes(StandardCharsets.UTF_8);
    }

    static String hex(ByteBuffer b) {
        byte[] a = new byte[b.remaining()];
        b.duplicate().get(a);
        return HEX.formatHex(a);
    }

    static String records(byte magic, long base, int n) {
        MemoryRecordsBuilder b = MemoryRecords.builder(ByteBuffer.allocate(1 << 20), magic,
                Compression.snappy().build(), TimestampType.CREATE_TIME, base);
        for (int i = 0; i < n; i++) {
            b.appendWithOffset(base + i, T0 + i, key(i), value(i));
        }
        return hex(b.build().buffer());
    }

    static String commitMarker() {
        MemoryRecordsBuilder b = MemoryRecords.builder(ByteBuffer.allocate(1024), RecordBatch.MAGIC_VALUE_V2,
                Compression.snappy().build(), TimestampType.CREATE_TIME, 500, RecordBatch.NO_TIMESTAMP, 77L,
                (short) 3, RecordBatch.NO_SEQUENCE, true, true, 4);
        b.appendEndTxnMarker(T0 + 9, new EndTransactionMarker(ControlRecordType.COMMIT, 12));
        return hex(b.build().buffer());
    }

    static String str(byte[] a) {
        return a == null ? "null" : "\"" + HEX.formatHex(a) + "\"";
    }

    static String bytesOf(ByteBuffer b) {
        if (b == null) return "null";
        byte[] a = new byte[b.remaining()];
        b.duplicate().get(a);
        return str(a);
    }

    static void read(String hexLog) {
        MemoryRecords log = MemoryRecords.readableRecords(ByteBuffer.wrap(HEX.parseHex(hexLog)));
        for (RecordBatch batch : log.batches()) {
            try {
                batch.ensureValid();
                List<String> recs = new ArrayList<>();
                for (Record r : batch) {
                    String extra = "";
                    if (batch.isControlBatch()) {
                        EndTransactionMarker m = EndTransactionMarker.deserialize(r);
                        extra = ",\"" + m.controlType() + "\"," + m.coordinatorEpoch();
                    }
                    recs.add("[" + r.offset() + "," + r.timestamp() + "," + bytesOf(r.key()) + ","
                            + bytesOf(r.value()) + extra + "]");
                }
                System.out.println("{\"magic\":" + batch.magic() + ",\"compression\":" + batch.compressionType().id
                        + ",\"base_offset\":" + batch.baseOffset() + ",\"last_offset\":" + batch.lastOffset()
                        + ",\"records\":[" + String.join(",", recs) + "]}");
            } catch (RuntimeException | Error e) {
                System.out.println("{\"error\":\"" + e.getClass().getSimpleName() + "\"}");
            }
        }
    }

    // the whole stream as Kafka decompresses a records section or a wrapper's value, or the exception's class
    static void stream(String hexData) {
        ByteBuffer in = ByteBuffer.wrap(HEX.parseHex(hexData));
        try (java.io.InputStream s = Compression.snappy().build().wrapForInput(in, RecordBatch.MAGIC_VALUE_V2,
                BufferSupplier.NO_CACHING)) {
            System.out.println("{\"data\":\"" + HEX.formatHex(s.readAllBytes()) + "\"}");
        } catch (Exception | Error e) {
            Throwable t = e.getCause() != null && e.getClass().getSimpleName().equals("KafkaException") ? e.getCause() : e;
            System.out.println("{\"error\":\"" + e.getClass().getSimpleName() + "\",\"cause\":\""
                    + t.getClass().getSimpleName() + "\"}");
        }
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("write")) {
            System.out.println("{\"v2\":\"" + records(RecordBatch.MAGIC_VALUE_V2, 0, 300) + "\",");
            System.out.println(" \"v1\":\"" + records(RecordBatch.MAGIC_VALUE_V1, 100, 40) + "\",");
            System.out.println(" \"v0\":\"" + records(RecordBatch.MAGIC_VALUE_V0, 200, 40) + "\",");
            System.out.println(" \"commit\":\"" + commitMarker() + "\"}");
        } else {
            boolean batches = args[0].equals("read");
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            for (String line; (line = in.readLine()) != null; ) {
                if (batches) {
                    read(line.strip());
                    System.out.println("{\"end\":true}");
                } else {
                    stream(line.strip());
                }
            }
        }
    }
}
