/*
 * The Java side of scripts/bench --exactly-once (scripts/bench-exactly-once): Apache Kafka's own
 * KafkaConsumer and transactional KafkaProducer doing the work of our
 * examples/transform_orders: read INPUT in GROUP (read_committed), write one record per input
 * record to OUTPUT (key = the input key, value = "fill:" + the input value), and commit the
 * consumed offsets in the same transaction, until COUNT input records are committed.
 *
 *   BenchTransform BOOTSTRAP GROUP INPUT OUTPUT TXN_ID INTERVAL_MS|per-poll COUNT [--set NAME=VALUE ...]
 *
 * Two ways of cutting transactions:
 *
 *   INTERVAL_MS (a number)  one transaction per INTERVAL_MS: begun with the first record after a
 *                           commit, kept open across polls (each poll waits at most until the
 *                           interval's end, and at most 100 ms), then
 *                           sendOffsetsToTransaction(next offsets, consumer.groupMetadata()) and
 *                           commitTransaction. A revocation inside a poll commits the open
 *                           transaction first (onPartitionsRevoked, whose groupMetadata is still
 *                           the generation that owned the partitions); a loss aborts it.
 *   per-poll                the common Java loop: one transaction per poll that returned records
 *                           (poll timeout 100 ms).
 *
 * Either way the last transaction is committed as soon as COUNT records are in it (no waiting
 * for the interval). The time runs from the first record received (the group joined: join_ms
 * apart, from subscribe) to the return of the last commitTransaction. Prints
 *
 *   bench exactly-once settings impl=java mode=M isolation.level=.. max.poll.records=..
 *         fetch.min.bytes=.. fetch.max.wait.ms=.. group.protocol=.. acks=.. enable.idempotence=..
 *         linger.ms=.. batch.size=.. compression.type=.. transaction.timeout.ms=..
 *   transform consumed=N produced=N transactions=T elapsed_ms=E join_ms=J aborted=A
 *
 * (the settings read back from ConsumerConfig and ProducerConfig, defaults included). An aborted
 * transaction (any non-fatal KafkaException) rewinds the consumer to the transaction's first
 * offsets and is counted; a fatal one (fenced...) ends the run with exit status 1. --set passes a
 * consumer or producer setting (each goes to the client whose configuration knows the name).
 * Only stdout carries results; client logs go to stderr at WARN. Only the JDK and kafka-clients.
 */

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class BenchTransform {
    static final PrintStream results = System.out;
    static final byte[] FILL = "fill:".getBytes();

    final KafkaConsumer<byte[], byte[]> consumer;
    final KafkaProducer<byte[], byte[]> producer;
    final String output;
    /** Offsets to commit with the open transaction (next offset per partition). */
    final Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
    /** The first offset of each partition in the open transaction (where an abort rewinds to). */
    final Map<TopicPartition, Long> first = new HashMap<>();
    boolean open;
    long openedNs, lastCommitNs;
    long inTxn, consumed, transactions, aborted;

    BenchTransform(KafkaConsumer<byte[], byte[]> consumer, KafkaProducer<byte[], byte[]> producer, String output) {
        this.consumer = consumer;
        this.producer = producer;
        this.output = output;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 7 || (args.length - 7) % 2 != 0) {
            usage("7 arguments, then --set NAME=VALUE pairs");
        }
        String bootstrap = args[0], group = args[1], input = args[2], output = args[3], txnId = args[4];
        boolean perPoll = args[5].equals("per-poll");
        long intervalMs = perPoll ? 0 : Long.parseLong(args[5]);
        long count = Long.parseLong(args[6]);
        configureLogging();
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        for (int i = 7; i < args.length; i += 2) {
            if (!args[i].equals("--set")) {
                usage("unknown flag " + args[i]);
            }
            String[] kv = args[i + 1].split("=", 2);
            if (kv.length != 2) {
                usage("--set " + args[i + 1] + ": expected NAME=VALUE");
            }
            boolean known = false;
            if (ConsumerConfig.configNames().contains(kv[0])) {
                cp.put(kv[0], kv[1]);
                known = true;
            }
            if (ProducerConfig.configNames().contains(kv[0])) {
                pp.put(kv[0], kv[1]);
                known = true;
            }
            if (!known) {
                usage("--set " + kv[0] + ": neither a consumer nor a producer setting");
            }
        }
        ConsumerConfig cc = new ConsumerConfig(cp);
        ProducerConfig pc = new ProducerConfig(pp);
        results.printf("bench exactly-once settings impl=java mode=%s isolation.level=%s max.poll.records=%d"
                + " fetch.min.bytes=%d fetch.max.wait.ms=%d max.partition.fetch.bytes=%d group.protocol=%s"
                + " acks=%s enable.idempotence=%s linger.ms=%d batch.size=%d compression.type=%s"
                + " max.in.flight.requests.per.connection=%d transaction.timeout.ms=%d%n",
                perPoll ? "per-poll" : "interval-" + intervalMs + "ms",
                cc.getString(ConsumerConfig.ISOLATION_LEVEL_CONFIG),
                cc.getInt(ConsumerConfig.MAX_POLL_RECORDS_CONFIG),
                cc.getInt(ConsumerConfig.FETCH_MIN_BYTES_CONFIG),
                cc.getInt(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG),
                cc.getInt(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG),
                cc.getString(ConsumerConfig.GROUP_PROTOCOL_CONFIG),
                pc.getString(ProducerConfig.ACKS_CONFIG).replace("-1", "all"),
                pc.getBoolean(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG),
                pc.getLong(ProducerConfig.LINGER_MS_CONFIG),
                pc.getInt(ProducerConfig.BATCH_SIZE_CONFIG),
                pc.getString(ProducerConfig.COMPRESSION_TYPE_CONFIG),
                pc.getInt(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION),
                pc.getInt(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG));
        results.flush();

        int status = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp);
                KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp)) {
            producer.initTransactions();
            BenchTransform t = new BenchTransform(consumer, producer, output);
            status = t.run(input, perPoll, intervalMs, count);
        }
        System.exit(status);
    }

    int run(String input, boolean perPoll, long intervalMs, long count) {
        long subscribedNs = System.nanoTime();
        long firstNs = 0;
        consumer.subscribe(List.of(input), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                // Still this generation's: the open transaction's offsets can be committed.
                if (open) {
                    commit();
                }
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {}

            @Override
            public void onPartitionsLost(Collection<TopicPartition> partitions) {
                // Another member owns them already: the open transaction must not commit.
                if (open) {
                    abort();
                }
            }
        });
        try {
            while (consumed < count) {
                long waitMs = 100;
                if (open && !perPoll) {
                    long left = intervalMs - (System.nanoTime() - openedNs) / 1_000_000L;
                    waitMs = Math.max(0, Math.min(waitMs, left));
                }
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(waitMs));
                if (!records.isEmpty() && firstNs == 0) {
                    firstNs = System.nanoTime();
                }
                try {
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        if (consumed + inTxn >= count) {
                            break;
                        }
                        if (!open) {
                            producer.beginTransaction();
                            open = true;
                            openedNs = System.nanoTime();
                        }
                        TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                        first.putIfAbsent(tp, r.offset());
                        offsets.put(tp, new OffsetAndMetadata(r.offset() + 1));
                        byte[] v = r.value() == null ? new byte[0] : r.value();
                        byte[] out = new byte[FILL.length + v.length];
                        System.arraycopy(FILL, 0, out, 0, FILL.length);
                        System.arraycopy(v, 0, out, FILL.length, v.length);
                        producer.send(new ProducerRecord<>(output, r.key(), out));
                        inTxn++;
                    }
                    boolean due = perPoll || consumed + inTxn >= count
                            || (System.nanoTime() - openedNs) / 1_000_000L >= intervalMs;
                    if (open && due) {
                        commit();
                    }
                } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException
                        | UnsupportedVersionException e) {
                    throw e;
                } catch (KafkaException e) {
                    System.err.println("BenchTransform: aborting a transaction: " + e);
                    abort();
                }
            }
        } catch (KafkaException e) {
            System.err.println("BenchTransform: fatal: " + e);
            e.printStackTrace();
            return 1;
        }
        long joinMs = firstNs == 0 ? 0 : (firstNs - subscribedNs) / 1_000_000L;
        long elapsedMs = (lastCommitNs - firstNs) / 1_000_000L;
        results.printf("transform consumed=%d produced=%d transactions=%d elapsed_ms=%d join_ms=%d aborted=%d%n",
                consumed, consumed, transactions, elapsedMs, joinMs, aborted);
        results.flush();
        return 0;
    }

    void commit() {
        producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
        producer.commitTransaction();
        lastCommitNs = System.nanoTime();
        open = false;
        consumed += inTxn;
        transactions++;
        reset();
    }

    void abort() {
        producer.abortTransaction();
        open = false;
        aborted++;
        Set<TopicPartition> owned = consumer.assignment();
        for (Map.Entry<TopicPartition, Long> e : first.entrySet()) {
            if (owned.contains(e.getKey())) {
                consumer.seek(e.getKey(), e.getValue());
            }
        }
        reset();
    }

    void reset() {
        inTxn = 0;
        offsets.clear();
        first.clear();
    }

    static void usage(String why) {
        System.err.println("usage: BenchTransform BOOTSTRAP GROUP INPUT OUTPUT TXN_ID INTERVAL_MS|per-poll COUNT"
                + " [--set NAME=VALUE ...]");
        System.err.println("BenchTransform: error: " + why);
        System.exit(2);
    }

    static void configureLogging() {
        String p = "status = error\n"
                + "appender.err.type = Console\n"
                + "appender.err.name = err\n"
                + "appender.err.target = SYSTEM_ERR\n"
                + "appender.err.layout.type = PatternLayout\n"
                + "appender.err.layout.pattern = %d{HH:mm:ss.SSS} [%t] %-5level %c{1.} %msg%n\n"
                + "rootLogger.level = warn\n"
                + "rootLogger.appenderRef.err.ref = err\n";
        try {
            Path file = Files.createTempFile("bench-transform-log4j2-", ".properties");
            Files.writeString(file, p);
            file.toFile().deleteOnExit();
            System.setProperty("log4j2.configurationFile", file.toString());
        } catch (IOException e) {
            System.err.println("BenchTransform: cannot write the log4j2 configuration: " + e);
        }
        System.setOut(System.err);
    }
}
