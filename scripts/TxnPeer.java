/*
 * Apache Kafka's own transactional producer and read_committed consumer (kafka-clients) as the
 * reference for our exactly-once work (issue 35): what Java writes in transactions our
 * read_committed consumer must read (committed records, never aborted ones), what our
 * transactional producer writes Java's read_committed consumer must read, and Java's
 * consume-transform-produce loop is a member that shares input and output with ours. Three modes,
 * positional arguments:
 *
 *   ctp BOOTSTRAP GROUP INPUT OUTPUT TXN_ID_PREFIX COUNT [classic|consumer]
 *
 *     The common Java consume-transform-produce loop, exactly as the KafkaProducer and
 *     KafkaConsumer documentation describe it. One transactional producer, transactional.id =
 *     TXN_ID_PREFIX + "-" + this process's pid (unique per process: with KIP-447 the group
 *     generation, not a static id per partition, fences a zombie); one KafkaConsumer subscribed to
 *     INPUT in GROUP with isolation.level=read_committed, enable.auto.commit=false,
 *     auto.offset.reset=earliest, group.protocol as given (default classic). Each poll that
 *     returned records: beginTransaction; one output record per input record to OUTPUT (key = the
 *     input key, value = "fill:" + the input value, partition chosen by Java's default
 *     partitioner); sendOffsetsToTransaction(next offset of each polled partition,
 *     consumer.groupMetadata()); commitTransaction. The transaction is always closed before the
 *     next poll, so a revocation (which happens inside poll) never finds one open: the revocation
 *     listener has nothing to commit, and a commit with a stale generation (the group moved on
 *     meanwhile) is refused by the broker through the groupMetadata (CommitFailedException, an
 *     abortable error). Errors as the KafkaProducer documentation says: ProducerFencedException,
 *     OutOfOrderSequenceException, AuthorizationException and UnsupportedVersionException are
 *     fatal (the producer is closed, the member stops, result=fenced or result=error); any other
 *     KafkaException aborts the transaction and the consumer seeks back to the first offset of the
 *     aborted transaction in each partition it still owns (so those records are processed again,
 *     in a new transaction). Stops once COUNT input records were committed in total (the last
 *     poll is cut at COUNT; the records after it are neither produced nor committed) or on
 *     SIGTERM (an open transaction is aborted). It prints, after initTransactions:
 *
 *       txnpeer started transactional.id=ID group=GROUP protocol=P
 *
 *     and at the end one line (consumed and produced count only committed transactions; aborted
 *     counts aborted transactions):
 *
 *       txnpeer consumed=N produced=N transactions=T aborted=A elapsed_ms=E result=R
 *
 *     R is done (COUNT reached; exit 0), stopped (SIGTERM; the JVM exits 143), fenced (a fatal
 *     producer error, e.g. another producer initialised the same transactional.id; exit 3) or
 *     error (anything else; exit 1, the cause on stderr). elapsed_ms runs from the first record
 *     received to the last commit.
 *
 *   read-committed BOOTSTRAP TOPIC EXPECTED_COUNT TIMEOUT_MS
 *
 *     Reads all of TOPIC from the beginning with isolation.level=read_committed, no group
 *     (assign() of every partition, seekToBeginning), until it has EXPECTED_COUNT records and
 *     has reached the end of every partition (the last stable offset, which is what
 *     endOffsets() answers a read_committed consumer: so a record beyond the expected ones is
 *     printed too), or TIMEOUT_MS passed. One line per record, in the order received:
 *
 *       rec PARTITION OFFSET KEY VALUE
 *
 *     KEY and VALUE as UTF-8 text, "-" for null (the value is the rest of the line). Then
 *
 *       done count=N
 *
 *     Exit status 0, or 1 when TIMEOUT_MS passed first (the line still printed).
 *
 *   write-aborted BOOTSTRAP TOPIC TXN_ID
 *
 *     Writes to partition 0 of TOPIC (key = value), with two transactional producers, TXN_ID and
 *     TXN_ID + "-b", so that a reader must tell aborted records by their producer's abort marker
 *     and not only by position: in log order
 *
 *       c-0..c-9    producer A, committed (then A's commit marker)
 *       a-0..a-4    producer A, its second transaction, later aborted
 *       c-10..c-14  producer B, committed        (interleaved with A's open transaction)
 *       a-5..a-9    producer A
 *       c-15..c-19  producer B, then B's commit marker
 *       (A's abort marker)
 *
 *     Each group is flushed before the next is sent, so each lies in batches of its own. Prints
 *     "done committed=20 aborted=10". A read_committed reader of the partition must return
 *     c-0..c-19 in that order and none of a-*; a read_uncommitted one returns all 30.
 *
 * Run from the classes scripts/setup-test-env compiles:
 *
 *   java -cp .cache/java/classes-4.4.0:"$(cat .cache/kafka/clients-4.4.0/classpath)" TxnPeer MODE ...
 *
 * Only stdout carries results; client logs go to stderr at WARN. Exit status 2 on a usage error.
 * Only the JDK and kafka-clients are used.
 */

import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
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
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.CloseOptions;
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
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnPeer {
    /** The real stdout: results only (System.out is stderr once logging is configured). */
    static final PrintStream results = System.out;

    static final String USAGE = "usage: TxnPeer ctp BOOTSTRAP GROUP INPUT OUTPUT TXN_ID_PREFIX COUNT [classic|consumer]\n"
            + "       TxnPeer read-committed BOOTSTRAP TOPIC EXPECTED_COUNT TIMEOUT_MS\n"
            + "       TxnPeer write-aborted BOOTSTRAP TOPIC TXN_ID";

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            usage("a mode is required");
        }
        configureLogging();
        switch (args[0]) {
            case "ctp":
                if (args.length != 7 && args.length != 8) {
                    usage("ctp takes 6 or 7 arguments");
                }
                String protocol = args.length == 8 ? args[7] : "classic";
                if (!protocol.equals("classic") && !protocol.equals("consumer")) {
                    usage("the protocol is classic or consumer, not " + protocol);
                }
                ctp(args[1], args[2], args[3], args[4], args[5], number(args[6]), protocol);
                return;
            case "read-committed":
                if (args.length != 5) {
                    usage("read-committed takes 4 arguments");
                }
                System.exit(readCommitted(args[1], args[2], number(args[3]), number(args[4])));
                return;
            case "write-aborted":
                if (args.length != 4) {
                    usage("write-aborted takes 3 arguments");
                }
                writeAborted(args[1], args[2], args[3]);
                System.exit(0);
                return;
            default:
                usage("unknown mode " + args[0]);
        }
    }

    static long number(String s) {
        try {
            return Long.parseLong(s);
        } catch (NumberFormatException e) {
            usage("not a number: " + s);
            return 0;
        }
    }

    static void usage(String why) {
        System.err.println(USAGE);
        System.err.println("TxnPeer: error: " + why);
        System.exit(2);
    }

    // ---------------------------------------------------------------------------------------
    // ctp

    /** How a ctp run ended (the result= field). */
    enum Result { done, stopped, fenced, error }

    static void ctp(String bootstrap, String group, String input, String output, String prefix, long count,
            String protocol) throws InterruptedException {
        String txnId = prefix + "-" + ProcessHandle.current().pid();
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.CLIENT_ID_CONFIG, "txnpeer-" + txnId);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "txnpeer-" + txnId);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());

        KafkaProducer<String, String> producer = new KafkaProducer<>(pp);
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp);
        // SIGTERM: stop the loop (wakeup interrupts a poll) and wait until the final line is out.
        CountDownLatch finished = new CountDownLatch(1);
        AtomicBoolean stop = new AtomicBoolean();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop.set(true);
            try {
                consumer.wakeup();
            } catch (RuntimeException e) {
                // Already closed: the loop is over.
            }
            try {
                finished.await(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "txnpeer-sigterm"));

        long consumed = 0, produced = 0, transactions = 0, aborted = 0;
        long firstRecordNs = 0, lastCommitNs = 0;
        Result result = Result.done;
        Throwable cause = null;
        boolean open = false;
        // The first offset of each partition in the open transaction: where to seek back after
        // an abort.
        Map<TopicPartition, Long> firstInTxn = new HashMap<>();
        try {
            producer.initTransactions();
            results.printf("txnpeer started transactional.id=%s group=%s protocol=%s%n", txnId, group, protocol);
            results.flush();
            consumer.subscribe(List.of(input), new ConsumerRebalanceListener() {
                // The transaction is closed before every poll (see the header): nothing to commit
                // here; the consumer forgets the positions of what it loses.
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {}

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {}
            });
            while (consumed < count) {
                if (stop.get()) {
                    result = Result.stopped;
                    break;
                }
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
                if (records.isEmpty()) {
                    continue;
                }
                if (firstRecordNs == 0) {
                    firstRecordNs = System.nanoTime();
                }
                long room = count - consumed;
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                List<ProducerRecord<String, String>> out = new ArrayList<>();
                firstInTxn.clear();
                for (ConsumerRecord<String, String> r : records) {
                    if (out.size() >= room) {
                        break;
                    }
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    firstInTxn.putIfAbsent(tp, r.offset());
                    offsets.put(tp, new OffsetAndMetadata(r.offset() + 1));
                    out.add(new ProducerRecord<>(output, r.key(), "fill:" + r.value()));
                }
                // Records past COUNT in this poll: not processed; they stay for the next member.
                try {
                    producer.beginTransaction();
                    open = true;
                    for (ProducerRecord<String, String> o : out) {
                        producer.send(o);
                    }
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    producer.commitTransaction();
                    open = false;
                    lastCommitNs = System.nanoTime();
                    consumed += out.size();
                    produced += out.size();
                    transactions++;
                } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException
                        | UnsupportedVersionException e) {
                    throw e;
                } catch (KafkaException e) {
                    // Abortable (a refused offset commit with a stale generation, a timeout...).
                    System.err.println("TxnPeer: aborting a transaction: " + e);
                    producer.abortTransaction();
                    open = false;
                    aborted++;
                    rewind(consumer, firstInTxn);
                }
            }
        } catch (WakeupException e) {
            result = Result.stopped;
        } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException
                | UnsupportedVersionException e) {
            result = Result.fenced;
            cause = e;
        } catch (RuntimeException e) {
            result = Result.error;
            cause = e;
        }
        if (open && result != Result.fenced) {
            try {
                producer.abortTransaction();
                aborted++;
            } catch (RuntimeException e) {
                System.err.println("TxnPeer: abort at the end failed: " + e);
            }
        }
        if (cause != null) {
            System.err.println("TxnPeer: " + result + ": " + cause);
            cause.printStackTrace();
        }
        // A fenced producer can only be closed (the documentation's pattern).
        producer.close(Duration.ofSeconds(10));
        try {
            consumer.close(CloseOptions.timeout(Duration.ofSeconds(10)));
        } catch (RuntimeException e) {
            System.err.println("TxnPeer: consumer close: " + e);
        }
        long elapsedMs = firstRecordNs == 0 ? 0 : (Math.max(lastCommitNs, firstRecordNs) - firstRecordNs) / 1_000_000;
        results.printf("txnpeer consumed=%d produced=%d transactions=%d aborted=%d elapsed_ms=%d result=%s%n",
                consumed, produced, transactions, aborted, elapsedMs, result);
        results.flush();
        finished.countDown();
        if (result == Result.fenced) {
            System.exit(3);
        } else if (result == Result.error) {
            System.exit(1);
        }
        // done or stopped: return normally (a SIGTERM's JVM shutdown is already under way).
    }

    /** After an abort: back to the first offset of the aborted transaction, where still owned. */
    static void rewind(KafkaConsumer<?, ?> consumer, Map<TopicPartition, Long> firstInTxn) {
        Set<TopicPartition> owned = consumer.assignment();
        for (Map.Entry<TopicPartition, Long> e : firstInTxn.entrySet()) {
            if (owned.contains(e.getKey())) {
                consumer.seek(e.getKey(), e.getValue());
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // read-committed

    static int readCommitted(String bootstrap, String topic, long expected, long timeoutMs) {
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "txnpeer-read-committed");
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
        long n = 0;
        boolean reached = false;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo p : consumer.partitionsFor(topic, Duration.ofMillis(Math.max(timeoutMs, 1)))) {
                partitions.add(new TopicPartition(topic, p.partition()));
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            while (System.nanoTime() < deadline) {
                long left = Math.max(1, (deadline - System.nanoTime()) / 1_000_000L);
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(Math.min(left, 200)))) {
                    results.printf("rec %d %d %s %s%n", r.partition(), r.offset(), text(r.key()), text(r.value()));
                    n++;
                }
                if (n >= expected && atEnd(consumer, partitions)) {
                    reached = true;
                    break;
                }
            }
        }
        results.printf("done count=%d%n", n);
        results.flush();
        if (!reached) {
            System.err.printf("TxnPeer: read-committed: %d of %d records (or not at the end) after %d ms%n", n,
                    expected, timeoutMs);
        }
        return reached ? 0 : 1;
    }

    static String text(String s) {
        return s == null ? "-" : s;
    }

    /** Every partition's position at its end (the last stable offset, under read_committed). */
    static boolean atEnd(KafkaConsumer<?, ?> consumer, List<TopicPartition> partitions) {
        Map<TopicPartition, Long> end = consumer.endOffsets(partitions);
        for (TopicPartition tp : partitions) {
            if (consumer.position(tp) < end.get(tp)) {
                return false;
            }
        }
        return true;
    }

    // ---------------------------------------------------------------------------------------
    // write-aborted

    static KafkaProducer<String, String> transactional(String bootstrap, String txnId) {
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.CLIENT_ID_CONFIG, "txnpeer-" + txnId);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        KafkaProducer<String, String> p = new KafkaProducer<>(pp);
        p.initTransactions();
        return p;
    }

    /** Sends prefix-from..prefix-(to-1) to partition 0 and flushes (a batch of their own). */
    static void sendRange(KafkaProducer<String, String> p, String topic, String prefix, int from, int to) {
        for (int i = from; i < to; i++) {
            String v = prefix + "-" + i;
            p.send(new ProducerRecord<>(topic, 0, v, v));
        }
        p.flush();
    }

    static void writeAborted(String bootstrap, String topic, String txnId) {
        try (KafkaProducer<String, String> a = transactional(bootstrap, txnId);
                KafkaProducer<String, String> b = transactional(bootstrap, txnId + "-b")) {
            a.beginTransaction();
            sendRange(a, topic, "c", 0, 10);
            a.commitTransaction();

            a.beginTransaction();
            sendRange(a, topic, "a", 0, 5);
            b.beginTransaction();
            sendRange(b, topic, "c", 10, 15);
            sendRange(a, topic, "a", 5, 10);
            sendRange(b, topic, "c", 15, 20);
            b.commitTransaction();
            a.abortTransaction();
        }
        results.println("done committed=20 aborted=10");
        results.flush();
    }

    // ---------------------------------------------------------------------------------------

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
            Path file = Files.createTempFile("txn-peer-log4j2-", ".properties");
            Files.writeString(file, p);
            file.toFile().deleteOnExit();
            System.setProperty("log4j2.configurationFile", file.toString());
        } catch (IOException e) {
            System.err.println("TxnPeer: cannot write the log4j2 configuration: " + e);
        }
        // Whatever else prints to System.out ends up on stderr.
        System.setOut(System.err);
    }
}
