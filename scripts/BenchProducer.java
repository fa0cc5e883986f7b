/*
 * The Java producer of scripts/bench --produce: Apache Kafka's own KafkaProducer writing records
 * of --size bytes (default 100; one byte[] shared by every record) to a topic, keyless (the
 * built-in sticky partitioner) or with --keyed (record i keyed "key-<i>", murmur2), and printing
 * one line. Two modes:
 *
 *   --count N                  as fast as send() takes them, a Callback per record counting
 *                              failures; timed from the first send to the return of the flush()
 *                              that waited for the last acknowledgement:
 *     producer=java mode=throughput records=N errors=E first_send_to_last_ack_s=T warmup=1
 *
 *   --rate R --seconds D       record i sent at i / R s after the start (a missed slot is sent at
 *                              once, never skipped); each record's latency from just before its
 *                              send() to its Callback (on the producer's I/O thread):
 *     producer=java mode=latency records=N errors=E p50_ms=.. p99_ms=.. max_ms=.. late_sends=L
 *                              warmup=1
 *                              (L: sends that started more than 1 ms after their slot)
 *
 * Before the result, the settings in force (defaults included), read back from ProducerConfig:
 *
 *   bench produce settings producer=java acks=.. enable.idempotence=.. linger.ms=.. ...
 *
 * Before the clock starts the topic's metadata is fetched (partitionsFor) and one keyless record
 * is sent and waited for (warmup=1 in the line: the topic holds N + 1 records), as the other
 * producers do, so that the connection and the producer id are in place. --set NAME=VALUE
 * (repeatable) passes any producer setting. Run from the classes scripts/setup-test-env compiles,
 * or as a single-file program:
 *
 *   java -cp "$(cat .cache/kafka/clients-4.4.0/classpath)" scripts/BenchProducer.java \
 *        --bootstrap B --topic T --count N [--size BYTES] [--keyed] [--set NAME=VALUE ...]
 *
 * Only the JDK and kafka-clients are used; client logs go to stderr at WARN.
 */

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class BenchProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = null, topic = null;
        long count = 0, rate = 0, seconds = 20;
        int size = 100;
        boolean keyed = false;
        List<String[]> sets = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--keyed")) {
                keyed = true;
                continue;
            }
            if (i + 1 >= args.length) {
                System.err.println("BenchProducer: " + args[i] + " needs a value");
                System.exit(2);
            }
            String value = args[++i];
            switch (args[i - 1]) {
                case "--bootstrap": bootstrap = value; break;
                case "--topic": topic = value; break;
                case "--count": count = Long.parseLong(value); break;
                case "--rate": rate = Long.parseLong(value); break;
                case "--seconds": seconds = Long.parseLong(value); break;
                case "--size": size = Integer.parseInt(value); break;
                case "--set": {
                    String[] kv = value.split("=", 2);
                    if (kv.length != 2) {
                        System.err.println("BenchProducer: --set " + value + ": expected NAME=VALUE");
                        System.exit(2);
                    }
                    sets.add(kv);
                    break;
                }
                default:
                    System.err.println("BenchProducer: unknown flag " + args[i - 1]);
                    System.exit(2);
            }
        }
        if (bootstrap == null || topic == null || (count > 0) == (rate > 0)) {
            System.err.println("usage: BenchProducer --bootstrap B --topic T (--count N | --rate R --seconds D)"
                    + " [--size BYTES] [--keyed] [--set NAME=VALUE ...]");
            System.exit(2);
        }
        System.setProperty("org.apache.logging.log4j.level", "WARN");
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        for (String[] kv : sets) {
            props.put(kv[0], kv[1]);
        }
        ProducerConfig effective = new ProducerConfig(props);
        System.out.printf("bench produce settings producer=java acks=%s enable.idempotence=%s linger.ms=%d"
                + " batch.size=%d compression.type=%s max.in.flight.requests.per.connection=%d"
                + " buffer.memory=%d delivery.timeout.ms=%d partitioner=%s%n",
                effective.getString(ProducerConfig.ACKS_CONFIG).replace("-1", "all"),
                effective.getBoolean(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG),
                effective.getLong(ProducerConfig.LINGER_MS_CONFIG),
                effective.getInt(ProducerConfig.BATCH_SIZE_CONFIG),
                effective.getString(ProducerConfig.COMPRESSION_TYPE_CONFIG),
                effective.getInt(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION),
                effective.getLong(ProducerConfig.BUFFER_MEMORY_CONFIG),
                effective.getInt(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG),
                keyed ? "murmur2"
                        : effective.getBoolean(ProducerConfig.PARTITIONER_ADPATIVE_PARTITIONING_ENABLE_CONFIG)
                                ? "sticky-per-batch-adaptive" : "sticky-per-batch");
        byte[] value = new byte[size];
        Arrays.fill(value, (byte) 'x');
        AtomicLong errors = new AtomicLong();
        AtomicReference<Exception> firstError = new AtomicReference<>();
        String line;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            // The warm-up (see the header): metadata, connection and producer id in place.
            producer.partitionsFor(topic);
            producer.send(new ProducerRecord<>(topic, null, value)).get();
            if (count > 0) {
                Callback callback = (metadata, e) -> {
                    if (e != null) {
                        errors.incrementAndGet();
                        firstError.compareAndSet(null, e);
                    }
                };
                long started = System.nanoTime();
                for (long i = 0; i < count; i++) {
                    byte[] key = keyed ? ("key-" + i).getBytes() : null;
                    producer.send(new ProducerRecord<>(topic, key, value), callback);
                }
                producer.flush();
                long elapsed = System.nanoTime() - started;
                line = String.format("producer=java mode=throughput records=%d errors=%d first_send_to_last_ack_s=%.3f warmup=1",
                        count, errors.get(), elapsed / 1e9);
            } else {
                int n = (int) (rate * seconds);
                long[] micros = new long[n];
                long late = 0;
                long start = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    long slot = start + i * 1_000_000_000L / rate;
                    long now = System.nanoTime();
                    while (slot > now) {
                        LockSupport.parkNanos(slot - now);
                        now = System.nanoTime();
                    }
                    if (now - slot > 1_000_000L) {
                        late++;
                    }
                    byte[] key = keyed ? ("key-" + i).getBytes() : null;
                    final int index = i;
                    final long sent = System.nanoTime();
                    producer.send(new ProducerRecord<>(topic, key, value), (metadata, e) -> {
                        micros[index] = (System.nanoTime() - sent) / 1000;
                        if (e != null) {
                            errors.incrementAndGet();
                            firstError.compareAndSet(null, e);
                        }
                    });
                }
                producer.flush();
                // Every callback ran before flush() returned (they run on the I/O thread, which
                // completes a batch's callbacks before the batch counts as done).
                Arrays.sort(micros);
                line = String.format("producer=java mode=latency records=%d errors=%d p50_ms=%.3f p99_ms=%.3f"
                        + " max_ms=%.3f late_sends=%d warmup=1", n, errors.get(), pct(micros, 0.50) / 1000.0,
                        pct(micros, 0.99) / 1000.0, pct(micros, 1.0) / 1000.0, late);
            }
        }
        if (firstError.get() != null) {
            System.err.println("BenchProducer: " + errors.get() + " records failed, the first: " + firstError.get());
        }
        System.out.println(line);
    }

    /** The nearest-rank percentile of sorted values (the same rule as the other producers). */
    static long pct(long[] sorted, double p) {
        if (sorted.length == 0) {
            return 0;
        }
        int i = (int) Math.ceil(sorted.length * p);
        return sorted[Math.min(Math.max(i, 1), sorted.length) - 1];
    }
}
