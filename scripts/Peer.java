/*
 * One long-running consumer-group member driven by the Java reference client (kafka-clients).
 *
 * The interoperability tests run it next to our own member and the Python peers
 * (scripts/peer_member.py), so that every rebalance is also decided and observed by Apache
 * Kafka's own consumer. It speaks exactly the command-line flags and the JSON-lines stdout
 * protocol of scripts/peer_member.py (read that docstring), plus one event of its own (below).
 * Run it as a single-file program, no build step (Java 11+ compiles it in memory):
 *
 *   java -cp "$(cat .cache/kafka/clients-4.4.0/classpath)" scripts/Peer.java
 *        --bootstrap B --group G --topic T [--topic T2 ...]
 *        --strategy range|roundrobin|cooperative-sticky
 *        [--instance-id ID] [--session-timeout-ms N] [--heartbeat-interval-ms N]
 *        [--max-poll-interval-ms N] [--name NAME] [--consume] [--debug]
 *        [--group-protocol classic|consumer] [--remote-assignor uniform|range]
 *        [--client java]
 *
 * The classpath file is written by scripts/setup-test-env (kafka-clients and a log4j2 binding).
 *
 * Strategies (classic protocol): range -> RangeAssignor, roundrobin -> RoundRobinAssignor,
 * cooperative-sticky -> CooperativeStickyAssignor (the incremental protocol). Each is wrapped so
 * that the member also reports when it led a rebalance (the classic leader is the one member
 * whose assignor computes the assignment):
 *   {"name":N,"event":"led","members":COUNT,"t":T}   this member computed the group's assignment
 * The wrapper delegates every call (name, supported protocols, subscription user data,
 * onAssignment), so what goes on the wire is exactly what the bare assignor sends.
 *
 * --group-protocol consumer (KIP-848): the broker assigns; Java 4.x refuses
 * partition.assignment.strategy, session.timeout.ms and heartbeat.interval.ms with it, so
 * --strategy, --session-timeout-ms and --heartbeat-interval-ms are refused here too (the
 * broker's group.consumer.* settings decide). --remote-assignor sets group.remote.assignor.
 * Rebalances are incremental: assigned/revoked carry only the change.
 *
 * Events, one JSON object per line on stdout, flushed after each: ready, assigned, revoked, lost,
 * error, record (--consume), closed, and led (above), with the fields of peer_member.py;
 * "partitions" and "owned" are sorted by (topic, partition). "t" is System.nanoTime() in seconds,
 * which on Linux is CLOCK_MONOTONIC, the clock of Python's time.monotonic(): comparable across
 * the peer processes of one host. Listener callbacks are reported exactly as the client calls
 * them (Java calls onPartitionsAssigned after every rebalance, with an empty collection when
 * nothing was added). Java's close() calls onPartitionsRevoked for whatever is still owned, so
 * "closed" normally lists nothing.
 *
 * Offsets: auto commit is off. After each poll that returned records the member commits, with
 * commitSync, the next offset (last + 1) of every partition in the batch; in onPartitionsRevoked
 * it commits, with commitSync, the consumed positions of the revoked partitions (losses never
 * commit). A refused commit is an "error" event with "fatal":false.
 *
 * Stdin takes line commands: "close" or "quit" close the member gracefully (LeaveGroup, unless
 * it is a static member with --instance-id), and so do EOF and SIGTERM. The process exits 0
 * after printing "closed"; 2 on a usage error (the message on stderr, no event).
 *
 * Client logs go to stderr, never stdout: WARN by default; --debug adds the group protocol
 * (org.apache.kafka.clients.consumer.internals and the group coordinator clients) at DEBUG.
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
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.errors.FencedInstanceIdException;
import org.apache.kafka.common.errors.GroupAuthorizationException;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.InvalidGroupIdException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class Peer {
    /** The real stdout, for events only; System.out is pointed at stderr before any logging. */
    static final PrintStream EVENTS =
            new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);

    static final AtomicBoolean STOP = new AtomicBoolean(false);

    static volatile Events events;

    // ------------------------------------------------------------------------------------------
    // Options
    // ------------------------------------------------------------------------------------------

    static final class Options {
        String bootstrap;
        String group;
        List<String> topics = new ArrayList<>();
        String strategy;
        String instanceId;
        Integer sessionTimeoutMs;
        Integer heartbeatIntervalMs;
        int maxPollIntervalMs = 30000;
        String name = "peer-member";
        boolean consume;
        boolean debug;
        String groupProtocol = "classic";
        String remoteAssignor;
    }

    static final class UsageError extends Exception {
        UsageError(String message) {
            super(message);
        }
    }

    static final String USAGE =
            "usage: Peer.java --bootstrap B --group G --topic T [--topic T2 ...]\n"
                    + "                 --strategy range|roundrobin|cooperative-sticky\n"
                    + "                 [--instance-id ID] [--session-timeout-ms N]\n"
                    + "                 [--heartbeat-interval-ms N] [--max-poll-interval-ms N]\n"
                    + "                 [--name NAME] [--consume] [--debug]\n"
                    + "                 [--group-protocol classic|consumer]"
                    + " [--remote-assignor uniform|range] [--client java]";

    static Options parse(String[] args) throws UsageError {
        Options o = new Options();
        for (int i = 0; i < args.length; i++) {
            String flag = args[i];
            String inline = null;
            int eq = flag.indexOf('=');
            if (flag.startsWith("--") && eq > 0) {
                inline = flag.substring(eq + 1);
                flag = flag.substring(0, eq);
            }
            switch (flag) {
                case "--consume":
                case "--debug":
                    if (inline != null) {
                        throw new UsageError(flag + " takes no value");
                    }
                    if (flag.equals("--consume")) {
                        o.consume = true;
                    } else {
                        o.debug = true;
                    }
                    continue;
                case "-h":
                case "--help":
                    System.err.println(USAGE);
                    System.exit(0);
                    return o;
                default:
                    break;
            }
            String value;
            if (inline != null) {
                value = inline;
            } else {
                if (i + 1 >= args.length) {
                    throw new UsageError("argument " + flag + ": expected one argument");
                }
                value = args[++i];
            }
            switch (flag) {
                case "--client":
                    if (!value.equals("java")) {
                        throw new UsageError("argument --client: invalid choice: '" + value
                                + "' (this is the Java peer; choose 'java')");
                    }
                    break;
                case "--bootstrap":
                    o.bootstrap = value;
                    break;
                case "--group":
                    o.group = value;
                    break;
                case "--topic":
                    o.topics.add(value);
                    break;
                case "--strategy":
                    if (!List.of("range", "roundrobin", "cooperative-sticky").contains(value)) {
                        throw new UsageError("argument --strategy: invalid choice: '" + value + "'");
                    }
                    o.strategy = value;
                    break;
                case "--instance-id":
                    o.instanceId = value;
                    break;
                case "--session-timeout-ms":
                    o.sessionTimeoutMs = integer(flag, value);
                    break;
                case "--heartbeat-interval-ms":
                    o.heartbeatIntervalMs = integer(flag, value);
                    break;
                case "--max-poll-interval-ms":
                    o.maxPollIntervalMs = integer(flag, value);
                    break;
                case "--name":
                    o.name = value;
                    break;
                case "--group-protocol":
                    if (!value.equals("classic") && !value.equals("consumer")) {
                        throw new UsageError("argument --group-protocol: invalid choice: '" + value + "'");
                    }
                    o.groupProtocol = value;
                    break;
                case "--remote-assignor":
                    if (!value.equals("uniform") && !value.equals("range")) {
                        throw new UsageError("argument --remote-assignor: invalid choice: '" + value + "'");
                    }
                    o.remoteAssignor = value;
                    break;
                default:
                    throw new UsageError("unrecognized argument: " + args[i]);
            }
        }
        List<String> missing = new ArrayList<>();
        if (o.bootstrap == null) {
            missing.add("--bootstrap");
        }
        if (o.group == null) {
            missing.add("--group");
        }
        if (o.topics.isEmpty()) {
            missing.add("--topic");
        }
        boolean consumerProtocol = o.groupProtocol.equals("consumer");
        if (o.strategy == null && !consumerProtocol) {
            missing.add("--strategy");
        }
        if (!missing.isEmpty()) {
            throw new UsageError("the following arguments are required: " + String.join(", ", missing));
        }
        if (consumerProtocol) {
            // Java 4.x refuses these with group.protocol=consumer: the broker decides them.
            List<String> refused = new ArrayList<>();
            if (o.strategy != null) {
                refused.add("--strategy (use --remote-assignor)");
            }
            if (o.sessionTimeoutMs != null) {
                refused.add("--session-timeout-ms");
            }
            if (o.heartbeatIntervalMs != null) {
                refused.add("--heartbeat-interval-ms");
            }
            if (!refused.isEmpty()) {
                throw new UsageError("--group-protocol consumer refuses " + String.join(", ", refused));
            }
        } else if (o.remoteAssignor != null) {
            throw new UsageError("--remote-assignor needs --group-protocol consumer");
        }
        return o;
    }

    static int integer(String flag, String value) throws UsageError {
        try {
            return Integer.parseInt(value);
        } catch (NumberFormatException e) {
            throw new UsageError("argument " + flag + ": invalid int value: '" + value + "'");
        }
    }

    // ------------------------------------------------------------------------------------------
    // Events
    // ------------------------------------------------------------------------------------------

    /** A JSON string literal: quotes, backslashes and control characters escaped. */
    static String jsonString(String s) {
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
                case '\b':
                    b.append("\\b");
                    break;
                case '\f':
                    b.append("\\f");
                    break;
                default:
                    // Control characters, and the line separators some readers split on.
                    if (c < 0x20 || c == 0x7f || c == '\u2028' || c == '\u2029') {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }

    /** System.nanoTime() (CLOCK_MONOTONIC on Linux) in seconds, exactly, without a double. */
    static String monotonicSeconds() {
        long n = System.nanoTime();
        long secs = Math.floorDiv(n, 1_000_000_000L);
        long frac = Math.floorMod(n, 1_000_000_000L);
        return secs + "." + String.format("%09d", frac);
    }

    static final Comparator<TopicPartition> BY_TOPIC_PARTITION =
            Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition);

    static String pairs(Collection<TopicPartition> partitions) {
        TreeSet<TopicPartition> sorted = new TreeSet<>(BY_TOPIC_PARTITION);
        sorted.addAll(partitions);
        StringBuilder b = new StringBuilder("[");
        for (TopicPartition tp : sorted) {
            if (b.length() > 1) {
                b.append(',');
            }
            b.append('[').append(jsonString(tp.topic())).append(',').append(tp.partition()).append(']');
        }
        return b.append(']').toString();
    }

    /** Prints event lines; remembers the member's ownership. */
    static final class Events {
        final String name;
        final Set<TopicPartition> owned = new TreeSet<>(BY_TOPIC_PARTITION);
        boolean broken;

        Events(String name) {
            this.name = name;
        }

        /** One line: name, event, the given fields (already JSON), then t. */
        synchronized void emit(String event, String... fields) {
            if (broken) {
                return;
            }
            StringBuilder b = new StringBuilder(128);
            b.append("{\"name\":").append(jsonString(name));
            b.append(",\"event\":").append(jsonString(event));
            for (int i = 0; i + 1 < fields.length; i += 2) {
                b.append(',').append(jsonString(fields[i])).append(':').append(fields[i + 1]);
            }
            b.append(",\"t\":").append(monotonicSeconds()).append("}\n");
            EVENTS.print(b);
            EVENTS.flush();
            if (EVENTS.checkError()) {
                // Our reader is gone: nobody listens, close quietly.
                broken = true;
                STOP.set(true);
            }
        }

        synchronized void change(String event, Collection<TopicPartition> partitions, boolean add, boolean replace) {
            if (replace) {
                owned.clear();
            }
            if (add) {
                owned.addAll(partitions);
            } else {
                owned.removeAll(partitions);
            }
            emit(event, "partitions", pairs(partitions), "owned", pairs(owned));
        }

        synchronized void error(String text, boolean fatal) {
            emit("error", "error", jsonString(text), "fatal", fatal ? "true" : "false");
        }

        synchronized void closed() {
            List<TopicPartition> last = new ArrayList<>(owned);
            owned.clear();
            emit("closed", "partitions", pairs(last), "owned", "[]");
        }
    }

    // ------------------------------------------------------------------------------------------
    // Assignors that report leadership
    // ------------------------------------------------------------------------------------------

    /**
     * Delegates everything to a stock assignor and emits "led" when it computes an assignment,
     * which in the classic protocol only the group leader does.
     */
    abstract static class Reporting implements ConsumerPartitionAssignor {
        final ConsumerPartitionAssignor inner;

        Reporting(ConsumerPartitionAssignor inner) {
            this.inner = inner;
        }

        @Override
        public java.nio.ByteBuffer subscriptionUserData(Set<String> topics) {
            return inner.subscriptionUserData(topics);
        }

        @Override
        public GroupAssignment assign(Cluster metadata, GroupSubscription groupSubscription) {
            GroupAssignment assignment = inner.assign(metadata, groupSubscription);
            Events ev = events;
            if (ev != null) {
                ev.emit("led", "members", Integer.toString(groupSubscription.groupSubscription().size()));
            }
            return assignment;
        }

        @Override
        public void onAssignment(Assignment assignment, ConsumerGroupMetadata metadata) {
            inner.onAssignment(assignment, metadata);
        }

        @Override
        public List<RebalanceProtocol> supportedProtocols() {
            return inner.supportedProtocols();
        }

        @Override
        public short version() {
            return inner.version();
        }

        @Override
        public String name() {
            return inner.name();
        }
    }

    public static final class ReportingRange extends Reporting {
        public ReportingRange() {
            super(new RangeAssignor());
        }
    }

    public static final class ReportingRoundRobin extends Reporting {
        public ReportingRoundRobin() {
            super(new RoundRobinAssignor());
        }
    }

    public static final class ReportingCooperativeSticky extends Reporting {
        public ReportingCooperativeSticky() {
            super(new CooperativeStickyAssignor());
        }
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
            p.append("logger.group.name = org.apache.kafka.clients.consumer.internals\n");
            p.append("logger.group.level = debug\n");
            p.append("logger.fetch.name = org.apache.kafka.clients.consumer.internals.AbstractFetch\n");
            p.append("logger.fetch.level = info\n");
            p.append("logger.fetcher.name = org.apache.kafka.clients.consumer.internals.FetchCollector\n");
            p.append("logger.fetcher.level = info\n");
        }
        try {
            Path file = Files.createTempFile("peer-java-log4j2-", ".properties");
            Files.writeString(file, p.toString());
            file.toFile().deleteOnExit();
            System.setProperty("log4j2.configurationFile", file.toString());
        } catch (IOException e) {
            // Without the file log4j2 falls back to ERROR on System.out, which is stderr here.
            System.err.println("Peer.java: cannot write the log4j2 configuration: " + e);
        }
        // Nothing but events on stdout: whatever prints to System.out ends up on stderr.
        System.setOut(System.err);
    }

    // ------------------------------------------------------------------------------------------
    // The member
    // ------------------------------------------------------------------------------------------

    static boolean isFatal(Throwable e) {
        return e instanceof FencedInstanceIdException
                || e instanceof ConfigException
                || e instanceof InvalidConfigurationException
                || e instanceof UnsupportedVersionException
                || e instanceof InvalidGroupIdException
                || e instanceof GroupAuthorizationException
                || e instanceof IllegalStateException
                || e instanceof IllegalArgumentException;
    }

    static String describe(Throwable e) {
        return e.getClass().getSimpleName() + ": " + e.getMessage();
    }

    public static void main(String[] args) {
        Options opts;
        try {
            opts = parse(args);
        } catch (UsageError e) {
            System.err.println(USAGE);
            System.err.println("Peer.java: error: " + e.getMessage());
            System.exit(2);
            return;
        }
        configureLogging(opts.debug);
        Events ev = new Events(opts.name);
        events = ev;

        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            // SIGTERM: close gracefully, like a close line on stdin.
            STOP.set(true);
            try {
                done.await(40, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "peer-shutdown"));
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
        }, "peer-stdin");
        stdin.setDaemon(true);
        stdin.start();

        try {
            run(opts, ev);
        } catch (Throwable e) {
            ev.error(describe(e), true);
        } finally {
            ev.closed();
            done.countDown();
        }
    }

    static void run(Options opts, Events ev) {
        boolean consumerProtocol = opts.groupProtocol.equals("consumer");
        // Incremental callbacks carry only the change; eager ones the whole new assignment.
        boolean incremental = consumerProtocol || "cooperative-sticky".equals(opts.strategy);

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opts.bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, opts.group);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, opts.name);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, opts.maxPollIntervalMs);
        props.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, 5000);
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, opts.groupProtocol);
        if (opts.instanceId != null) {
            props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, opts.instanceId);
        }
        if (consumerProtocol) {
            if (opts.remoteAssignor != null) {
                props.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, opts.remoteAssignor);
            }
        } else {
            Class<?> assignor;
            switch (opts.strategy) {
                case "range":
                    assignor = ReportingRange.class;
                    break;
                case "roundrobin":
                    assignor = ReportingRoundRobin.class;
                    break;
                default:
                    assignor = ReportingCooperativeSticky.class;
                    break;
            }
            // Class objects, not names: the single-file launcher's class loader is not the one
            // Kafka would look names up in.
            props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, List.of(assignor));
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG,
                    opts.sessionTimeoutMs != null ? opts.sessionTimeoutMs : 6000);
            props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG,
                    opts.heartbeatIntervalMs != null ? opts.heartbeatIntervalMs : 500);
        }

        // Consumed positions (last offset + 1) of the current assignment, for the revocation commit.
        Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();

        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    Map<TopicPartition, OffsetAndMetadata> commit = new HashMap<>();
                    for (TopicPartition tp : partitions) {
                        OffsetAndMetadata at = positions.remove(tp);
                        if (at != null) {
                            commit.put(tp, at);
                        }
                    }
                    if (!commit.isEmpty()) {
                        try {
                            consumer.commitSync(commit);
                        } catch (RuntimeException e) {
                            ev.error("commit on revocation failed: " + describe(e), false);
                        }
                    }
                    ev.change("revoked", partitions, false, false);
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> partitions) {
                    // Another member may own them already: never commit.
                    for (TopicPartition tp : partitions) {
                        positions.remove(tp);
                    }
                    ev.change("lost", partitions, false, false);
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    ev.change("assigned", partitions, true, !incremental);
                }
            };
            consumer.subscribe(opts.topics, listener);
            ev.emit("ready");
            while (!STOP.get()) {
                ConsumerRecords<byte[], byte[]> records;
                try {
                    records = consumer.poll(Duration.ofMillis(50));
                } catch (RuntimeException e) {
                    boolean fatal = isFatal(e);
                    ev.error(describe(e), fatal);
                    if (fatal) {
                        break;
                    }
                    sleepQuietly(50);
                    continue;
                }
                if (records.isEmpty()) {
                    continue;
                }
                Map<TopicPartition, OffsetAndMetadata> batch = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    if (opts.consume) {
                        ev.emit("record", "topic", jsonString(r.topic()), "partition",
                                Integer.toString(r.partition()), "offset", Long.toString(r.offset()));
                    }
                    batch.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                positions.putAll(batch);
                try {
                    consumer.commitSync(batch);
                } catch (RuntimeException e) {
                    ev.error("commit failed: " + describe(e), isFatal(e));
                    if (isFatal(e)) {
                        break;
                    }
                }
            }
            // close() (end of the try) runs onPartitionsRevoked and sends LeaveGroup unless static.
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
