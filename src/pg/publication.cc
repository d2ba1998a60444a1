#include "pg/publication.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace walrelay {
namespace {

constexpr const char* kInsufficientPrivilege = "42501";

struct PublicationState {
  bool exists = false;
  bool all_tables = false;
  std::vector<std::string> tables;
  PublishedOperations publishes;
};

Result<PublicationState> ReadPublication(ReplicationConnection& conn, const std::string& name) {
  PublicationState state;
  auto pub = conn.Query("SELECT puballtables, pubinsert, pubupdate, pubdelete, pubtruncate FROM "
                        "pg_catalog.pg_publication WHERE pubname = " +
                        conn.QuoteLiteral(name));
  if (!pub.ok()) return pub.status();
  if (PQntuples(pub->get()) == 0) return state;
  state.exists = true;
  auto flag = [&](int column) { return PQgetvalue(pub->get(), 0, column)[0] == 't'; };
  state.all_tables = flag(0);
  state.publishes = {flag(1), flag(2), flag(3), flag(4)};
  auto tables = conn.Query(
      "SELECT schemaname || '.' || tablename FROM pg_catalog.pg_publication_tables WHERE "
      "pubname = " +
      conn.QuoteLiteral(name) + " ORDER BY 1");
  if (!tables.ok()) return tables.status();
  for (int i = 0; i < PQntuples(tables->get()); ++i)
    state.tables.push_back(PQgetvalue(tables->get(), i, 0));
  return state;
}

// The existing tables table.include.list matches, sorted.
Result<std::vector<std::string>> IncludedTables(ReplicationConnection& conn,
                                                const RelaySettings& settings) {
  auto res = conn.Query(
      "SELECT schemaname || '.' || tablename FROM pg_catalog.pg_tables WHERE schemaname NOT IN "
      "('pg_catalog', 'information_schema') ORDER BY 1");
  if (!res.ok()) return res.status();
  std::vector<std::string> tables;
  for (int i = 0; i < PQntuples(res->get()); ++i) {
    std::string t = PQgetvalue(res->get(), i, 0);
    if (settings.IncludesTable(t)) tables.push_back(std::move(t));
  }
  return tables;
}

// The operations a publication scoped by skipped.operations publishes.
PublishedOperations Scoped(const SkippedOperations& skipped) {
  return {skipped.Publishes('c'), skipped.Publishes('u'), skipped.Publishes('d'),
          skipped.Publishes('t')};
}

std::string QuotedTableList(ReplicationConnection& conn, const std::vector<std::string>& tables) {
  std::string list;
  for (const auto& t : tables) {
    const auto dot = t.find('.');
    if (!list.empty()) list += ", ";
    list += conn.QuoteIdentifier(t.substr(0, dot)) + "." + conn.QuoteIdentifier(t.substr(dot + 1));
  }
  return list;
}

std::string Joined(const std::vector<std::string>& tables) {
  std::string out;
  for (const auto& t : tables) out += (out.empty() ? "" : ", ") + t;
  return out;
}

Status Change(ReplicationConnection& conn, const RelaySettings& settings, const std::string& sql,
              const std::string& what, const std::string& remedy) {
  auto res = conn.Query(sql, PGRES_COMMAND_OK);
  if (res.ok()) return Status::Ok();
  if (conn.last_sqlstate() == kInsufficientPrivilege) {
    return Status(ErrorCode::kPublicationPrivilege,
                  "cannot " + what + " (publication.autocreate.mode=" +
                      PublicationModeName(settings.publication_mode) +
                      "): the user in "
                      "'database.user' lacks the privilege (" +
                      res.status().message() + "); " + remedy);
  }
  if (!conn.last_sqlstate().empty())
    return Status::Precondition("cannot " + what + ": " + res.status().message());
  return res.status();
}

}  // namespace

bool PublishedOperations::Carries(char op) const {
  switch (op) {
    case 'c': return insert;
    case 'u': return update;
    case 'd': return remove;
    case 't': return truncate;
    default: return true;
  }
}

std::string PublishedOperations::ToString() const {
  std::string out;
  for (const auto& [on, name] : {std::pair{insert, "insert"}, std::pair{update, "update"},
                                 std::pair{remove, "delete"}, std::pair{truncate, "truncate"}})
    if (on) out += (out.empty() ? "" : ", ") + std::string(name);
  return out.empty() ? "nothing" : out;
}

std::optional<std::string> PublishChange(const SkippedOperations& skipped,
                                         const PublishedOperations& current) {
  const std::optional<std::string> wanted = skipped.PublishOption();
  if (!wanted) return std::nullopt;  // unset or none: the publication is left as it is
  for (char op : {'c', 'u', 'd', 't'})
    if (current.Carries(op) != skipped.Publishes(op)) return wanted;
  return std::nullopt;
}

const char* PublicationModeName(PublicationMode mode) {
  switch (mode) {
    case PublicationMode::kAllTables: return "all_tables";
    case PublicationMode::kDisabled: return "disabled";
    case PublicationMode::kFiltered: return "filtered";
    case PublicationMode::kNoTables: return "no_tables";
  }
  return "?";
}

Status EnsurePublication(ReplicationConnection& conn, const RelaySettings& settings, bool apply,
                         PublicationReport& report) {
  const std::string& name = settings.publication_name;
  const std::string quoted = conn.QuoteIdentifier(name);
  const std::string label = "publication '" + name + "'";
  auto state = ReadPublication(conn, name);
  if (!state.ok()) return state.status();
  report.existed = state->exists;
  report.all_tables = state->all_tables;
  report.tables = state->tables;
  report.publishes = state->publishes;
  report.action = "used as it is";
  const std::optional<std::string> publish = settings.skipped_operations.PublishOption();
  const std::string with_publish = publish ? " WITH (publish = '" + *publish + "')" : "";

  std::vector<std::string> wanted;  // filtered mode: the tables it should publish
  if (settings.publication_mode == PublicationMode::kFiltered) {
    auto included = IncludedTables(conn, settings);
    if (!included.ok()) return included.status();
    wanted = std::move(included).value();
    if (wanted.empty()) {
      return Status(ErrorCode::kPublicationLacksTable,
                    "no existing table matches 'table.include.list', so " + label +
                        " cannot be created or updated with publication.autocreate.mode="
                        "filtered; create the outbox table first or fix the list");
    }
  }

  if (!state->exists) {
    std::string sql = "CREATE PUBLICATION " + quoted;
    std::string what, remedy;
    switch (settings.publication_mode) {
      case PublicationMode::kDisabled:
        return Status(ErrorCode::kPublicationMissing,
                      label + " does not exist in database '" + settings.dbname +
                          "' and publication.autocreate.mode=disabled; create it (CREATE "
                          "PUBLICATION " +
                          quoted +
                          " FOR TABLE <outbox table>) or let walrelay "
                          "create it (publication.autocreate.mode=filtered or all_tables)");
      case PublicationMode::kAllTables:
        sql += " FOR ALL TABLES";
        what = "create " + label + " FOR ALL TABLES";
        remedy = "FOR ALL TABLES needs a superuser: create it as one, or use "
                 "publication.autocreate.mode=filtered (needs CREATE on the database and "
                 "ownership of the included tables)";
        report.all_tables = true;
        break;
      case PublicationMode::kFiltered:
        sql += " FOR TABLE " + QuotedTableList(conn, wanted);
        what = "create " + label + " FOR TABLE " + Joined(wanted);
        remedy = "grant CREATE on the database and ownership of the tables, or create the "
                 "publication as their owner (publication.autocreate.mode=disabled)";
        report.tables = wanted;
        break;
      case PublicationMode::kNoTables:
        what = "create " + label + " without tables";
        remedy = "grant CREATE on the database, or create the publication by hand";
        break;
    }
    sql += with_publish;
    if (publish) {
      what += " publishing " + (publish->empty() ? "nothing" : *publish);
      report.publishes = Scoped(settings.skipped_operations);
    }
    report.action = apply ? "created" : "`run` creates it";
    if (apply) WALRELAY_RETURN_IF_ERROR(Change(conn, settings, sql, what, remedy));
  } else if (settings.publication_mode == PublicationMode::kFiltered && !state->all_tables &&
             state->tables != wanted) {
    const std::string what =
        "update " + label + " to table.include.list's tables (" + Joined(wanted) + ")";
    report.action = apply ? "updated to table.include.list's tables (was: " +
                                (state->tables.empty() ? "none" : Joined(state->tables)) + ")"
                          : "`run` sets its tables to table.include.list's";
    report.tables = wanted;
    if (apply) {
      WALRELAY_RETURN_IF_ERROR(Change(
          conn, settings,
          "ALTER PUBLICATION " + quoted + " SET TABLE " + QuotedTableList(conn, wanted), what,
          "make the user the owner of the publication and of the tables, or set them by "
          "hand (publication.autocreate.mode=disabled)"));
    }
  }
  // filtered mode keeps an existing publication's operations in step with
  // skipped.operations too (Debezium 3.6 only sets them when it creates one or changes its
  // tables); the other modes use an existing publication as it is.
  if (state->exists && settings.publication_mode == PublicationMode::kFiltered) {
    if (auto change = PublishChange(settings.skipped_operations, state->publishes)) {
      const std::string what =
          "set the operations " + label + " publishes to '" + *change + "' (skipped.operations)";
      const std::string was = "was: " + state->publishes.ToString();
      report.action = (report.action == "used as it is" ? std::string() : report.action + "; ") +
                      (apply ? "its operations set to '" + *change + "' (" + was + ")"
                             : "`run` sets its operations to '" + *change + "' (" + was + ")");
      report.publishes = Scoped(settings.skipped_operations);
      if (apply) {
        WALRELAY_RETURN_IF_ERROR(
            Change(conn, settings,
                   "ALTER PUBLICATION " + quoted + " SET (publish = '" + *change + "')", what,
                   "make the user the owner of the publication, or set them by hand "
                   "(publication.autocreate.mode=disabled)"));
      }
    }
  } else if (state->exists && PublishChange(settings.skipped_operations, state->publishes)) {
    // Correct either way (the relay skips those changes), only wasteful: say how to scope it.
    spdlog::warn("{} publishes {}, and skipped.operations asks for '{}'; walrelay skips the "
                 "others, but they still leave PostgreSQL: ALTER PUBLICATION {} SET (publish = "
                 "'{}') keeps them there (publication.autocreate.mode={} leaves it as it is)",
                 label, state->publishes.ToString(), *publish, quoted, *publish,
                 PublicationModeName(settings.publication_mode));
  }
  if (apply && report.action != "used as it is") {
    auto after = ReadPublication(conn, name);
    if (!after.ok()) return after.status();
    report.all_tables = after->all_tables;
    report.tables = after->tables;
    report.publishes = after->publishes;
  }

  if (report.all_tables) return Status::Ok();
  for (const auto& table : settings.PlainIncludedTables()) {
    if (std::find(report.tables.begin(), report.tables.end(), table) != report.tables.end())
      continue;
    return Status(ErrorCode::kPublicationLacksTable,
                  label + " does not publish table " + table +
                      " (from 'table.include.list'), so "
                      "its rows would never reach walrelay; run ALTER PUBLICATION " +
                      quoted + " ADD TABLE " + QuotedTableList(conn, {table}) +
                      ", or use publication.autocreate.mode=filtered");
  }
  return Status::Ok();
}

}  // namespace walrelay
