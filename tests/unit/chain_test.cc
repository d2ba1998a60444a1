// TransformChain: order, drop, failure, predicates and configuration errors, with the event
// router and plugins (build/tests/plugins/test_transform.so) side by side.
#include "transform/chain.h"

#include <doctest/doctest.h>
#include <rapidjson/document.h>

#include "plugin_test_support.h"

namespace walrelay {
namespace {

using testing::BuildChain;
using testing::Contains;
using testing::HeaderText;
using testing::MustBuild;
using testing::TestPluginFile;

constexpr const char* kRouter = "io.debezium.transforms.outbox.EventRouter";

// `transforms=<aliases>` with each alias a test_transform tagging the `trace` header.
std::map<std::string, std::string> Tags(const std::vector<std::string>& aliases) {
  std::map<std::string, std::string> config;
  std::string list;
  for (const auto& a : aliases) {
    list += (list.empty() ? "" : ",") + a;
    config["transforms." + a + ".type"] = TestPluginFile("test_transform");
    config["transforms." + a + ".tag"] = a;
  }
  config["transforms"] = list;
  return config;
}

TEST_CASE("transforms run in the order `transforms` lists them, built-ins and plugins alike") {
  auto config = Tags({"c", "a", "b"});
  config["transforms"] = "outbox,c,a,b";
  config["transforms.outbox.type"] = kRouter;
  TransformChain chain = MustBuild(config);
  CHECK(chain.size() == 4);
  const RowChange change = testing::OutboxChange();
  Record record = MakeSourceRecord(change, testing::TestContext());
  auto outcome = chain.Apply(record);
  REQUIRE_MESSAGE(outcome.ok(), outcome.status().ToString());
  CHECK(*outcome == TransformOutcome::kKeep);
  CHECK(HeaderText(record, "trace") == "cab");
  CHECK(record.topic == "outbox.event.Order");  // the router ran first
  CHECK(HeaderText(record, "id") == testing::kEventId);
}

TEST_CASE("a transform that drops a record ends the chain for it") {
  auto config = Tags({"first", "last"});
  config["transforms"] = "first,stop,last";
  config["transforms.stop.type"] = TestPluginFile("test_transform");
  config["transforms.stop.action"] = "drop";
  TransformChain chain = MustBuild(config);
  Record record = testing::RoutedRecord();
  auto outcome = chain.Apply(record);
  REQUIRE(outcome.ok());
  CHECK(*outcome == TransformOutcome::kDrop);
  CHECK(HeaderText(record, "trace") == "first");
}

TEST_CASE("a failed record is a kTransform error naming the alias, plugin, event id and LSN") {
  auto config = Tags({"before", "after"});
  config["transforms"] = "outbox,before,boom,after";
  config["transforms.outbox.type"] = kRouter;
  config["transforms.boom.type"] = TestPluginFile("test_transform");
  config["transforms.boom.action"] = "fail";
  TransformChain chain = MustBuild(config);
  const RowChange change = testing::OutboxChange();
  Record record = MakeSourceRecord(change, testing::TestContext());
  auto outcome = chain.Apply(record);
  REQUIRE_FALSE(outcome.ok());
  const Status& st = outcome.status();
  CHECK(st.code() == ErrorCode::kTransform);
  CHECK_MESSAGE(Contains(st.message(), "transform 'boom': plugin 'test_transform' (" +
                                           TestPluginFile("test_transform") + ")"),
                st.message());
  CHECK_MESSAGE(Contains(st.message(), "failed the record: refused by boom"), st.message());
  CHECK_MESSAGE(Contains(st.message(), std::string("event id '") + testing::kEventId + "'"),
                st.message());
  CHECK_MESSAGE(Contains(st.message(), "table public.outbox"), st.message());
  CHECK_MESSAGE(Contains(st.message(), std::string("LSN ") + testing::kLsnText), st.message());
  CHECK(HeaderText(record, "trace") == "before");  // `after` never saw it
}

TEST_CASE("a plugin gets a record no transform has rewritten as the change event JSON") {
  TransformChain chain =
      testing::OneTransform(TestPluginFile("test_transform"), {{"action", "describe"}});
  const RowChange change = testing::OutboxChange();
  Record record = MakeSourceRecord(change, testing::TestContext());
  REQUIRE(record.change != nullptr);
  REQUIRE(chain.Apply(record).ok());
  CHECK(record.change == nullptr);  // the value is bytes from here on
  REQUIRE(record.value.has_value());
  const std::string& seen = *record.value;
  CHECK_MESSAGE(Contains(seen, "topic=[shop.public.outbox]"), seen);
  CHECK_MESSAGE(Contains(seen, R"("op":"c")"), seen);
  CHECK_MESSAGE(Contains(seen, R"("after":{"id":")" + std::string(testing::kEventId)), seen);
}

TEST_CASE("the event router after a plugin passes the already rendered record through") {
  TransformChain chain = MustBuild({{"transforms", "tag,outbox"},
                                    {"transforms.tag.type", TestPluginFile("test_transform")},
                                    {"transforms.tag.tag", "x"},
                                    {"transforms.outbox.type", kRouter}});
  const RowChange change = testing::OutboxChange();
  Record record = MakeSourceRecord(change, testing::TestContext());
  REQUIRE(chain.Apply(record).ok());
  CHECK(record.topic == "shop.public.outbox");
  CHECK(HeaderText(record, "trace") == "x");
}

TEST_CASE("the source skips a row's topic and key only for an event router that replaces both") {
  const std::map<std::string, std::string> router = {{"transforms", "outbox"},
                                                     {"transforms.outbox.type", kRouter}};
  CHECK(MustBuild(router).SkipsSourceTopicAndKey());
  CHECK_FALSE(MustBuild({}).SkipsSourceTopicAndKey());
  // An envelope's schema is named after the source's topic.
  auto envelope = router;
  envelope["transforms.outbox.table.fields.additional.placement"] = "type:envelope";
  CHECK_FALSE(MustBuild(envelope).SkipsSourceTopicAndKey());
  // A record the predicate excludes keeps the source's topic and key.
  auto conditional = router;
  conditional["transforms.outbox.predicate"] = "p";
  conditional["predicates"] = "p";
  conditional["predicates.p.type"] = "HasHeaderKey";
  conditional["predicates.p.name"] = "tenant";
  CHECK_FALSE(MustBuild(conditional).SkipsSourceTopicAndKey());
  auto after_plugin = Tags({"tag"});
  after_plugin["transforms"] = "tag,outbox";
  after_plugin["transforms.outbox.type"] = kRouter;
  CHECK_FALSE(MustBuild(after_plugin).SkipsSourceTopicAndKey());

  // The routed record is the same either way, and so are the dropped ones.
  TransformChain chain = MustBuild(router);
  const RowChange change = testing::OutboxChange();
  Record built = MakeSourceRecord(change, testing::TestContext());
  Record unset = MakeSourceRecord(change, testing::TestContext(), SourceTopicAndKey::kLeaveUnset);
  CHECK(unset.topic.empty());
  CHECK_FALSE(unset.key.has_value());
  REQUIRE(*chain.Apply(built) == TransformOutcome::kKeep);
  REQUIRE(*chain.Apply(unset) == TransformOutcome::kKeep);
  CHECK(unset.topic == built.topic);
  CHECK(unset.key == built.key);
  CHECK(unset.value == built.value);
  CHECK(unset.headers.size() == built.headers.size());
  RowChange deleted = change;
  deleted.op = ChangeOp::kDelete;
  deleted.identity = deleted.columns;
  Record tombstone =
      MakeTombstoneRecord(deleted, testing::TestContext(), SourceTopicAndKey::kLeaveUnset);
  CHECK(*chain.Apply(tombstone) == TransformOutcome::kDrop);
}

// ---------------------------------------------------------------------------------------------
// Predicates

std::map<std::string, std::string> TagWhen(const std::string& predicate_type,
                                           const std::map<std::string, std::string>& keys,
                                           bool negate = false) {
  std::map<std::string, std::string> config = {
      {"transforms", "tag"},
      {"transforms.tag.type", TestPluginFile("test_transform")},
      {"transforms.tag.tag", "applied"},
      {"transforms.tag.predicate", "p"},
      {"predicates", "p"},
      {"predicates.p.type", predicate_type}};
  if (negate) config["transforms.tag.negate"] = "true";
  for (const auto& [k, v] : keys) config["predicates.p." + k] = v;
  return config;
}

bool Tagged(TransformChain& chain, Record record) {
  auto outcome = chain.Apply(record);
  REQUIRE(outcome.ok());
  return HeaderText(record, "trace") == "applied";
}

TEST_CASE("TopicNameMatches applies a transform to records whose whole topic matches") {
  for (const char* type :
       {"org.apache.kafka.connect.transforms.predicates.TopicNameMatches", "TopicNameMatches"}) {
    TransformChain chain =
        MustBuild(TagWhen(type, {{"pattern", R"(outbox\.event\.(Order|Invoice))"}}));
    Record order = testing::RoutedRecord();
    Record other = testing::RoutedRecord();
    other.topic = "outbox.event.Customer";
    Record longer = testing::RoutedRecord();
    longer.topic = "outbox.event.OrderLine";
    CHECK(Tagged(chain, order));
    CHECK_FALSE(Tagged(chain, other));
    CHECK_FALSE(Tagged(chain, longer));  // matches(), not find()
  }
  TransformChain negated = MustBuild(
      TagWhen("TopicNameMatches", {{"pattern", R"(outbox\.event\.Order)"}}, /*negate=*/true));
  Record order = testing::RoutedRecord();
  Record other = testing::RoutedRecord();
  other.topic = "outbox.event.Customer";
  CHECK_FALSE(Tagged(negated, order));
  CHECK(Tagged(negated, other));
}

TEST_CASE("HasHeaderKey applies a transform to records with the header, null value or not") {
  TransformChain chain = MustBuild(TagWhen("HasHeaderKey", {{"name", "tenant"}}));
  Record with = testing::RoutedRecord();
  with.headers.push_back({"tenant", std::nullopt});
  CHECK(Tagged(chain, with));
  CHECK_FALSE(Tagged(chain, testing::RoutedRecord()));
}

TEST_CASE("the built-in Filter with RecordIsTombstone drops tombstones only") {
  TransformChain chain =
      MustBuild({{"transforms", "noTombstones"},
                 {"transforms.noTombstones.type", "Filter"},
                 {"transforms.noTombstones.predicate", "isTombstone"},
                 {"predicates", "isTombstone"},
                 {"predicates.isTombstone.type",
                  "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone"}});
  Record tombstone = testing::RoutedRecord();
  tombstone.value.reset();
  Record event = testing::RoutedRecord();
  CHECK(*chain.Apply(tombstone) == TransformOutcome::kDrop);
  CHECK(*chain.Apply(event) == TransformOutcome::kKeep);
  // A record still holding its change event has a value.
  const RowChange change = testing::OutboxChange();
  Record structured = MakeSourceRecord(change, testing::TestContext());
  CHECK(*chain.Apply(structured) == TransformOutcome::kKeep);
  // The tombstone after a delete (tombstones.on.delete) still points at the delete.
  Record after_delete = MakeTombstoneRecord(change, testing::TestContext());
  CHECK(*chain.Apply(after_delete) == TransformOutcome::kDrop);
}

TEST_CASE("Filter without a predicate drops everything") {
  TransformChain chain = testing::OneTransform("org.apache.kafka.connect.transforms.Filter");
  Record record = testing::RoutedRecord();
  CHECK(*chain.Apply(record) == TransformOutcome::kDrop);
}

// ---------------------------------------------------------------------------------------------
// Configuration

std::string BuildErrorText(const std::map<std::string, std::string>& config) {
  auto chain = BuildChain(config);
  REQUIRE_FALSE(chain.ok());
  CHECK(chain.status().code() == ErrorCode::kConfig);
  return chain.status().message();
}

TEST_CASE("configuration mistakes are refused at start, naming the key") {
  auto tag = [](std::map<std::string, std::string> extra) {
    std::map<std::string, std::string> config = {
        {"transforms", "tag"}, {"transforms.tag.type", TestPluginFile("test_transform")}};
    for (const auto& [k, v] : extra) config[k] = v;
    return config;
  };
  CHECK(Contains(BuildErrorText(tag({{"transforms.tag.predicate", "nope"}})),
                 "'transforms.tag.predicate' is 'nope', which 'predicates' does not name"));
  CHECK(Contains(BuildErrorText(tag({{"transforms.tag.negate", "maybe"},
                                     {"predicates", "p"},
                                     {"predicates.p.type", "RecordIsTombstone"},
                                     {"transforms.tag.predicate", "p"}})),
                 "'transforms.tag.negate' must be true or false"));
  CHECK(Contains(BuildErrorText(tag({{"predicates", "p"}, {"predicates.p.type", "IsFriday"}})),
                 "'predicates.p.type' is 'IsFriday', which is not a known predicate"));
  CHECK(Contains(
      BuildErrorText(tag({{"predicates", "p"}, {"predicates.p.type", "TopicNameMatches"}})),
      "missing required key 'predicates.p.pattern'"));
  CHECK(Contains(BuildErrorText(tag({{"predicates", "p"},
                                     {"predicates.p.type", "TopicNameMatches"},
                                     {"predicates.p.pattern", "(unclosed"}})),
                 "predicates.p.pattern"));
  CHECK(Contains(BuildErrorText(tag({{"predicates", "p"}, {"predicates.p.type", "HasHeaderKey"}})),
                 "missing required key 'predicates.p.name'"));
  CHECK(
      Contains(BuildErrorText(tag({{"transforms", "tag,tag"}})), "'transforms' names 'tag' twice"));
  CHECK(
      Contains(BuildErrorText({{"transforms", "x"}}), "missing required key 'transforms.x.type'"));
}

TEST_CASE("negate belongs to the chain with a predicate, and to the transform without one") {
  // With a predicate the plugin never sees it (test_transform refuses unknown keys)...
  TransformChain negated = MustBuild(TagWhen("HasHeaderKey", {{"name", "tenant"}}, true));
  CHECK(Tagged(negated, testing::RoutedRecord()));
  // ...without one it is the plugin's own key, as filter's negate=true.
  CHECK(Contains(BuildErrorText({{"transforms", "tag"},
                                 {"transforms.tag.type", TestPluginFile("test_transform")},
                                 {"transforms.tag.negate", "true"}}),
                 "failed to start: unknown key 'negate'"));
}

TEST_CASE("an unknown type names the built-ins and where plugins were looked for") {
  const std::string no_path =
      BuildErrorText({{"transforms", "x"}, {"transforms.x.type", "RegexRouter"}});
  CHECK_MESSAGE(Contains(no_path, "'transforms.x.type' is 'RegexRouter', which is not a built-in "
                                  "transform (io.debezium.transforms.outbox.EventRouter, "
                                  "io.debezium.connector.postgresql.transforms."
                                  "DecodeLogicalDecodingMessageContent, "
                                  "org.apache.kafka.connect.transforms.Filter)"),
                no_path);
  CHECK_MESSAGE(Contains(no_path, "'plugin.path' is not set"), no_path);
  const std::string with_path = BuildErrorText({{"transforms", "x"},
                                                {"transforms.x.type", "RegexRouter"},
                                                {"plugin.path", "/nonexistent/a, /nonexistent/b"}});
  CHECK_MESSAGE(Contains(with_path, "no file 'RegexRouter.so' in 'plugin.path' (/nonexistent/a, "
                                    "/nonexistent/b)"),
                with_path);
}

TEST_CASE("plugin.path, predicates and every key handed to a plugin count as read") {
  const Properties config = testing::Config({{"plugin.path", WALRELAY_TEST_PLUGIN_DIR},
                                             {"transforms", "tag"},
                                             {"transforms.tag.type", "test_transform"},
                                             {"transforms.tag.tag", "x"},
                                             {"transforms.tag.predicate", "p"},
                                             {"predicates", "p,unused"},
                                             {"predicates.p.type", "HasHeaderKey"},
                                             {"predicates.p.name", "id"},
                                             {"predicates.unused.type", "RecordIsTombstone"},
                                             {"predicates.unused.typo", "x"}});
  auto chain = TransformChain::Build(config, testing::TestContext());
  REQUIRE_MESSAGE(chain.ok(), chain.status().ToString());
  CHECK(config.UnreadKeys() == std::vector<std::string>{"predicates.unused.typo"});
}

}  // namespace
}  // namespace walrelay
