#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>

#include "config/connector_config.h"
#include "config/relay_settings.h"
#include "delivery/transactional_ids.h"

using namespace walrelay;

namespace {

const char* kDebeziumConfig = R"({
  "name": "orders-outbox",
  "config": {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "tasks.max": "1",
    "database.hostname": "db.internal",
    "database.port": 5433,
    "database.user": "relay",
    "database.password": "${env:WALRELAY_TEST_PW}",
    "database.dbname": "shop",
    "plugin.name": "wal2json",
    "slot.name": "orders_slot",
    "topic.prefix": "shop",
    "table.include.list": "public.outbox",
    "transforms": "outbox",
    "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
    "kafka.bootstrap.servers": "k1:9092,k2:9092",
    "kafka.compression.type": "lz4"
  }
})";

Result<RelaySettings> Settings(const std::string& json) {
  auto config = ParseConnectorConfig(json, "test");
  if (!config.ok()) return config.status();
  return ParseRelaySettings(*config);
}

std::string Param(const RelaySettings& s, const std::string& key) {
  for (const auto& [k, v] : s.pg_params)
    if (k == key) return v;
  return "<none>";
}

std::string Minimal(const std::string& extra) {
  return R"({"database.hostname":"h","database.user":"u","database.dbname":"d","topic.prefix":"p",)"
         R"("kafka.bootstrap.servers":"b:1")" +
         extra + "}";
}

}  // namespace

TEST_CASE("a Debezium connector config as POSTed to Kafka Connect is accepted") {
  setenv("WALRELAY_TEST_PW", "s3cret", 1);
  auto s = Settings(kDebeziumConfig);
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  CHECK(s->name == "orders-outbox");
  CHECK(Param(*s, "host") == "db.internal");
  CHECK(Param(*s, "port") == "5433");
  CHECK(Param(*s, "password") == "s3cret");
  CHECK(Param(*s, "sslmode") == "prefer");
  CHECK(s->slot_name == "orders_slot");
  CHECK(s->topic_prefix == "shop");
  CHECK(s->status_update_interval_ms == 10000);
  CHECK(s->max_queue_size == 8192);
  CHECK(s->kafka.at("bootstrap.servers") == "k1:9092,k2:9092");
  CHECK(s->kafka.at("compression.type") == "lz4");
  CHECK(s->kafka.at("enable.idempotence") == "true");
  CHECK(s->kafka.at("acks") == "all");
  CHECK(s->IncludesTable("public.outbox"));
  CHECK_FALSE(s->IncludesTable("public.outbox2"));
  CHECK(s->Wal2JsonAddTables() == "public.outbox");
}

TEST_CASE("a flat config works and Debezium's defaults apply") {
  auto s = Settings(Minimal(""));
  REQUIRE(s.ok());
  CHECK(s->name == "walrelay");
  CHECK(s->slot_name == "debezium");
  CHECK(Param(*s, "port") == "5432");
  CHECK(s->table_include == std::vector<std::string>{"public.outbox"});
}

TEST_CASE("kafka.* overrides walrelay's producer defaults") {
  auto s = Settings(Minimal(R"(,"kafka.acks":"1","kafka.enable.idempotence":"false",)"
                            R"("producer.durability.checks":"false")"));
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  CHECK(s->kafka.at("acks") == "1");
  CHECK(s->kafka.at("enable.idempotence") == "false");
  CHECK(s->kafka.count("producer.durability.checks") == 0);
  CHECK(s->properties.UnreadKeys().empty());
}

TEST_CASE("kafka.* overrides that weaken acknowledgements are refused, naming the key") {
  struct Case {
    const char* extra;
    const char* key;
  };
  for (const Case& c : std::initializer_list<Case>{
           {R"(,"kafka.acks":"1")", "'kafka.acks'"},
           {R"(,"kafka.acks":"0")", "'kafka.acks'"},
           {R"(,"kafka.request.required.acks":"1")", "'kafka.request.required.acks'"},
           {R"(,"kafka.enable.idempotence":"false")", "'kafka.enable.idempotence'"},
           {R"(,"kafka.delivery.report.only.error":"true")", "'kafka.delivery.report.only.error'"},
           {R"(,"errors.tolerance":"all","kafka.message.timeout.ms":"30000")",
            "'kafka.message.timeout.ms'"},
           {R"(,"errors.tolerance":"all","kafka.delivery.timeout.ms":"30000")",
            "'kafka.delivery.timeout.ms'"}}) {
    auto s = Settings(Minimal(c.extra));
    REQUIRE_MESSAGE(!s.ok(), c.extra);
    CHECK(s.status().code() == ErrorCode::kConfig);
    CHECK_MESSAGE(s.status().message().find(c.key) != std::string::npos, s.status().message());
    CHECK(s.status().message().find("producer.durability.checks=false") != std::string::npos);
    // The acknowledgement key lets the same setting through.
    auto accepted =
        Settings(Minimal(std::string(c.extra) + R"(,"producer.durability.checks":false)"));
    CHECK_MESSAGE(accepted.ok(), accepted.status().ToString());
  }
  // Durable spellings, and a finite timeout where a timed-out record stops the relay.
  for (const char* ok :
       {R"(,"kafka.acks":"all")", R"(,"kafka.acks":"-1")", R"(,"kafka.acks":" ALL ")",
        R"(,"kafka.enable.idempotence":"true")", R"(,"kafka.delivery.report.only.error":"false")",
        R"(,"kafka.message.timeout.ms":"30000")",
        R"(,"errors.tolerance":"all","kafka.message.timeout.ms":"0")",
        R"(,"errors.tolerance":"all","errors.retry.timeout":"60000")"}) {
    auto s = Settings(Minimal(ok));
    CHECK_MESSAGE(s.ok(), ok << ": " << s.status().ToString());
  }
  auto bad_flag = Settings(Minimal(R"(,"producer.durability.checks":"maybe")"));
  REQUIRE_FALSE(bad_flag.ok());
  CHECK(bad_flag.status().message().find("'producer.durability.checks'") != std::string::npos);
}

TEST_CASE("regex include lists disable the server-side table filter but still filter") {
  auto s = Settings(Minimal(R"(,"table.include.list":"public\\.outbox_.*, audit.events")"));
  REQUIRE(s.ok());
  CHECK(s->Wal2JsonAddTables().empty());
  CHECK(s->IncludesTable("public.outbox_orders"));
  CHECK(s->IncludesTable("audit.events"));
  CHECK_FALSE(s->IncludesTable("public.outbox"));
  CHECK(s->PlainIncludedTables() == std::vector<std::string>{"audit.events"});
}

TEST_CASE("message.prefix lists: whole-prefix, case-insensitive regexes; every prefix by default; "
          "not both") {
  auto all = Settings(Minimal(""));
  REQUIRE(all.ok());
  CHECK(all->IncludesMessagePrefix("anything"));
  CHECK(all->IncludesMessagePrefix(""));

  auto include = Settings(Minimal(R"(,"message.prefix.include.list":"outbox, orders\\..*")"));
  REQUIRE_MESSAGE(include.ok(), include.status().ToString());
  CHECK(include->IncludesMessagePrefix("outbox"));
  CHECK(include->IncludesMessagePrefix("OUTBOX"));
  CHECK(include->IncludesMessagePrefix("orders.paid"));
  CHECK_FALSE(include->IncludesMessagePrefix("outbox2"));  // the whole prefix must match
  CHECK_FALSE(include->IncludesMessagePrefix("audit"));

  auto exclude = Settings(Minimal(R"(,"message.prefix.exclude.list":"audit.*")"));
  REQUIRE(exclude.ok());
  CHECK_FALSE(exclude->IncludesMessagePrefix("audit-log"));
  CHECK(exclude->IncludesMessagePrefix("outbox"));

  auto both = Settings(
      Minimal(R"(,"message.prefix.include.list":"outbox","message.prefix.exclude.list":"audit")"));
  REQUIRE_FALSE(both.ok());
  CHECK(both.status().code() == ErrorCode::kConfig);
  CHECK(both.status().message().find("'message.prefix.include.list' and "
                                     "'message.prefix.exclude.list' are both set") !=
        std::string::npos);
  auto bad = Settings(Minimal(R"(,"message.prefix.include.list":"out(box")"));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("'message.prefix.include.list' entry 'out(box'") !=
        std::string::npos);
}

TEST_CASE("${file:...} reads a whole file and trims the trailing newline") {
  const std::string path = "/tmp/walrelay_config_test_secret";
  std::ofstream(path) << "from-file\n";
  auto v = SubstituteConfigValue("database.password", "${file:" + path + "}");
  REQUIRE(v.ok());
  CHECK(*v == "from-file");
  auto mixed = SubstituteConfigValue("k", "a-${file:" + path + "}-b");
  CHECK(*mixed == "a-from-file-b");
}

TEST_CASE("substitution errors name the key and never the value") {
  unsetenv("WALRELAY_TEST_MISSING");
  auto missing = SubstituteConfigValue("database.password", "${env:WALRELAY_TEST_MISSING}");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("database.password") != std::string::npos);
  CHECK(missing.status().message().find("WALRELAY_TEST_MISSING") != std::string::npos);
  CHECK_FALSE(SubstituteConfigValue("k", "${file:/nonexistent/x}").ok());
  CHECK_FALSE(SubstituteConfigValue("k", "${vault:x}").ok());
  CHECK_FALSE(SubstituteConfigValue("k", "${env:X").ok());
}

TEST_CASE("memory and connection defaults: bounded bytes in flight, no GSSAPI, server's work mem") {
  auto s = Settings(Minimal(""));
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  CHECK(s->max_queue_size == 8192);
  CHECK(s->max_queue_size_bytes == 256 * 1024);
  CHECK(Param(*s, "gssencmode") == "disable");
  CHECK(Param(*s, "options") == "<none>");

  auto tuned = Settings(Minimal(R"(,"max.queue.size.in.bytes":"0","database.gssencmode":"prefer",)"
                                R"("logical.decoding.work.mem":"512MB")"));
  REQUIRE_MESSAGE(tuned.ok(), tuned.status().ToString());
  CHECK(tuned->max_queue_size_bytes == 0);
  CHECK(Param(*tuned, "gssencmode") == "prefer");
  CHECK(Param(*tuned, "options") == "-c logical_decoding_work_mem=512MB");
}

TEST_CASE("plugin.name and Debezium's publication keys") {
  auto defaults = Settings(Minimal(""));
  REQUIRE_MESSAGE(defaults.ok(), defaults.status().ToString());
  CHECK(defaults->plugin_name == "pgoutput");  // built into PostgreSQL: nothing to install
  CHECK(defaults->publication_name == "dbz_publication");
  CHECK(defaults->publication_mode == PublicationMode::kAllTables);
  auto pgoutput = Settings(Minimal(R"(,"plugin.name":"pgoutput","publication.name":"outbox_pub",)"
                                   R"("publication.autocreate.mode":"filtered")"));
  REQUIRE_MESSAGE(pgoutput.ok(), pgoutput.status().ToString());
  CHECK(pgoutput->plugin_name == "pgoutput");
  CHECK(pgoutput->publication_name == "outbox_pub");
  CHECK(pgoutput->publication_mode == PublicationMode::kFiltered);
  for (auto [text, mode] : {std::pair{"disabled", PublicationMode::kDisabled},
                            std::pair{"no_tables", PublicationMode::kNoTables}}) {
    auto s = Settings(Minimal(std::string(R"(,"publication.autocreate.mode":")") + text + "\""));
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    CHECK(s->publication_mode == mode);
  }
}

TEST_CASE("invalid values name the key and what is allowed") {
  struct Case {
    std::string extra, key;
  } cases[] = {
      {R"(,"database.port":"x")", "database.port"},
      {R"(,"database.port":"70000")", "database.port"},
      {R"(,"database.sslmode":"sometimes")", "database.sslmode"},
      {R"(,"slot.name":"Bad-Name")", "slot.name"},
      {R"(,"plugin.name":"decoderbufs")", "plugin.name"},
      {R"(,"publication.autocreate.mode":"some_tables")", "publication.autocreate.mode"},
      {R"(,"publication.name":"")", "publication.name"},
      {R"(,"status.update.interval.ms":"0")", "status.update.interval.ms"},
      {R"(,"max.queue.size":"-1")", "max.queue.size"},
      {R"(,"table.include.list":"public.(outbox")", "table.include.list"},
      {R"(,"connector.class":"io.debezium.connector.mysql.MySqlConnector")", "connector.class"},
      {R"(,"slot.drop.on.stop":"yes")", "slot.drop.on.stop"},
      {R"(,"database.gssencmode":"maybe")", "database.gssencmode"},
      {R"(,"logical.decoding.work.mem":"256 MB")", "logical.decoding.work.mem"},
      {R"(,"logical.decoding.work.mem":"-1")", "logical.decoding.work.mem"},
      {R"(,"logical.decoding.work.mem":"64MB -c fsync=off")", "logical.decoding.work.mem"},
  };
  for (const auto& c : cases) {
    auto s = Settings(Minimal(c.extra));
    REQUIRE_MESSAGE(!s.ok(), c.extra);
    CHECK(s.status().code() == ErrorCode::kConfig);
    CHECK_MESSAGE(s.status().message().find(c.key) != std::string::npos, s.status().message());
  }
}

TEST_CASE("required keys are named when missing") {
  for (const char* key : {"database.hostname", "database.user", "database.dbname", "topic.prefix",
                          "kafka.bootstrap.servers"}) {
    auto config = ParseConnectorConfig(Minimal(""), "t");
    REQUIRE(config.ok());
    auto values = config->properties.values();
    values.erase(key);
    config->properties = Properties(values);
    auto s = ParseRelaySettings(*config);
    REQUIRE_FALSE(s.ok());
    CHECK_MESSAGE(s.status().message().find(key) != std::string::npos, s.status().message());
  }
}

TEST_CASE("unknown keys are reported; accepted Debezium keys are not") {
  auto s = Settings(Minimal(R"(,"snapshot.mode":"no_data","databse.port":"1")"));
  REQUIRE(s.ok());
  auto unread = s->properties.UnreadKeys();
  CHECK(unread == std::vector<std::string>{"databse.port"});
}

TEST_CASE("malformed JSON and wrong shapes are config errors naming the file") {
  CHECK(ParseConnectorConfig("{", "f.json").status().message().find("f.json") != std::string::npos);
  CHECK_FALSE(ParseConnectorConfig("[]", "f").ok());
  CHECK_FALSE(ParseConnectorConfig(R"({"config": 3})", "f").ok());
  CHECK_FALSE(ParseConnectorConfig(R"({"a": {"b": 1}})", "f").ok());
  CHECK_FALSE(LoadConnectorConfig("/nonexistent.json").ok());
}

TEST_CASE("secret keys are recognised and hidden") {
  for (const char* k : {"database.password", "kafka.sasl.password", "kafka.ssl.key.password",
                        "database.sslpassword", "kafka.sasl.jaas.config"}) {
    CHECK_MESSAGE(IsSecretKey(k), k);
    CHECK(DisplayValue(k, "hunter2") == "[hidden]");
  }
  CHECK_FALSE(IsSecretKey("database.user"));
  CHECK(DisplayValue("database.user", "relay") == "relay");
}

TEST_CASE("plugin and transform keys named like secrets are hidden, in any case") {
  for (const char* k :
       {"transforms.sign.passphrase", "transforms.sign.key.passphrase", "transforms.vault.token",
        "transforms.vault.api.tokens", "transforms.vault.client_secret",
        "transforms.vault.secret.value", "transforms.aws.credentials",
        "transforms.gcp.credential.json", "predicates.auth.Token", "transforms.x.PassPhrase",
        "transforms.db.Password", "kafka.sasl.oauthbearer.client.secret"}) {
    CHECK_MESSAGE(IsSecretKey(k), k);
    CHECK(DisplayValue(k, "v") == "[hidden]");
  }
  for (const char* k : {"transforms.outbox.type", "transforms.outbox.route.by.field",
                        "kafka.ssl.key.location", "slot.name", "table.include.list"}) {
    CHECK_MESSAGE(!IsSecretKey(k), k);
  }
}

TEST_CASE("values from ${env:} or ${file:} are remembered and hidden whatever the key") {
  setenv("WALRELAY_TEST_USER", "relay_from_env", 1);
  const std::string path = "/tmp/walrelay_config_test_prefix";
  std::ofstream(path) << "shop\n";
  auto config = ParseConnectorConfig(
      Minimal(R"(,"database.user":"${env:WALRELAY_TEST_USER}","topic.prefix":"pre-${file:)" + path +
              R"(}","transforms.route.replacement":"outbox.${routedByValue}","slot.name":"s1")"),
      "t");
  REQUIRE_MESSAGE(config.ok(), config.status().ToString());
  CHECK(config->provider_keys == std::set<std::string>{"database.user", "topic.prefix"});
  CHECK(config->properties.values().at("topic.prefix") == "pre-shop");
  auto s = ParseRelaySettings(*config);
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  CHECK(s->provider_keys == config->provider_keys);
  CHECK(DisplayValue("topic.prefix", "pre-shop", true) == "[hidden]");
  CHECK(DisplayValue("slot.name", "s1", false) == "s1");
  bool resolved = true;
  auto plain = SubstituteConfigValue("k", "no ${reference} here", &resolved);
  REQUIRE(plain.ok());
  CHECK_FALSE(resolved);
  std::remove(path.c_str());
}

TEST_CASE("a dead-letter topic name Kafka forbids is refused when the config is read") {
  auto s = Settings(
      Minimal(R"(,"errors.tolerance":"all","errors.deadletterqueue.topic.name":"dead letters")"));
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == ErrorCode::kConfig);
  CHECK_MESSAGE(s.status().message().find("'errors.deadletterqueue.topic.name': Kafka refuses the "
                                          "topic name 'dead letters'") == 0,
                s.status().message());
  CHECK(Settings(
            Minimal(
                R"(,"errors.tolerance":"all","errors.deadletterqueue.topic.name":"dead.letters")"))
            .ok());
}

TEST_CASE("librdkafka's queue is sized to hold what max.queue.size lets into flight") {
  auto defaults = Settings(Minimal(""));
  REQUIRE(defaults.ok());
  CHECK(defaults->kafka.at("queue.buffering.max.messages") == "100000");
  CHECK(defaults->kafka.at("queue.buffering.max.kbytes") == "1048576");
  auto large =
      Settings(Minimal(R"(,"max.queue.size":"500000","max.queue.size.in.bytes":"2147483648")"));
  REQUIRE_MESSAGE(large.ok(), large.status().ToString());
  CHECK(large->kafka.at("queue.buffering.max.messages") == "500000");
  CHECK(large->kafka.at("queue.buffering.max.kbytes") ==
        std::to_string(2147483648 / 1024 * 2 + 1024));
  auto unbounded = Settings(Minimal(R"(,"max.queue.size.in.bytes":"0")"));
  REQUIRE(unbounded.ok());
  CHECK(unbounded->kafka.count("queue.buffering.max.kbytes") == 0);  // librdkafka's default
  auto overridden = Settings(Minimal(R"(,"kafka.queue.buffering.max.messages":"5")"));
  REQUIRE(overridden.ok());
  CHECK(overridden->kafka.at("queue.buffering.max.messages") == "5");
}

TEST_CASE("the largest record is Kafka Connect's max.request.size, not librdkafka's smaller "
          "default; Connect's name sets it too, librdkafka's wins") {
  auto defaults = Settings(Minimal(""));
  REQUIRE(defaults.ok());
  CHECK(defaults->kafka.at("message.max.bytes") == "1048576");
  auto connect = Settings(Minimal(R"(,"kafka.max.request.size":"2000000")"));
  REQUIRE(connect.ok());
  CHECK(connect->kafka.at("message.max.bytes") == "2000000");
  CHECK(connect->kafka.count("max.request.size") == 0);  // librdkafka does not know the name
  auto both = Settings(
      Minimal(R"(,"kafka.max.request.size":"2000000","kafka.message.max.bytes":"1000000")"));
  REQUIRE(both.ok());
  CHECK(both->kafka.at("message.max.bytes") == "1000000");
  CHECK(both->kafka.count("max.request.size") == 0);
}

TEST_CASE("librdkafka's batches are half of max.queue.size.in.bytes, so none waits linger.ms") {
  auto defaults = Settings(Minimal(""));
  REQUIRE(defaults.ok());
  CHECK(defaults->kafka.at("batch.size") == "131072");  // 256 KiB / 2
  auto large = Settings(Minimal(R"(,"max.queue.size.in.bytes":"2147483648")"));
  REQUIRE(large.ok());
  CHECK(large->kafka.at("batch.size") == "1000000");  // never above librdkafka's default
  auto tiny = Settings(Minimal(R"(,"max.queue.size.in.bytes":"2")"));
  REQUIRE(tiny.ok());
  CHECK(tiny->kafka.at("batch.size") == "1");
  auto unbounded = Settings(Minimal(R"(,"max.queue.size.in.bytes":"0")"));
  REQUIRE(unbounded.ok());
  CHECK(unbounded->kafka.count("batch.size") == 0);  // librdkafka's default
  auto overridden = Settings(Minimal(R"(,"kafka.batch.size":"500000")"));
  REQUIRE(overridden.ok());
  CHECK(overridden->kafka.at("batch.size") == "500000");
}

TEST_CASE("exactly.once.support makes the producer transactional, with a bounded message timeout") {
  auto required = Settings(Minimal(
      R"(,"name":"orders","exactly.once.support":"required","offsets.storage.topic":"offs")"));
  REQUIRE_MESSAGE(required.ok(), required.status().ToString());
  CHECK(required->exactly_once.support == ExactlyOnceSupport::kRequired);
  CHECK(required->kafka.at("transactional.id") == "walrelay-orders");
  // librdkafka refuses "forever" (0) with transactions: the transaction timeout bounds it.
  CHECK(required->kafka.at("message.timeout.ms") == "60000");
  auto tuned = Settings(Minimal(R"(,"exactly.once.support":"requested","offsets.storage.topic":"o",
    "transactional.id":"t1","kafka.transaction.timeout.ms":"20000","errors.retry.timeout":"5000")"));
  REQUIRE_MESSAGE(tuned.ok(), tuned.status().ToString());
  CHECK(tuned->kafka.at("transactional.id") == "t1");
  CHECK(tuned->kafka.at("message.timeout.ms") == "5000");
  auto at_least_once = Settings(Minimal(""));
  REQUIRE(at_least_once.ok());
  CHECK(at_least_once->kafka.count("transactional.id") == 0);
  CHECK(at_least_once->kafka.at("message.timeout.ms") == "0");
  auto unknown = Settings(Minimal(R"(,"exactly.once.support":"always")"));
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message().find("exactly.once.support") != std::string::npos);
}

TEST_CASE("exactly-once keys: defaults, a transactional.id from the name, bad values named") {
  const std::string on = R"(,"exactly.once.support":"requested","offsets.storage.topic":"offs")";
  auto s = Settings(Minimal(on));
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  CHECK(s->exactly_once.support == ExactlyOnceSupport::kRequested);
  CHECK(s->exactly_once.boundary.mode == TransactionBoundaryMode::kGrouped);
  CHECK(s->exactly_once.boundary.interval == std::chrono::milliseconds(25));
  CHECK(s->offsets.topic == "offs");
  CHECK(s->offsets.partitions == 1);
  CHECK(s->offsets.replication_factor == -1);
  CHECK(s->exactly_once.transactional_id == "walrelay-" + s->name);

  auto set = Settings(Minimal(on + R"(,"transaction.boundary":"source.commit",)"
                                   R"("transaction.boundary.interval.ms":"250",)"
                                   R"("transaction.boundary.max.records":"1000",)"
                                   R"("transactional.id":"standby-pair-1")"));
  REQUIRE_MESSAGE(set.ok(), set.status().ToString());
  CHECK(set->exactly_once.boundary.mode == TransactionBoundaryMode::kEverySourceCommit);
  CHECK(set->exactly_once.boundary.interval == std::chrono::milliseconds(250));
  CHECK(set->exactly_once.boundary.max_records == 1000);
  CHECK(set->exactly_once.transactional_id == "standby-pair-1");

  struct Bad {
    const char* extra;
    const char* key;
  };
  for (const Bad& bad :
       {Bad{R"(,"exactly.once.support":"requested")", "offsets.storage.topic"},
        Bad{R"(,"transaction.boundary":"poll")", "transaction.boundary"},
        Bad{R"(,"transaction.boundary.interval.ms":"0")", "transaction.boundary.interval.ms"},
        Bad{R"(,"offsets.storage.replication.factor":"0")",
            "offsets.storage.replication.factor"}}) {
    const std::string extra =
        std::string(bad.extra).starts_with(R"(,"exactly)") ? bad.extra : on + bad.extra;
    auto refused = Settings(Minimal(extra));
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == ErrorCode::kConfig);
    CHECK_MESSAGE(refused.status().message().find(bad.key) != std::string::npos,
                  refused.status().message());
  }
  // Without exactly.once.support the companions change nothing: at least once, as before.
  auto ignored = Settings(Minimal(R"(,"transactional.id":"x","transaction.boundary":"poll")"));
  REQUIRE(ignored.ok());
  CHECK_FALSE(ignored->exactly_once.enabled());
}

TEST_CASE("default transactional ids: no connector's second id is another connector's first") {
  const std::string on = R"(,"exactly.once.support":"required","offsets.storage.topic":"offs")";
  auto first_id = [&](const std::string& name) {
    auto s = Settings(Minimal(on + R"(,"name":")" + name + "\""));
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    CHECK(s->kafka.at("transactional.id") == s->exactly_once.transactional_id);
    return s->exactly_once.transactional_id;
  };
  // `orders`'s second id and `orders.1`'s first were both walrelay-orders.1 without the "%";
  // names ending in "%" must stay apart from those that get one.
  const std::vector<std::string> names = {"orders",    "orders.1",  "orders.1.1", "orders%",
                                          "orders.1%", "orders%.1", "orders%%",   ".1",
                                          "orders.10", "%"};
  std::set<std::string> ids;
  for (const auto& name : names) {
    const std::string first = first_id(name);
    CHECK_MESSAGE(ids.insert(first).second, name << ": " << first);
    const std::string second = SecondTransactionalId(first);
    CHECK_MESSAGE(ids.insert(second).second, name << ": " << second);
  }
  CHECK(ids.size() == 2 * names.size());
  // A name that ends in neither ".1" nor "%" keeps its id: an active relay and a standby of
  // the build before still fence each other.
  CHECK(first_id("orders") == "walrelay-orders");
  CHECK(first_id("orders.10") == "walrelay-orders.10");
  CHECK(SecondTransactionalId(first_id("orders")) == "walrelay-orders.1");
  CHECK(first_id("orders.1") == "walrelay-orders.1%");
  CHECK(first_id("orders%") == "walrelay-orders%%");

  // A configured id is used as it is, but one ending with the second producer's suffix would
  // be the second id of the connector configured without it.
  auto refused = Settings(Minimal(on + R"(,"transactional.id":"payments.1")"));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kConfig);
  CHECK_MESSAGE(refused.status().message().find("'transactional.id' is 'payments.1', which ends "
                                                "with '.1'") != std::string::npos,
                refused.status().message());
  CHECK(refused.status().message().find("whose transactional.id is 'payments'") !=
        std::string::npos);
  auto accepted = Settings(Minimal(on + R"(,"transactional.id":"payments.1%")"));
  REQUIRE_MESSAGE(accepted.ok(), accepted.status().ToString());
  CHECK(accepted->exactly_once.transactional_id == "payments.1%");
  // Without exactly.once.support the key is ignored, as before.
  CHECK(Settings(Minimal(R"(,"transactional.id":"payments.1")")).ok());
}

TEST_CASE("several hosts: libpq's multi-host form, the first primary taken by default") {
  auto multi = [](const std::string& extra) {
    return Settings(R"({"database.hostname":"db-a,db-b","database.user":"u",)"
                    R"("database.dbname":"d","topic.prefix":"p","kafka.bootstrap.servers":"b:1")" +
                    extra + "}");
  };
  auto one_port = multi("");
  REQUIRE_MESSAGE(one_port.ok(), one_port.status().ToString());
  CHECK(Param(*one_port, "host") == "db-a,db-b");
  CHECK(Param(*one_port, "port") == "5432");
  CHECK(Param(*one_port, "target_session_attrs") == "read-write");
  auto per_host =
      multi(R"(,"database.port":"5433, 5434","database.target.session.attrs":"primary")");
  REQUIRE_MESSAGE(per_host.ok(), per_host.status().ToString());
  CHECK(Param(*per_host, "port") == "5433,5434");
  CHECK(Param(*per_host, "target_session_attrs") == "primary");
  // One host: libpq's default (any), nothing added.
  auto single = Settings(Minimal(""));
  REQUIRE(single.ok());
  CHECK(Param(*single, "target_session_attrs") == "<none>");
  for (const char* bad : {R"(,"database.port":"5433,5434,5435")", R"(,"database.port":"5433,x")",
                          R"(,"database.target.session.attrs":"leader")"}) {
    auto refused = multi(bad);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == ErrorCode::kConfig);
    CHECK_MESSAGE(refused.status().message().find("database.") != std::string::npos,
                  refused.status().message());
  }
}

TEST_CASE("skipped.operations: read with the config; inserts skipped under source.mode=polling "
          "are refused, since every polled row would be marked without being relayed") {
  auto s = Settings(Minimal(R"(,"skipped.operations":"u,d")"));
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  CHECK(s->skipped_operations.set);
  CHECK(s->skipped_operations.Skips('u'));
  CHECK_FALSE(s->skipped_operations.Skips('t'));
  CHECK(Settings(Minimal(R"(,"skipped.operations":"z")")).status().code() == ErrorCode::kConfig);

  auto polled = Settings(Minimal(R"(,"source.mode":"polling","skipped.operations":"c,d")"));
  REQUIRE_FALSE(polled.ok());
  CHECK(polled.status().message().find("skipped.operations") != std::string::npos);
  CHECK(polled.status().message().find("polling") != std::string::npos);
  CHECK(Settings(Minimal(R"(,"source.mode":"polling","skipped.operations":"u,d,t")")).ok());
}
