/*
 * Apache Kafka's own producer and consumer as the judge of ours (tests/brokers/producer/java.rs):
 * Java's KafkaProducer says where its default partitioner puts each key, and Java's KafkaConsumer
 * says what a batch our producer wrote contains, field by field. Two modes:
 *
 *   --produce: reads keys from --keys-file (one key per line, lowercase hex, so that empty,
 *   binary and non-UTF-8 keys pass unchanged; an empty line is the empty key) and sends record
 *   i with that key and the value "i" (decimal) to --topic (one) with Java's defaults for
 *   everything that decides the partition (the built-in partitioner,
 *   partitioner.ignore.keys=false), acks=all and enable.idempotence=true. Once every send is
 *   acknowledged it prints, in key-file order,
 *
 *     sent I PARTITION OFFSET
 *
 *   (from the RecordMetadata), then "produced N". A failed send prints "failed I ERROR" on
 *   stderr and the exit status is 1.
 *
 *   --consume: reads every --topic (repeatable) from the beginning with one KafkaConsumer
 *   without a group (assign() of every partition of partitionsFor, seekToBeginning), until
 *   --count records arrived (at most --timeout-ms, default 30000: then exit status 1 after
 *   printing what arrived), and prints one line per record in the order received:
 *
 *     rec TOPIC PARTITION OFFSET TIMESTAMP_TYPE TIMESTAMP KEY VALUE NHEADERS [HKEY HVALUE]...
 *
 *   KEY, VALUE and HVALUE are "-" for null, else "x" followed by the bytes in lowercase hex ("x"
 *   alone: empty); HKEY is the header key's UTF-8 bytes the same way. TIMESTAMP_TYPE is
 *   CreateTime, LogAppendTime or NoTimestampType. Then "consumed N". Every record Java's
 *   consumer returned is printed: more than --count is the test's to notice.
 *
 * Both:
 *
 *   java -cp .cache/java/classes-4.4.0:"$(cat .cache/kafka/clients-4.4.0/classpath)" ProducerPeer
 *        --bootstrap B --topic T [--topic T2 ...]
 *        (--produce --keys-file F | --consume --count N [--timeout-ms M])
 *        [--set NAME=VALUE ...]
 *
 * --set (repeatable) passes any producer or consumer setting. Compiled once with javac by
 * scripts/setup-test-env, like Peer.java. Only stdout carries results; client logs go to stderr
 * at WARN. Exit status 2 on a usage error. Only the JDK and kafka-clients are used.
 */

import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ProducerPeer {
    /** The real stdout: results only (System.out is stderr once logging is configured). */
    static PrintStream results = System.out;

    static final String USAGE = "usage: ProducerPeer --bootstrap B --topic T [--topic T2 ...]"
            + " (--produce --keys-file F | --consume --count N [--timeout-ms M]) [--set NAME=VALUE ...]";

    public static void main(String[] args) throws Exception {
        String bootstrap = null, keysFile = null, mode = null;
        List<String> topics = new ArrayList<>();
        long count = -1, timeoutMs = 30_000;
        List<String[]> sets = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            String flag = args[i];
            if (flag.equals("--produce") || flag.equals("--consume")) {
                if (mode != null) {
                    usage("one of --produce and --consume");
                }
                mode = flag;
                continue;
            }
            if (i + 1 >= args.length) {
                usage(flag + " needs a value");
            }
            String value = args[++i];
            switch (flag) {
                case "--bootstrap": bootstrap = value; break;
                case "--topic": topics.add(value); break;
                case "--keys-file": keysFile = value; break;
                case "--count": count = Long.parseLong(value); break;
                case "--timeout-ms": timeoutMs = Long.parseLong(value); break;
                case "--set": {
                    String[] kv = value.split("=", 2);
                    if (kv.length != 2) {
                        usage("--set " + value + ": expected NAME=VALUE");
                    }
                    sets.add(kv);
                    break;
                }
                default: usage("unknown flag " + flag);
            }
        }
        if (bootstrap == null || topics.isEmpty() || mode == null) {
            usage("--bootstrap, --topic and a mode are required");
        }
        configureLogging();
        if (mode.equals("--produce")) {
            if (keysFile == null || topics.size() != 1) {
                usage("--produce needs --keys-file and one --topic");
            }
            System.exit(produce(bootstrap, topics.get(0), keysFile, sets));
        } else {
            if (count < 0) {
                usage("--consume needs --count");
            }
            System.exit(consume(bootstrap, topics, count, timeoutMs, sets));
        }
    }

    static void usage(String why) {
        System.err.println(USAGE);
        System.err.println("ProducerPeer: error: " + why);
        System.exit(2);
    }

    /** The produce mode (see the header): every key once, then the partitions in key order. */
    static int produce(String bootstrap, String topic, String keysFile, List<String[]> sets)
            throws IOException, InterruptedException {
        List<byte[]> keys = new ArrayList<>();
        for (String line : Files.readAllLines(Path.of(keysFile), StandardCharsets.US_ASCII)) {
            keys.add(fromHex(line.strip()));
        }
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, "producer-peer");
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        for (String[] kv : sets) {
            props.put(kv[0], kv[1]);
        }
        List<Future<RecordMetadata>> sent = new ArrayList<>(keys.size());
        int failures = 0;
        StringBuilder out = new StringBuilder();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < keys.size(); i++) {
                byte[] value = Integer.toString(i).getBytes(StandardCharsets.US_ASCII);
                sent.add(producer.send(new ProducerRecord<>(topic, keys.get(i), value)));
            }
            producer.flush();
            for (int i = 0; i < sent.size(); i++) {
                try {
                    RecordMetadata m = sent.get(i).get();
                    out.append("sent ").append(i).append(' ').append(m.partition()).append(' ')
                            .append(m.offset()).append('\n');
                } catch (ExecutionException e) {
                    failures++;
                    System.err.println("failed " + i + " " + e.getCause());
                }
            }
        }
        out.append("produced ").append(sent.size() - failures).append('\n');
        results.print(out);
        results.flush();
        return failures == 0 ? 0 : 1;
    }

    /** The consume mode (see the header): every partition from the beginning, no group. */
    static int consume(String bootstrap, List<String> topics, long count, long timeoutMs,
            List<String[]> sets) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "producer-peer-reader");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        for (String[] kv : sets) {
            props.put(kv[0], kv[1]);
        }
        long deadline = System.nanoTime() + Duration.ofMillis(timeoutMs).toNanos();
        long seen = 0;
        StringBuilder out = new StringBuilder();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (String topic : topics) {
                for (PartitionInfo p : consumer.partitionsFor(topic, Duration.ofMillis(timeoutMs))) {
                    tps.add(new TopicPartition(topic, p.partition()));
                }
            }
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            while (seen < count && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                    seen++;
                    line(out, r);
                }
            }
        }
        out.append("consumed ").append(seen).append('\n');
        results.print(out);
        results.flush();
        if (seen < count) {
            System.err.println("ProducerPeer: only " + seen + " of " + count + " records within "
                    + timeoutMs + " ms");
            return 1;
        }
        return 0;
    }

    /** One "rec" line (see the header). */
    static void line(StringBuilder out, ConsumerRecord<byte[], byte[]> r) {
        out.append("rec ").append(r.topic()).append(' ').append(r.partition()).append(' ')
                .append(r.offset()).append(' ').append(r.timestampType().name).append(' ')
                .append(r.timestamp()).append(' ');
        bytes(out, r.key());
        out.append(' ');
        bytes(out, r.value());
        Header[] headers = r.headers().toArray();
        out.append(' ').append(headers.length);
        for (Header h : headers) {
            out.append(' ');
            bytes(out, h.key().getBytes(StandardCharsets.UTF_8));
            out.append(' ');
            bytes(out, h.value());
        }
        out.append('\n');
    }

    static final char[] HEX = "0123456789abcdef".toCharArray();

    /** "-" for null, else "x" and the bytes in lowercase hex. */
    static void bytes(StringBuilder out, byte[] b) {
        if (b == null) {
            out.append('-');
            return;
        }
        out.append('x');
        for (byte x : b) {
            out.append(HEX[(x >> 4) & 0xf]).append(HEX[x & 0xf]);
        }
    }

    static byte[] fromHex(String s) {
        if (s.length() % 2 != 0) {
            throw new IllegalArgumentException("odd-length hex key " + s);
        }
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return b;
    }

    /** log4j2 at WARN to stderr (a file of properties, as Peer.java); stdout carries results only. */
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
            Path file = Files.createTempFile("producer-peer-log4j2-", ".properties");
            Files.writeString(file, p);
            file.toFile().deleteOnExit();
            System.setProperty("log4j2.configurationFile", file.toString());
        } catch (IOException e) {
            System.err.println("ProducerPeer: cannot write the log4j2 configuration: " + e);
        }
        // Whatever else prints to System.out ends up on stderr.
        System.setOut(System.err);
    }
}
