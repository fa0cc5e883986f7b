/*
 * The Java reader of scripts/bench: Apache Kafka's own KafkaConsumer in a consumer group,
 * committing synchronously after every poll that returned records (what a careful Java worker
 * does), reading --count records of a topic and printing one line:
 *
 *   reader=java-commitsync records=N join_s=J first_to_last_s=T
 *
 * join_s is from subscribe to the first record, first_to_last_s from the first record to the
 * last. Before it, the fetch settings in force (defaults included):
 *
 *   bench consume settings reader=java fetch.min.bytes=.. fetch.max.wait.ms=.. ...
 *
 * --set NAME=VALUE (repeatable) passes any consumer setting. Run as a single-file program:
 *
 *   java -cp "$(cat .cache/kafka/clients-4.4.0/classpath)" scripts/BenchConsumer.java \
 *        --bootstrap B --topic T --group G --count N
 *
 * Fault mode, for scripts/bench --faults (scripts/faults.py): with --faults-out FILE it reads
 * until the file --stop-file exists (checked after every poll; at most 900 s), notes every record
 * received, commits after every poll that returned records, with commitSync (--commit sync) or
 * commitAsync (--commit async: the fair peer of a client whose commits do not block the poll
 * loop), reports a failed commit on stderr and goes on, closes, and writes one line per record
 * to FILE, "unix_ms partition offset", in the order received. --set NAME=VALUE (repeatable)
 * passes any consumer setting (the bench gives ours and this reader the same fetch and group
 * settings); --count is not needed then.
 *
 *   java -cp ... scripts/BenchConsumer.java --bootstrap B --topic T --group G \
 *        --faults-out FILE --commit sync|async --stop-file STOP [--set NAME=VALUE ...]
 *
 * Only the JDK and kafka-clients are used; client logs go to stderr at WARN.
 */

import java.io.BufferedWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class BenchConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = null, topic = null, group = null;
        long count = 0;
        String faultsOut = null, commit = "sync", stopFile = null;
        List<String[]> sets = new ArrayList<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--faults-out": faultsOut = args[i + 1]; break;
                case "--commit": commit = args[i + 1]; break;
                case "--stop-file": stopFile = args[i + 1]; break;
                case "--set": {
                    String[] kv = args[i + 1].split("=", 2);
                    if (kv.length != 2) {
                        System.err.println("BenchConsumer: --set " + args[i + 1] + ": expected NAME=VALUE");
                        System.exit(2);
                    }
                    sets.add(kv);
                    break;
                }
                case "--bootstrap": bootstrap = args[i + 1]; break;
                case "--topic": topic = args[i + 1]; break;
                case "--group": group = args[i + 1]; break;
                case "--count": count = Long.parseLong(args[i + 1]); break;
                default:
                    System.err.println("BenchConsumer: unknown flag " + args[i]);
                    System.exit(2);
            }
        }
        boolean faults = faultsOut != null;
        if (faults && (stopFile == null || !(commit.equals("sync") || commit.equals("async")))) {
            System.err.println("BenchConsumer: --faults-out needs --stop-file and --commit sync|async");
            System.exit(2);
        }
        if (bootstrap == null || topic == null || group == null || (count <= 0 && !faults)) {
            System.err.println("usage: BenchConsumer --bootstrap B --topic T --group G --count N");
            System.exit(2);
        }
        System.setProperty("org.apache.logging.log4j.level", "WARN");
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        for (String[] kv : sets) {
            props.put(kv[0], kv[1]);
        }
        if (faults) {
            runFaults(props, topic, faultsOut, commit.equals("sync"), Path.of(stopFile));
            return;
        }
        // The fetch settings in force (defaults included), for scripts/bench to print beside its
        // table. The Java consumer's prefetch is no setting: it sends the next fetch for the
        // partitions whose fetched records are used up, one fetch per broker ahead.
        ConsumerConfig effective = new ConsumerConfig(props);
        System.out.printf("bench consume settings reader=java fetch.min.bytes=%d"
                + " fetch.max.wait.ms=%d max.partition.fetch.bytes=%d fetch.max.bytes=%d"
                + " max.poll.records=%d%n",
                effective.getInt(ConsumerConfig.FETCH_MIN_BYTES_CONFIG),
                effective.getInt(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG),
                effective.getInt(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG),
                effective.getInt(ConsumerConfig.FETCH_MAX_BYTES_CONFIG),
                effective.getInt(ConsumerConfig.MAX_POLL_RECORDS_CONFIG));
        long started = System.nanoTime();
        long first = -1, last = -1, seen = 0;
        long deadline = started + Duration.ofSeconds(300).toNanos();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (seen < count) {
                if (System.nanoTime() > deadline) {
                    System.err.println("BenchConsumer: only " + seen + " of " + count + " records within 300 s");
                    System.exit(1);
                }
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                if (records.isEmpty()) {
                    continue;
                }
                if (first < 0) {
                    first = System.nanoTime();
                }
                seen += records.count();
                consumer.commitSync();
                last = System.nanoTime();
            }
        }
        System.out.printf("reader=java-commitsync records=%d join_s=%.3f first_to_last_s=%.3f%n",
                seen, (first - started) / 1e9, (last - first) / 1e9);
    }

    /** The fault mode (see the header): every record's arrival, a commit after every poll. */
    static void runFaults(Properties props, String topic, String out, boolean sync, Path stop)
            throws Exception {
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, sync ? "java-commitsync" : "java-commitasync");
        List<long[]> seen = new ArrayList<>();
        long failures = 0;
        long deadline = System.nanoTime() + Duration.ofSeconds(900).toNanos();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (!Files.exists(stop) && System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> records;
                try {
                    records = consumer.poll(Duration.ofMillis(100));
                } catch (Exception e) {
                    failures++;
                    System.err.println("BenchConsumer: " + System.currentTimeMillis() + " poll failed: " + e);
                    continue;
                }
                if (records.isEmpty()) {
                    continue;
                }
                if (seen.isEmpty()) {
                    // The bench starts its faults once every reader is reading.
                    System.out.println("first-record " + System.currentTimeMillis());
                    System.out.flush();
                }
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    seen.add(new long[] {System.currentTimeMillis(), r.partition(), r.offset()});
                }
                try {
                    if (sync) {
                        consumer.commitSync();
                    } else {
                        consumer.commitAsync((offsets, e) -> {
                            if (e != null) {
                                System.err.println("BenchConsumer: " + System.currentTimeMillis()
                                        + " commitAsync failed: " + e);
                            }
                        });
                    }
                } catch (Exception e) {
                    failures++;
                    System.err.println("BenchConsumer: " + System.currentTimeMillis() + " commit failed: " + e);
                }
            }
        }
        try (BufferedWriter w = Files.newBufferedWriter(Path.of(out))) {
            for (long[] r : seen) {
                w.write(r[0] + " " + r[1] + " " + r[2] + "\n");
            }
        }
        System.out.printf("reader=java-commit%s records=%d failures=%d out=%s%n",
                sync ? "sync" : "async", seen.size(), failures, out);
    }
}
