// The Debezium reference of the differential suite: runs Debezium's PostgreSQL connector (and
// whatever transforms a case configures, e.g. the outbox EventRouter) in Debezium's embedded
// engine with Kafka Connect's converters, and writes every record it would hand a Kafka
// producer as one JSON line.
//
//   java -cp "<libs>/*" DebeziumReference.java <cases.json> <out.jsonl>
//
// cases.json: {"parallel": n (cases run side by side, default 1), "cases": [{"name": "...", "config": {connector config, as walrelay gets it},
//   "expect": n, "copy_slot_from": "template"}, ...]}. For each case, in order:
//   - if copy_slot_from is set, the case's slot.name is made with
//     pg_copy_logical_replication_slot(copy_slot_from, slot.name) and dropped afterwards, so every
//     case reads the same changes from the same position;
//   - the engine runs until it has `expect` records and nothing more came for `grace_ms`
//     (default 700), or nothing came for `idle_ms` (default 15000; counted from the start
//     until the first record);
//   - converters are Connect's, named by the case config like Kafka Connect's worker keys
//     (key.converter, value.converter, header.converter and their sub-keys); the header
//     converter defaults to SimpleHeaderConverter, Connect's default.
// Each output line: {"case", "topic", "partition" (null: the producer's partitioner decides),
// "timestamp" (null: the producer stamps the send time), "key", "value" (base64 or null),
// "headers": [[name, base64 or null], ...]}. A case that fails writes {"case", "error"}.
// Headers and timestamps are what Kafka Connect's worker would hand its producer, not the
// embedded engine's: the worker converts every header of the SourceRecord, a null one too
// (the 3.6 engine leaves those out), and checks the timestamp (ConnectUtils
// .checkAndConvertTimestamp: -1 becomes the send time, below -1 fails the task).
// Offsets are kept in memory: a case never resumes from another.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.debezium.embedded.ClientProvided;
import io.debezium.embedded.EmbeddedEngineChangeEvent;
import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import java.io.File;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.storage.HeaderConverter;

public class DebeziumReference {
  private static final ObjectMapper JSON = new ObjectMapper();

  public static void main(String[] args) throws Exception {
    if (args.length != 2) {
      System.err.println("usage: DebeziumReference <cases.json> <out.jsonl>");
      System.exit(2);
    }
    JsonNode root = JSON.readTree(new File(args[0]));
    JsonNode cases = root.get("cases");
    // Engines of the same topic.prefix cannot run side by side in one JVM: they share
    // Debezium's OpenLineage emitter and JMX names, and one engine stopping breaks the other.
    // Cases of distinct prefixes may set "parallel".
    ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, root.path("parallel").asInt(1)));
    List<Future<List<String>>> results = new ArrayList<>();
    for (JsonNode c : cases) results.add(pool.submit(() -> runLogged(c)));
    try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(Path.of(args[1]), StandardCharsets.UTF_8))) {
      for (Future<List<String>> r : results) {
        for (String line : r.get()) out.println(line);
      }
    }
    pool.shutdown();
    // The engine leaves non-daemon threads (JDBC, Connect) behind.
    System.exit(0);
  }

  // One case's output lines; a failure is one {"case", "error"} line.
  static List<String> runLogged(JsonNode c) throws Exception {
    String name = c.get("name").asText();
    long started = System.nanoTime();
    List<String> lines = new ArrayList<>();
    try {
      runCase(c, lines);
      System.err.printf("reference: case %s: %d record(s) in %d ms%n", name, lines.size(),
          (System.nanoTime() - started) / 1_000_000);
    } catch (Exception e) {
      ObjectNode line = JSON.createObjectNode();
      line.put("case", name);
      Throwable root = e;
      while (root.getCause() != null && root.getCause() != root) root = root.getCause();
      line.put("error", root.toString());
      lines.clear();
      lines.add(JSON.writeValueAsString(line));
      System.err.println("reference: case " + name + " failed: " + e);
      e.printStackTrace();
    }
    return lines;
  }

  static Properties engineProperties(String name, JsonNode config) {
    Properties props = new Properties();
    for (Iterator<Map.Entry<String, JsonNode>> it = config.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      String key = e.getKey();
      String value = e.getValue().asText();
      // Connect's worker keys name the class directly; the engine reads "<prefix>.class".
      if (key.equals("key.converter") || key.equals("value.converter") || key.equals("header.converter")) {
        props.setProperty(key + ".class", value);
      } else {
        props.setProperty(key, value);
      }
    }
    props.putIfAbsent("header.converter.class", "org.apache.kafka.connect.storage.SimpleHeaderConverter");
    props.setProperty("name", "reference-" + name);
    props.setProperty("offset.storage", "org.apache.kafka.connect.storage.MemoryOffsetBackingStore");
    props.setProperty("offset.flush.interval.ms", "0");
    return props;
  }

  static Connection connect(JsonNode config) throws Exception {
    String url = "jdbc:postgresql://" + config.path("database.hostname").asText("127.0.0.1") + ":"
        + config.path("database.port").asText("5432") + "/" + config.path("database.dbname").asText("postgres");
    Properties p = new Properties();
    p.setProperty("user", config.path("database.user").asText("postgres"));
    if (config.has("database.password")) p.setProperty("password", config.get("database.password").asText());
    return DriverManager.getConnection(url, p);
  }

  static void sql(Connection db, String statement, String... params) throws Exception {
    try (PreparedStatement st = db.prepareStatement(statement)) {
      for (int i = 0; i < params.length; i++) st.setString(i + 1, params[i]);
      st.execute();
    }
  }

  // Drops the slot once its walsender has let go of it.
  static void dropSlot(Connection db, String slot) throws Exception {
    long deadline = System.currentTimeMillis() + 15_000;
    while (true) {
      try (PreparedStatement st = db.prepareStatement(
          "SELECT active FROM pg_replication_slots WHERE slot_name = ?")) {
        st.setString(1, slot);
        try (ResultSet rs = st.executeQuery()) {
          if (!rs.next()) return;
          if (!rs.getBoolean(1) || System.currentTimeMillis() > deadline) break;
        }
      }
      Thread.sleep(100);
    }
    sql(db, "SELECT pg_drop_replication_slot(?)", slot);
  }

  static void runCase(JsonNode c, List<String> out) throws Exception {
    String name = c.get("name").asText();
    JsonNode config = c.get("config");
    String slot = config.path("slot.name").asText("debezium");
    String template = c.path("copy_slot_from").asText("");
    long expect = c.path("expect").asLong(0);
    long graceMs = c.path("grace_ms").asLong(700);
    long idleMs = c.path("idle_ms").asLong(15000);

    try (Connection db = connect(config)) {
      if (!template.isEmpty()) sql(db, "SELECT pg_copy_logical_replication_slot(?, ?)", template, slot);
      List<ChangeEvent<Object, Object>> records = new ArrayList<>();
      final long[] lastArrival = {System.nanoTime()};
      final Throwable[] failure = {null};
      DebeziumEngine<ChangeEvent<Object, Object>> engine = DebeziumEngine
          .create(ClientProvided.class, ClientProvided.class, ClientProvided.class)
          .using(engineProperties(name, config))
          .using((success, message, error) -> {
            if (!success) {
              synchronized (records) {
                failure[0] = error != null ? error : new RuntimeException(message);
              }
            }
          })
          .notifying((batch, committer) -> {
            synchronized (records) {
              records.addAll(batch);
              lastArrival[0] = System.nanoTime();
            }
            for (ChangeEvent<Object, Object> r : batch) committer.markProcessed(r);
            committer.markBatchFinished();
          })
          .build();
      ExecutorService executor = Executors.newSingleThreadExecutor();
      executor.execute(engine);
      try {
        while (true) {
          Thread.sleep(50);
          synchronized (records) {
            if (failure[0] != null) throw new RuntimeException("engine stopped: " + failure[0], failure[0]);
            long quietMs = (System.nanoTime() - lastArrival[0]) / 1_000_000;
            if (expect > 0 && records.size() >= expect && quietMs >= graceMs) break;
            if (quietMs >= idleMs) break;
          }
        }
      } finally {
        try {
          engine.close();
        } catch (IllegalStateException alreadyStopped) {
          // An engine that failed has shut itself down; the failure above is what counts.
        }
        executor.shutdown();
        executor.awaitTermination(30, TimeUnit.SECONDS);
        if (!template.isEmpty()) dropSlot(db, slot);
      }
      HeaderConverter headers = headerConverter(config);
      synchronized (records) {
        for (ChangeEvent<Object, Object> r : records) {
          out.add(JSON.writeValueAsString(line(name, r, headers)));
        }
      }
    }
  }

  // The header converter as Connect's worker makes it: the class named by header.converter,
  // configured with the header.converter.* keys and converter.type=header.
  static HeaderConverter headerConverter(JsonNode config) throws Exception {
    String type = config.path("header.converter")
        .asText("org.apache.kafka.connect.storage.SimpleHeaderConverter");
    HeaderConverter converter =
        (HeaderConverter) Class.forName(type).getDeclaredConstructor().newInstance();
    Map<String, Object> settings = new java.util.HashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = config.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      if (e.getKey().startsWith("header.converter.")) {
        settings.put(e.getKey().substring("header.converter.".length()), e.getValue().asText());
      }
    }
    settings.put("converter.type", "header");
    converter.configure(settings);
    return converter;
  }

  static ObjectNode line(String name, ChangeEvent<Object, Object> r, HeaderConverter converter) {
    SourceRecord source = ((EmbeddedEngineChangeEvent<?, ?, ?>) r).sourceRecord();
    ObjectNode line = JSON.createObjectNode();
    line.put("case", name);
    line.put("topic", r.destination());
    if (source.kafkaPartition() == null) line.putNull("partition"); else line.put("partition", source.kafkaPartition());
    Long timestamp = source.timestamp();
    if (timestamp != null && timestamp < 0) {
      if (timestamp != -1L) {
        throw new IllegalArgumentException("Invalid record timestamp " + timestamp);
      }
      timestamp = null;
    }
    if (timestamp == null) line.putNull("timestamp"); else line.put("timestamp", timestamp);
    putBytes(line, "key", (byte[]) r.key());
    putBytes(line, "value", (byte[]) r.value());
    ArrayNode headers = line.putArray("headers");
    for (org.apache.kafka.connect.header.Header h : source.headers()) {
      ArrayNode pair = headers.addArray();
      pair.add(h.key());
      byte[] bytes = converter.fromConnectHeader(r.destination(), h.key(), h.schema(), h.value());
      if (bytes == null) pair.addNull(); else pair.add(Base64.getEncoder().encodeToString(bytes));
    }
    return line;
  }

  static void putBytes(ObjectNode line, String field, byte[] bytes) {
    if (bytes == null) line.putNull(field); else line.put(field, Base64.getEncoder().encodeToString(bytes));
  }
}
