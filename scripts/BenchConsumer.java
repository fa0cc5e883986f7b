/*
 * The Java reader of scripts/bench: Apache Kafka's own KafkaConsumer in a consumer group,
 * committing synchronously after every poll that returned records (what a careful Java worker
 * does), reading --count records of a topic and printing one line:
 *
 *   reader=java-commitsync records=N join_s=J first_to_last_s=T
 *
 * join_s is from subscribe to the first record, first_to_last_s from the first record to the
 * last. Run as a single-file program:
 *
 *   java -cp "$(cat .cache/kafka/clients-4.4.0/classpath)" scripts/BenchConsumer.java \
 *        --bootstrap B --topic T --group G --count N
 *
 * Only the JDK and kafka-clients are used; client logs go to stderr at WARN.
 */

import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class BenchConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = null, topic = null, group = null;
        long count = 0;
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--bootstrap": bootstrap = args[i + 1]; break;
                case "--topic": topic = args[i + 1]; break;
                case "--group": group = args[i + 1]; break;
                case "--count": count = Long.parseLong(args[i + 1]); break;
                default:
                    System.err.println("BenchConsumer: unknown flag " + args[i]);
                    System.exit(2);
            }
        }
        if (bootstrap == null || topic == null || group == null || count <= 0) {
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
}
