/*
 * One share-group member (KIP-932) driven by the Java reference client: Apache Kafka's
 * KafkaShareConsumer with explicit acknowledgement (share.acknowledgement.mode=explicit).
 *
 * The share-group tests run it beside our own share consumers in one share group, so that
 * Apache Kafka's own client takes records from the same share-partitions; it can also set the
 * group's configuration (Admin.incrementalAlterConfigs on a GROUP resource) and exit. Run it as
 * a single-file program, no build step (Java 11+ compiles it in memory), like scripts/Peer.java:
 *
 *   java -cp "$(cat .cache/kafka/clients-4.4.0/classpath)" scripts/SharePeer.java
 *        --bootstrap B --group G [--topic T ...] [--name NAME]
 *        [--process-ms N] [--release KEY ...] [--release-first KEY ...] [--reject KEY ...]
 *        [--max-records N] [--stop-after-idle-ms N] [--set NAME=VALUE ...]
 *        [--set-group-config NAME=VALUE ...] [--no-stdin] [--debug]
 *
 * --set-group-config (repeatable) sets the share group's configuration before anything else,
 * e.g. share.auto.offset.reset=earliest or share.record.lock.duration.ms=5000, and waits
 * (bounded, 30 s) until DescribeConfigs shows every value; without --topic the member then exits
 * 0 (a configuration tool). --set (repeatable) passes any consumer setting.
 *
 * Per record, in the order received: --process-ms of simulated work (a sleep), then one event
 * line, then the acknowledgement:
 *   applied   then acknowledge(record, ACCEPT)
 *   released  the key is one of --release (every delivery to this member), or of
 *             --release-first and this is the record's first delivery: acknowledge(RELEASE)
 *   rejected  the key is one of --reject: acknowledge(REJECT)
 * After each poll that returned records, every record of it acknowledged, commitSync() sends
 * the acknowledgements (ShareAcknowledge) and its result is printed per partition.
 *
 * Events, one JSON object per line on stdout, flushed after each; every line has "event",
 * "member" (--name) and "mono_ns" (System.nanoTime(): CLOCK_MONOTONIC on Linux, the clock of
 * Rust's Instant and Python's time.monotonic_ns(), comparable across the processes of a host):
 *   {"event":"group_config","member":M,"group":G,"configs":{"k":"v",...},"mono_ns":N}
 *   {"event":"ready","member":M,"topics":[...],"mono_ns":N}          subscribed
 *   {"event":"applied","member":M,"topic":T,"partition":P,"offset":O,"key":K,
 *    "delivery_count":D,"mono_ns":N}                                 (also released, rejected)
 *   {"event":"lock_timeout","member":M,"ms":L,"mono_ns":N}           the acquisition lock
 *                                                                    duration, once known
 *   {"event":"commit","member":M,"topic":T,"partition":P,"ok":true|false,"error":E|null,
 *    "mono_ns":N}                                                    commitSync's result
 *   {"event":"ack_failed","member":M,"topic":T,"partition":P,"offsets":[O,...],"error":E,
 *    "mono_ns":N}                                                    acknowledgements the broker
 *                                                                    refused (the client's
 *                                                                    commit callback)
 *   {"event":"error","member":M,"error":E,"fatal":B,"mono_ns":N}
 *   {"event":"closed","member":M,"applied":A,"released":R,"rejected":J,"mono_ns":N}
 * K is the key as UTF-8 text (null for a null key); D is the delivery count the broker sent.
 *
 * Stopping: "close" or "quit" on stdin, EOF on stdin (unless --no-stdin), SIGTERM, --max-records
 * (that many applied) or --stop-after-idle-ms (no record for that long once one arrived) close
 * the consumer: the records of the current poll not processed yet are RELEASEd (no event), the
 * pending acknowledgements are sent, the member leaves the group, "closed" is printed. Exit
 * status 0 (after SIGTERM too), 2 on a usage error (message on stderr, no event), 1 after a
 * fatal error.
 *
 * Client logs go to stderr at WARN (--debug: INFO, the share consumer internals at DEBUG).
 * Only the JDK and kafka-clients are used.
 */

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class SharePeer {
    /** The real stdout, for events only; System.out is pointed at stderr before any logging. */
    static final PrintStream EVENTS =
            new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);

    static final AtomicBoolean STOP = new AtomicBoolean(false);

    /** The exit status once run() returned (SIGTERM's shutdown hook exits with it too). */
    static final AtomicInteger STATUS = new AtomicInteger(0);

    static final String USAGE =
            "usage: SharePeer.java --bootstrap B --group G [--topic T ...] [--name NAME]\n"
                    + "       [--process-ms N] [--release KEY ...] [--release-first KEY ...]"
                    + " [--reject KEY ...]\n"
                    + "       [--max-records N] [--stop-after-idle-ms N] [--set NAME=VALUE ...]\n"
                    + "       [--set-group-config NAME=VALUE ...] [--no-stdin] [--debug]";

    static final class Options {
        String bootstrap;
        String group;
        List<String> topics = new ArrayList<>();
        String name = "java-share";
        long processMs;
        Set<String> release = new TreeSet<>();
        Set<String> releaseFirst = new TreeSet<>();
        Set<String> reject = new TreeSet<>();
        long maxRecords;
        long stopAfterIdleMs;
        Map<String, String> settings = new LinkedHashMap<>();
        Map<String, String> groupConfigs = new LinkedHashMap<>();
        boolean noStdin;
        boolean debug;
    }

    static final class UsageError extends Exception {
        UsageError(String message) {
            super(message);
        }
    }

    static Options parse(String[] args) throws UsageError {
        Options o = new Options();
        for (int i = 0; i < args.length; i++) {
            String flag = args[i];
            switch (flag) {
                case "--no-stdin":
                    o.noStdin = true;
                    continue;
                case "--debug":
                    o.debug = true;
                    continue;
                case "-h":
                case "--help":
                    System.err.println(USAGE);
                    System.exit(0);
                    return o;
                default:
                    break;
            }
            if (i + 1 >= args.length) {
                throw new UsageError("argument " + flag + ": expected one argument");
            }
            String value = args[++i];
            switch (flag) {
                case "--bootstrap":
                    o.bootstrap = value;
                    break;
                case "--group":
                    o.group = value;
                    break;
                case "--topic":
                    o.topics.add(value);
                    break;
                case "--name":
                    o.name = value;
                    break;
                case "--process-ms":
                    o.processMs = number(flag, value);
                    break;
                case "--release":
                    o.release.add(value);
                    break;
                case "--release-first":
                    o.releaseFirst.add(value);
                    break;
                case "--reject":
                    o.reject.add(value);
                    break;
                case "--max-records":
                    o.maxRecords = number(flag, value);
                    break;
                case "--stop-after-idle-ms":
                    o.stopAfterIdleMs = number(flag, value);
                    break;
                case "--set":
                    keyValue(flag, value, o.settings);
                    break;
                case "--set-group-config":
                    keyValue(flag, value, o.groupConfigs);
                    break;
                default:
                    throw new UsageError("unrecognized argument: " + flag);
            }
        }
        List<String> missing = new ArrayList<>();
        if (o.bootstrap == null) {
            missing.add("--bootstrap");
        }
        if (o.group == null) {
            missing.add("--group");
        }
        if (o.topics.isEmpty() && o.groupConfigs.isEmpty()) {
            missing.add("--topic (or --set-group-config alone)");
        }
        if (!missing.isEmpty()) {
            throw new UsageError("the following arguments are required: " + String.join(", ", missing));
        }
        return o;
    }

    static long number(String flag, String value) throws UsageError {
        try {
            long n = Long.parseLong(value);
            if (n < 0) {
                throw new NumberFormatException();
            }
            return n;
        } catch (NumberFormatException e) {
            throw new UsageError("argument " + flag + ": invalid non-negative number: '" + value + "'");
        }
    }

    static void keyValue(String flag, String value, Map<String, String> into) throws UsageError {
        int eq = value.indexOf('=');
        if (eq <= 0) {
            throw new UsageError("argument " + flag + ": expected NAME=VALUE, got '" + value + "'");
        }
        into.put(value.substring(0, eq), value.substring(eq + 1));
    }

    // ------------------------------------------------------------------------------------------
    // Events
    // ------------------------------------------------------------------------------------------

    /** A JSON string literal (null for null): quotes, backslashes and control characters escaped. */
    static String json(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder(s.length() + 2);
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"':
                    b.append("\\\"");
                    break;
                case '\\':
                    b.append("\\\\");
                    break;
                case '\n':
                    b.append("\\n");
                    break;
                case '\r':
                    b.append("\\r");
                    break;
                case '\t':
                    b.append("\\t");
                    break;
                default:
                    if (c < 0x20 || c == 0x7f || c == '\u2028' || c == '\u2029') {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }

    static final class Events {
        final String member;
        boolean broken;

        Events(String member) {
            this.member = member;
        }

        /** One line: event, member, the given fields (values already JSON), then mono_ns. */
        synchronized void emit(String event, String... fields) {
            if (broken) {
                return;
            }
            StringBuilder b = new StringBuilder(160);
            b.append("{\"event\":").append(json(event));
            b.append(",\"member\":").append(json(member));
            for (int i = 0; i + 1 < fields.length; i += 2) {
                b.append(',').append(json(fields[i])).append(':').append(fields[i + 1]);
            }
            b.append(",\"mono_ns\":").append(System.nanoTime()).append("}\n");
            EVENTS.print(b);
            EVENTS.flush();
            if (EVENTS.checkError()) {
                // Our reader is gone: nobody listens, close quietly.
                broken = true;
                STOP.set(true);
            }
        }

        void error(Throwable e, boolean fatal) {
            emit("error", "error", json(describe(e)), "fatal", Boolean.toString(fatal));
        }
    }

    static String describe(Throwable e) {
        return e.getClass().getSimpleName() + ": " + e.getMessage();
    }

    // ------------------------------------------------------------------------------------------
    // Logging: log4j2 through its configuration file property, to stderr only
    // ------------------------------------------------------------------------------------------

    static void configureLogging(boolean debug) {
        StringBuilder p = new StringBuilder();
        p.append("status = error\n");
        // log4j2's own shutdown hook would stop logging while ours closes the consumer (SIGTERM).
        p.append("shutdownHook = disable\n");
        p.append("appender.err.type = Console\n");
        p.append("appender.err.name = err\n");
        p.append("appender.err.target = SYSTEM_ERR\n");
        p.append("appender.err.layout.type = PatternLayout\n");
        p.append("appender.err.layout.pattern = %d{HH:mm:ss.SSS} [%t] %-5level %c{1.} %msg%n\n");
        p.append("rootLogger.level = ").append(debug ? "info" : "warn").append('\n');
        p.append("rootLogger.appenderRef.err.ref = err\n");
        if (debug) {
            p.append("logger.share.name = org.apache.kafka.clients.consumer.internals\n");
            p.append("logger.share.level = debug\n");
        }
        try {
            Path file = Files.createTempFile("share-peer-log4j2-", ".properties");
            Files.writeString(file, p.toString());
            file.toFile().deleteOnExit();
            System.setProperty("log4j2.configurationFile", file.toString());
        } catch (IOException e) {
            System.err.println("SharePeer.java: cannot write the log4j2 configuration: " + e);
        }
        // Nothing but events on stdout: whatever prints to System.out ends up on stderr.
        System.setOut(System.err);
    }

    // ------------------------------------------------------------------------------------------
    // The group's configuration
    // ------------------------------------------------------------------------------------------

    /**
     * Sets the share group's configuration (incrementalAlterConfigs, GROUP resource) and waits,
     * bounded, until DescribeConfigs returns every value: the controller commits the change to
     * the metadata log and the broker applies it a moment later.
     */
    static void setGroupConfigs(Options opts, Events ev) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, opts.bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, opts.name + "-admin");
        ConfigResource group = new ConfigResource(ConfigResource.Type.GROUP, opts.group);
        List<AlterConfigOp> ops = new ArrayList<>();
        for (Map.Entry<String, String> kv : opts.groupConfigs.entrySet()) {
            ops.add(new AlterConfigOp(new ConfigEntry(kv.getKey(), kv.getValue()), AlterConfigOp.OpType.SET));
        }
        try (Admin admin = Admin.create(props)) {
            admin.incrementalAlterConfigs(Map.of(group, ops)).all().get(30, TimeUnit.SECONDS);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (true) {
                Config config = admin.describeConfigs(List.of(group)).all().get(30, TimeUnit.SECONDS).get(group);
                List<String> pending = new ArrayList<>();
                for (Map.Entry<String, String> kv : opts.groupConfigs.entrySet()) {
                    ConfigEntry entry = config == null ? null : config.get(kv.getKey());
                    if (entry == null || !kv.getValue().equals(entry.value())) {
                        pending.add(kv.getKey() + "=" + (entry == null ? "(absent)" : entry.value()));
                    }
                }
                if (pending.isEmpty()) {
                    break;
                }
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("group " + opts.group
                            + ": configuration not in force within 30 s: " + String.join(", ", pending));
                }
                Thread.sleep(100);
            }
        }
        StringBuilder configs = new StringBuilder("{");
        for (Map.Entry<String, String> kv : opts.groupConfigs.entrySet()) {
            if (configs.length() > 1) {
                configs.append(',');
            }
            configs.append(json(kv.getKey())).append(':').append(json(kv.getValue()));
        }
        ev.emit("group_config", "group", json(opts.group), "configs", configs.append('}').toString());
    }

    // ------------------------------------------------------------------------------------------
    // The member
    // ------------------------------------------------------------------------------------------

    public static void main(String[] args) {
        Options opts;
        try {
            opts = parse(args);
        } catch (UsageError e) {
            System.err.println(USAGE);
            System.err.println("SharePeer.java: error: " + e.getMessage());
            System.exit(2);
            return;
        }
        configureLogging(opts.debug);
        Events ev = new Events(opts.name);
        if (!opts.groupConfigs.isEmpty()) {
            try {
                setGroupConfigs(opts, ev);
            } catch (Exception e) {
                ev.error(e, true);
                System.exit(1);
                return;
            }
            if (opts.topics.isEmpty()) {
                System.exit(0);
                return;
            }
        }

        CountDownLatch done = new CountDownLatch(1);
        // Set once the consumer exists, so that SIGTERM can interrupt a poll in progress.
        final KafkaShareConsumer<?, ?>[] current = new KafkaShareConsumer<?, ?>[1];
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            // SIGTERM: close gracefully, like a close line on stdin.
            STOP.set(true);
            KafkaShareConsumer<?, ?> c;
            synchronized (current) {
                c = current[0];
            }
            if (c != null) {
                c.wakeup();
            }
            try {
                if (done.await(40, TimeUnit.SECONDS)) {
                    // The close went through: exit with main's status, not the JVM's 143.
                    Runtime.getRuntime().halt(STATUS.get());
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "share-peer-shutdown"));
        if (!opts.noStdin) {
            Thread stdin = new Thread(() -> {
                try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = in.readLine()) != null) {
                        String cmd = line.strip();
                        if (cmd.equals("close") || cmd.equals("quit")) {
                            break;
                        }
                    }
                } catch (IOException e) {
                    // A closed or broken stdin is EOF too.
                }
                STOP.set(true);
            }, "share-peer-stdin");
            stdin.setDaemon(true);
            stdin.start();
        }

        long[] counts = new long[3];
        try {
            run(opts, ev, current, counts);
        } catch (Throwable e) {
            ev.error(e, true);
            STATUS.set(1);
        } finally {
            ev.emit("closed", "applied", Long.toString(counts[0]), "released", Long.toString(counts[1]),
                    "rejected", Long.toString(counts[2]));
            done.countDown();
        }
        System.exit(STATUS.get());
    }

    /** counts: applied, released, rejected (read by main for the closed line). */
    static void run(Options opts, Events ev, KafkaShareConsumer<?, ?>[] current, long[] counts) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opts.bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, opts.group);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, opts.name);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        props.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, "explicit");
        props.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, 5000);
        props.putAll(opts.settings);

        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            synchronized (current) {
                current[0] = consumer;
            }
            // The broker's word on acknowledgements it refused, with their offsets; called on
            // this thread inside poll and commitSync.
            consumer.setAcknowledgementCommitCallback((offsets, error) -> {
                if (error == null) {
                    return;
                }
                for (Map.Entry<TopicIdPartition, Set<Long>> e : offsets.entrySet()) {
                    ev.emit("ack_failed", "topic", json(e.getKey().topic()), "partition",
                            Integer.toString(e.getKey().partition()), "offsets",
                            new TreeSet<>(e.getValue()).toString().replace(" ", ""),
                            "error", json(describe(error)));
                }
            });
            consumer.subscribe(opts.topics);
            StringBuilder topics = new StringBuilder("[");
            for (String t : opts.topics) {
                topics.append(topics.length() > 1 ? "," : "").append(json(t));
            }
            ev.emit("ready", "topics", topics.append(']').toString());
            boolean lockReported = false;
            long lastRecord = -1;
            while (!STOP.get()) {
                if (opts.maxRecords > 0 && counts[0] >= opts.maxRecords) {
                    break;
                }
                if (opts.stopAfterIdleMs > 0 && lastRecord >= 0
                        && System.nanoTime() - lastRecord > TimeUnit.MILLISECONDS.toNanos(opts.stopAfterIdleMs)) {
                    break;
                }
                ConsumerRecords<byte[], byte[]> records;
                try {
                    records = consumer.poll(Duration.ofMillis(100));
                } catch (WakeupException e) {
                    break;
                } catch (KafkaException e) {
                    ev.error(e, false);
                    sleepQuietly(100);
                    continue;
                }
                if (!lockReported) {
                    Optional<Integer> lock = consumer.acquisitionLockTimeoutMs();
                    if (lock.isPresent()) {
                        ev.emit("lock_timeout", "ms", Integer.toString(lock.get()));
                        lockReported = true;
                    }
                }
                if (records.isEmpty()) {
                    continue;
                }
                lastRecord = System.nanoTime();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    if (STOP.get()) {
                        // Stopping: what this member did not process goes back to the group now,
                        // not when its lock runs out.
                        consumer.acknowledge(r, AcknowledgeType.RELEASE);
                        continue;
                    }
                    if (opts.processMs > 0) {
                        sleepQuietly(opts.processMs);
                    }
                    String key = r.key() == null ? null : new String(r.key(), StandardCharsets.UTF_8);
                    int delivery = r.deliveryCount().map(Short::intValue).orElse(-1);
                    String event;
                    AcknowledgeType type;
                    if (key != null && opts.reject.contains(key)) {
                        event = "rejected";
                        type = AcknowledgeType.REJECT;
                        counts[2]++;
                    } else if (key != null && (opts.release.contains(key)
                            || (delivery == 1 && opts.releaseFirst.contains(key)))) {
                        event = "released";
                        type = AcknowledgeType.RELEASE;
                        counts[1]++;
                    } else {
                        event = "applied";
                        type = AcknowledgeType.ACCEPT;
                        counts[0]++;
                    }
                    ev.emit(event, "topic", json(r.topic()), "partition", Integer.toString(r.partition()),
                            "offset", Long.toString(r.offset()), "key", json(key),
                            "delivery_count", Integer.toString(delivery));
                    consumer.acknowledge(r, type);
                }
                lastRecord = System.nanoTime();
                Map<TopicIdPartition, Optional<KafkaException>> result;
                try {
                    result = consumer.commitSync();
                } catch (WakeupException e) {
                    break;
                } catch (KafkaException e) {
                    ev.error(e, false);
                    continue;
                }
                for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : result.entrySet()) {
                    Optional<KafkaException> error = e.getValue();
                    ev.emit("commit", "topic", json(e.getKey().topic()), "partition",
                            Integer.toString(e.getKey().partition()), "ok", Boolean.toString(error.isEmpty()),
                            "error", error.map(x -> json(describe(x))).orElse("null"));
                }
            }
            // close() (end of the try) sends what is still unacknowledged and leaves the group.
        }
    }

    static void sleepQuietly(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
