/*
 * The Java readers of scripts/bench: Apache Kafka's own KafkaConsumer in a consumer group,
 * reading --count records of a topic, committing as --commit says (the same three ways in the
 * fault mode below, one definition: commitAfterPoll):
 *
 *   sync   commitSync() after every poll that returned records (what a careful Java worker does;
 *          the default)
 *   async  commitAsync() after every poll that returned records (a failed commit is reported on
 *          stderr; close() waits for the ones in flight): the fair peer of a client whose
 *          commits do not block the poll loop
 *   auto   enable.auto.commit=true with Java's default auto.commit.interval.ms, no commit call:
 *          poll() commits when the interval is due and close() commits the last positions
 *          (Java's default way)
 *
 * and printing one line:
 *
 *   reader=java-commitsync|java-commitasync|java-autocommit records=N join_s=J first_to_last_s=T
 *
 * join_s is from subscribe to the first record, first_to_last_s from the first record to the
 * last (close(), and with it auto's last commit, is not timed). Before it, the settings in force
 * (defaults included), read back from Java's ConsumerConfig; READER is java (sync), java-async or
 * java-auto, scripts/bench's names:
 *
 *   bench consume settings reader=READER fetch.min.bytes=.. fetch.max.wait.ms=.. ...
 *       max.poll.records=.. enable.auto.commit=.. auto.commit.interval.ms=..
 *
 * --set NAME=VALUE (repeatable) passes any consumer setting. Run as a single-file program:
 *
 *   java -cp "$(cat .cache/kafka/clients-4.4.0/classpath)" scripts/BenchConsumer.java \
 *        --bootstrap B --topic T --group G --count N [--commit sync|async|auto]
 *
 * Fault mode, for scripts/bench --faults (scripts/faults.py): with --faults-out FILE it reads
 * until the file --stop-file exists (checked after every poll; at most 900 s), notes every record
 * received, commits as --commit says (sync, async or auto, as above), reports a failed commit on
 * stderr and goes on, closes, and writes one line per record to FILE, "unix_ms partition
 * offset", in the order received. --set NAME=VALUE (repeatable)
 * passes any consumer setting (the bench gives ours and this reader the same fetch and group
 * settings); --count is not needed then.
 *
 *   java -cp ... scripts/BenchConsumer.java --bootstrap B --topic T --group G \
 *        --faults-out FILE --commit sync|async|auto --stop-file STOP [--set NAME=VALUE ...]
 *
 * Share mode, for scripts/bench --share (KIP-932): with --share commitsync|piggyback it reads
 * --count records of a topic as a member of the share group --group, with Apache Kafka's
 * KafkaShareConsumer in explicit acknowledgement mode, ACCEPTing every record, and prints
 *
 *   reader=java-share-MODE records=N join_s=J first_to_last_s=T polls=P commits=C
 *       share_fetch_requests=F acks_sent=A ack_errors=E ack_round_trips=R vmhwm_kb=K
 *
 * commitsync: commitSync() after each poll that returned records (one ShareAcknowledge per
 * partition leader with acknowledgements, a round trip the poll loop waits for); piggyback: no
 * commit call, the acknowledgements ride on the next poll's ShareFetch (and close() sends the
 * last ones). F and A/E are the client's own metrics (fetch-total: ShareFetch requests;
 * acknowledgements-send-total / -error-total: records acknowledged / refused); R, the round trips
 * that carried acknowledgements, is C for commitsync and F for piggyback. K: VmHWM of
 * /proc/self/status (peak RSS) at the end. The group's share.auto.offset.reset must be earliest
 * already (scripts/share_group.py set-config). Before the result, the settings in force:
 *
 *   bench consume settings reader=java-share-MODE share.acknowledgement.mode=explicit
 *       share.acquire.mode=.. fetch.min.bytes=.. fetch.max.wait.ms=..
 *       max.partition.fetch.bytes=.. fetch.max.bytes=.. max.poll.records=..
 *
 * (share.acquire.mode: what --set gave, or Kafka's default, batch_optimized.)
 *
 *   java -cp ... scripts/BenchConsumer.java --bootstrap B --topic T --group G --count N \
 *        --share commitsync|piggyback [--set NAME=VALUE ...]
 *
 * Only the JDK and kafka-clients are used; client logs go to stderr at WARN.
 */

import java.io.BufferedWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class BenchConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = null, topic = null, group = null;
        long count = 0;
        String faultsOut = null, commit = "sync", stopFile = null, share = null;
        List<String[]> sets = new ArrayList<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--faults-out": faultsOut = args[i + 1]; break;
                case "--commit": commit = args[i + 1]; break;
                case "--stop-file": stopFile = args[i + 1]; break;
                case "--share": share = args[i + 1]; break;
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
        Commit mode = Commit.parse(commit);
        if (mode == null) {
            System.err.println("BenchConsumer: --commit takes sync, async or auto");
            System.exit(2);
        }
        if (faults && stopFile == null) {
            System.err.println("BenchConsumer: --faults-out needs --stop-file");
            System.exit(2);
        }
        if (bootstrap == null || topic == null || group == null || (count <= 0 && !faults)) {
            System.err.println("usage: BenchConsumer --bootstrap B --topic T --group G --count N");
            System.exit(2);
        }
        if (share != null && (faults || !(share.equals("commitsync") || share.equals("piggyback")))) {
            System.err.println("BenchConsumer: --share takes commitsync or piggyback, and no --faults-out");
            System.exit(2);
        }
        System.setProperty("org.apache.logging.log4j.level", "WARN");
        if (share != null) {
            runShare(bootstrap, topic, group, count, share, sets);
            return;
        }
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, String.valueOf(mode == Commit.AUTO));
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        for (String[] kv : sets) {
            props.put(kv[0], kv[1]);
        }
        if (faults) {
            runFaults(props, topic, faultsOut, mode, Path.of(stopFile));
            return;
        }
        // The fetch and commit settings in force (defaults included), for scripts/bench to print
        // beside its table. The Java consumer's prefetch is no setting: it sends the next fetch
        // for the partitions whose fetched records are used up, one fetch per broker ahead.
        ConsumerConfig effective = new ConsumerConfig(props);
        System.out.printf("bench consume settings reader=%s fetch.min.bytes=%d"
                + " fetch.max.wait.ms=%d max.partition.fetch.bytes=%d fetch.max.bytes=%d"
                + " max.poll.records=%d enable.auto.commit=%b auto.commit.interval.ms=%d%n",
                mode.benchName,
                effective.getInt(ConsumerConfig.FETCH_MIN_BYTES_CONFIG),
                effective.getInt(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG),
                effective.getInt(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG),
                effective.getInt(ConsumerConfig.FETCH_MAX_BYTES_CONFIG),
                effective.getInt(ConsumerConfig.MAX_POLL_RECORDS_CONFIG),
                effective.getBoolean(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG),
                effective.getInt(ConsumerConfig.AUTO_COMMIT_INTERVAL_MS_CONFIG));
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
                commitAfterPoll(consumer, mode);
                last = System.nanoTime();
            }
        }
        System.out.printf("reader=%s records=%d join_s=%.3f first_to_last_s=%.3f%n",
                mode.clientId, seen, (first - started) / 1e9, (last - first) / 1e9);
    }

    /** How a group reader commits (the header's --commit), with its names in both modes. */
    enum Commit {
        SYNC("java", "java-commitsync"),
        ASYNC("java-async", "java-commitasync"),
        AUTO("java-auto", "java-autocommit");

        /** scripts/bench's reader name, in the settings line. */
        final String benchName;
        /** The result line's reader and the client.id (scripts/faults.py's reader names). */
        final String clientId;

        Commit(String benchName, String clientId) {
            this.benchName = benchName;
            this.clientId = clientId;
        }

        static Commit parse(String s) {
            switch (s) {
                case "sync": return SYNC;
                case "async": return ASYNC;
                case "auto": return AUTO;
                default: return null;
            }
        }
    }

    /**
     * The commit after a poll that returned records, the one definition both group modes use:
     * commitSync, commitAsync (a failure reported on stderr when its answer comes), or nothing
     * (auto: poll() and close() commit).
     */
    static void commitAfterPoll(KafkaConsumer<byte[], byte[]> consumer, Commit mode) {
        switch (mode) {
            case SYNC:
                consumer.commitSync();
                break;
            case ASYNC:
                consumer.commitAsync((offsets, e) -> {
                    if (e != null) {
                        System.err.println("BenchConsumer: " + System.currentTimeMillis()
                                + " commitAsync failed: " + e);
                    }
                });
                break;
            case AUTO:
                break;
        }
    }

    /** The share mode (see the header): a share-group member that ACCEPTs every record. */
    static void runShare(String bootstrap, String topic, String group, long count, String mode,
            List<String[]> sets) throws Exception {
        boolean sync = mode.equals("commitsync");
        String reader = "java-share-" + mode;
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, reader);
        props.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, "explicit");
        props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        for (String[] kv : sets) {
            props.put(kv[0], kv[1]);
        }
        // Read back like the group reader's line; ConsumerConfig knows every share setting too.
        Properties plain = new Properties();
        plain.putAll(props);
        plain.remove(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG);
        // A share consumer's own setting, which the plain consumer's config refuses.
        String acquireMode = (String) plain.remove("share.acquire.mode");
        ConsumerConfig effective = new ConsumerConfig(plain);
        System.out.printf("bench consume settings reader=%s share.acknowledgement.mode=explicit"
                + " share.acquire.mode=%s"
                + " fetch.min.bytes=%d fetch.max.wait.ms=%d max.partition.fetch.bytes=%d"
                + " fetch.max.bytes=%d max.poll.records=%d%n", reader,
                acquireMode == null ? "batch_optimized" : acquireMode,
                effective.getInt(ConsumerConfig.FETCH_MIN_BYTES_CONFIG),
                effective.getInt(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG),
                effective.getInt(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG),
                effective.getInt(ConsumerConfig.FETCH_MAX_BYTES_CONFIG),
                effective.getInt(ConsumerConfig.MAX_POLL_RECORDS_CONFIG));
        long started = System.nanoTime();
        long first = -1, last = -1, seen = 0, polls = 0, commits = 0;
        long deadline = started + Duration.ofSeconds(300).toNanos();
        double fetches, acks, ackErrors;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (seen < count) {
                if (System.nanoTime() > deadline) {
                    System.err.println("BenchConsumer: only " + seen + " of " + count + " records within 300 s");
                    System.exit(1);
                }
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                polls++;
                if (records.isEmpty()) {
                    continue;
                }
                if (first < 0) {
                    first = System.nanoTime();
                }
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                seen += records.count();
                if (sync) {
                    for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : consumer.commitSync().entrySet()) {
                        if (e.getValue().isPresent()) {
                            System.err.println("BenchConsumer: acknowledgement of " + e.getKey() + " failed: "
                                    + e.getValue().get());
                        }
                    }
                    commits++;
                }
                last = System.nanoTime();
            }
            fetches = metric(consumer.metrics(), "fetch-total");
            acks = metric(consumer.metrics(), "acknowledgements-send-total");
            ackErrors = metric(consumer.metrics(), "acknowledgements-error-total");
        }
        System.out.printf("reader=%s records=%d join_s=%.3f first_to_last_s=%.3f polls=%d commits=%d"
                + " share_fetch_requests=%.0f acks_sent=%.0f ack_errors=%.0f ack_round_trips=%.0f"
                + " vmhwm_kb=%d%n", reader, seen, (first - started) / 1e9, (last - first) / 1e9, polls,
                commits, fetches, acks, ackErrors, sync ? (double) commits : fetches, vmHwmKb());
    }

    /** The sum of the client's metrics of that name (over their tags; NaN when none). */
    static double metric(Map<MetricName, ? extends Metric> metrics, String name) {
        double sum = Double.NaN;
        for (Map.Entry<MetricName, ? extends Metric> e : metrics.entrySet()) {
            if (e.getKey().name().equals(name) && e.getValue().metricValue() instanceof Number) {
                double v = ((Number) e.getValue().metricValue()).doubleValue();
                sum = Double.isNaN(sum) ? v : sum + v;
            }
        }
        return sum;
    }

    /** Peak resident set size (VmHWM) of this process in kB, -1 when /proc does not say. */
    static long vmHwmKb() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("VmHWM:")) {
                    return Long.parseLong(line.replaceAll("[^0-9]", ""));
                }
            }
        } catch (Exception e) {
            // Not Linux: no number.
        }
        return -1;
    }

    /** The fault mode (see the header): every record's arrival, a commit after every poll. */
    static void runFaults(Properties props, String topic, String out, Commit mode, Path stop)
            throws Exception {
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, mode.clientId);
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
                    commitAfterPoll(consumer, mode);
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
        System.out.printf("reader=%s records=%d failures=%d out=%s%n",
                mode.clientId, seen.size(), failures, out);
    }
}
