#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "decode/wal2json_decoder.h"

using namespace walrelay;

namespace {

std::vector<std::string> SampleLines() {
  std::ifstream in(std::string(WALRELAY_TEST_DATA) + "/wal2json_v2_sample.jsonl");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

const Column& Col(const RowChange& c, const std::string& name) {
  const Column* col = c.Find(name);
  REQUIRE_MESSAGE(col != nullptr, name);
  return *col;
}

}  // namespace

TEST_CASE("real wal2json v2 output decodes: begin, insert with every outbox column type, commit") {
  auto lines = SampleLines();
  REQUIRE(lines.size() >= 20);
  Wal2JsonDecoder decoder;
  DecodedMessage msg;

  // Lines 5-7 are BEGIN / INSERT / COMMIT of xid 727.
  REQUIRE(decoder.Decode(lines[4], Lsn(0x1546390), msg).ok());
  CHECK(msg.kind == MessageKind::kBegin);
  CHECK(msg.begin.xid == 727);
  CHECK(msg.begin.commit_time_ms == 1795283300963);

  REQUIRE(decoder.Decode(lines[5], Lsn(0x1546390), msg).ok());
  REQUIRE(msg.kind == MessageKind::kChange);
  const RowChange& c = msg.change;
  CHECK(c.op == ChangeOp::kInsert);
  CHECK(c.schema == "public");
  CHECK(c.table == "outbox");
  CHECK(c.lsn == Lsn(0x1546390));
  CHECK(c.xid == 727);
  CHECK(c.primary_key == std::vector<std::string>{"id"});
  CHECK(Col(c, "id").text == "8f6b9c1e-0000-4000-8000-000000000001");
  CHECK(Col(c, "id").type == "uuid");
  CHECK(Col(c, "aggregatetype").type == "character varying(255)");
  CHECK(Col(c, "payload").kind == ValueKind::kString);
  CHECK(Col(c, "payload").text == "{\"a\": \"é\\\"x\", \"n\": null, \"arr\": []}");
  CHECK(Col(c, "ts").text == "2019-03-24 20:52:59.123");
  CHECK(Col(c, "n").kind == ValueKind::kNumber);
  CHECK(Col(c, "n").text == "5");
  CHECK(Col(c, "b").text == "0102ff");
  CHECK(Col(c, "flag").kind == ValueKind::kBool);
  CHECK(Col(c, "flag").text == "true");
  CHECK(Col(c, "num").kind == ValueKind::kNumber);
  CHECK(Col(c, "num").text == "1.50");  // exact digits, not a double
  CHECK(Col(c, "t").text == "line1\nline2\"q");
  CHECK(Col(c, "big").text == "9007199254740993");  // beyond double precision
  CHECK(Col(c, "r").is_null());

  REQUIRE(decoder.Decode(lines[6], Lsn(0x1546528), msg).ok());
  CHECK(msg.kind == MessageKind::kCommit);
  CHECK(msg.commit.end_lsn == Lsn(0x1546528));
  CHECK(msg.commit.xid == 727);
}

TEST_CASE("update, delete, truncate and message decode with their images") {
  auto lines = SampleLines();
  Wal2JsonDecoder decoder;
  DecodedMessage msg;
  bool saw_update = false, saw_delete = false, saw_truncate = false, saw_message = false;
  for (const auto& line : lines) {
    REQUIRE_MESSAGE(decoder.Decode(line, Lsn(1), msg).ok(), line);
    if (msg.kind == MessageKind::kMessage) {
      saw_message = true;
      CHECK(msg.message.prefix == "pfx");
      CHECK(msg.message.content == "hello");
      CHECK(msg.message.transactional);
    }
    if (msg.kind != MessageKind::kChange) continue;
    if (msg.change.op == ChangeOp::kUpdate) {
      saw_update = true;
      CHECK(msg.change.Find("type")->text == "u");
      REQUIRE(msg.change.identity.size() == 1);
      CHECK(msg.change.identity[0].name == "id");
      // The key kept its value: no old tuple, so no before image.
      CHECK(msg.change.before.empty());
    } else if (msg.change.op == ChangeOp::kDelete) {
      saw_delete = true;
      CHECK(msg.change.columns.empty());
      CHECK(msg.change.identity.at(0).text == "8f6b9c1e-0000-4000-8000-000000000002");
      // Without the catalog's columns, the before image is the old key.
      REQUIRE(msg.change.before.size() == 1);
      CHECK(msg.change.before[0].text == "8f6b9c1e-0000-4000-8000-000000000002");
      CHECK(!msg.change.before[0].optional);
    } else if (msg.change.op == ChangeOp::kTruncate) {
      saw_truncate = true;
      CHECK(msg.change.table == "outbox");
    }
  }
  CHECK(saw_update);
  CHECK(saw_delete);
  CHECK(saw_truncate);
  CHECK(saw_message);
}

TEST_CASE("unicode, control characters and backslashes survive decoding") {
  auto lines = SampleLines();
  Wal2JsonDecoder decoder;
  DecodedMessage msg;
  REQUIRE(decoder.Decode(lines[lines.size() - 2], Lsn(1), msg).ok());
  REQUIRE(msg.kind == MessageKind::kChange);
  CHECK(msg.change.Find("aggregatetype")->text == "Ünïcode");
  CHECK(msg.change.Find("aggregateid")->text == "k\"q");
  CHECK(msg.change.Find("payload")->text ==
        "{\"bs\": \"c:\\\\\\\\x\", \"tab\": \"a\\tb\", \"emoji\": \"😀\"}");
  CHECK(msg.change.Find("t")->text == std::string("ctl\x01 and \\ backslash"));
}

TEST_CASE("decoder reuses storage: a shorter row after a longer one has no stale columns") {
  auto lines = SampleLines();
  Wal2JsonDecoder decoder;
  DecodedMessage msg;
  REQUIRE(decoder.Decode(lines[5], Lsn(1), msg).ok());
  CHECK(msg.change.columns.size() == 13);
  REQUIRE(
      decoder
          .Decode(
              R"({"action":"I","xid":1,"lsn":"0/10","schema":"s","table":"t","columns":[{"name":"a","type":"text","value":"x"}]})",
              Lsn(1), msg)
          .ok());
  CHECK(msg.change.columns.size() == 1);
  CHECK(msg.change.identity.empty());
  CHECK(msg.change.primary_key.empty());
}

TEST_CASE("malformed messages are errors that name the LSN") {
  Wal2JsonDecoder decoder;
  DecodedMessage msg;
  const Lsn at(0x1234ABCD);
  for (
      const char* bad :
      {"not json", "[]", R"({"xid":1})", R"({"action":"X"})", R"({"action":"I","lsn":"0/1"})",
       R"({"action":"I","lsn":"0/1","schema":"s","table":"t"})",
       R"({"action":"I","lsn":"0/1","schema":"s","table":"t","columns":[{"type":"int"}]})",
       R"({"action":"I","lsn":"0/1","schema":"s","table":"t","columns":[{"name":"a","value":{}}]})",
       R"({"action":"B","timestamp":"yesterday"})", R"({"action":"C","nextlsn":"zz"})"}) {
    Status st = decoder.Decode(bad, at, msg);
    CHECK_MESSAGE(!st.ok(), bad);
    CHECK_MESSAGE(st.message().find("0/1234ABCD") != std::string::npos, st.message());
  }
}

TEST_CASE("a row of a table the filter refuses is skipped before its columns are decoded") {
  Wal2JsonDecoder decoder;
  std::vector<std::string> asked;
  decoder.SetTableFilter([&asked](std::string_view schema, std::string_view table) {
    asked.push_back(std::string(schema) + "." + std::string(table));
    return schema == "public" && table == "outbox";
  });
  DecodedMessage msg;
  const Lsn at(0x2000);
  // Columns the decoder refuses (a column without a name, an object value, broken JSON after
  // the table): an error for a wanted table, nothing for another.
  const char* bad_rows[] = {
      R"({"action":"I","lsn":"0/1F00","schema":"S","table":"T","columns":[{"type":"int"}]})",
      R"({"action":"U","lsn":"0/1F00","schema":"S","table":"T","columns":[{"name":"a","value":{}}]})",
      R"({"action":"I","lsn":"0/1F00","schema":"S","table":"T","columns":[{"name":"a",)",
  };
  auto of_table = [](std::string row, const std::string& schema, const std::string& table) {
    row.replace(row.find("\"S\""), 3, "\"" + schema + "\"");
    row.replace(row.find("\"T\""), 3, "\"" + table + "\"");
    return row;
  };
  for (const char* row : bad_rows) {
    const std::string excluded = of_table(row, "audit", "log");
    REQUIRE_MESSAGE(decoder.Decode(excluded, at, msg).ok(), excluded);
    CHECK(msg.kind == MessageKind::kExcludedChange);
    CHECK(msg.change.schema == "audit");
    CHECK(msg.change.table == "log");
    CHECK(msg.change.lsn == Lsn(0x1F00));
    CHECK(asked.back() == "audit.log");

    const std::string wanted = of_table(row, "public", "outbox");
    Status st = decoder.Decode(wanted, at, msg);
    CHECK_MESSAGE(!st.ok(), wanted);
    CHECK(st.message().find("0/2000") != std::string::npos);
  }
  // A good row of the wanted table still decodes whole, also right after a skipped one.
  REQUIRE(decoder
              .Decode(R"({"action":"I","lsn":"0/1F00","schema":"public","table":"outbox",)"
                      R"("columns":[{"name":"id","type":"integer","value":7}]})",
                      at, msg)
              .ok());
  REQUIRE(msg.kind == MessageKind::kChange);
  REQUIRE(msg.change.columns.size() == 1);
  CHECK(msg.change.columns[0].text == "7");
  // Transaction boundaries carry no table and are never filtered.
  REQUIRE(decoder.Decode(R"({"action":"C","nextlsn":"0/2100"})", at, msg).ok());
  CHECK(msg.kind == MessageKind::kCommit);
}
