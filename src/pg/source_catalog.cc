#include "pg/source_catalog.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

#include "pg/plain_connection.h"
#include "pg/replication_connection.h"

namespace walrelay {
namespace {

// FirstNormalObjectId: OIDs below it are built in, and the decoders name those themselves.
constexpr uint32_t kFirstNonBuiltinOid = 16384;

// One row per column of each ordinary or partitioned table, in column order.
constexpr const char* kColumnsQuery =
    "SELECT n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod), "
    "a.atttypid, a.atttypmod, COALESCE(a.attnum = ANY(i.indkey), false), a.attnotnull "
    "FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
    "LEFT JOIN pg_catalog.pg_index i ON i.indrelid = c.oid AND i.indisprimary "
    "WHERE c.relkind IN ('r', 'p') ";
constexpr const char* kAllUserTables =
    "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
    "AND n.nspname NOT LIKE 'pg\\_toast%' ORDER BY n.nspname, c.relname, a.attnum";
constexpr const char* kOneTable = "AND n.nspname = $1 AND c.relname = $2 ORDER BY a.attnum";

// Adds the rows of kColumnsQuery whose table `wanted` accepts.
void AddColumns(PGresult* r, const std::function<bool(const std::string&)>& wanted,
                CatalogSnapshot& out) {
  std::string last;
  CatalogTable* table = nullptr;
  for (int row = 0; row < PQntuples(r); ++row) {
    std::string qualified = std::string(PQgetvalue(r, row, 0)) + "." + PQgetvalue(r, row, 1);
    if (qualified != last) {
      last = qualified;
      table = wanted(qualified) ? &out.tables[qualified] : nullptr;
    }
    if (!table) continue;
    std::string name = PQgetvalue(r, row, 2);
    std::string type = PQgetvalue(r, row, 3);
    const auto oid = static_cast<uint32_t>(std::strtoul(PQgetvalue(r, row, 4), nullptr, 10));
    const auto typmod = static_cast<int32_t>(std::strtol(PQgetvalue(r, row, 5), nullptr, 10));
    if (oid >= kFirstNonBuiltinOid) out.type_names[{oid, typmod}] = type;
    if (PQgetvalue(r, row, 6)[0] == 't') table->primary_key.push_back(name);
    const bool not_null = PQgetvalue(r, row, 7)[0] == 't';
    table->columns.push_back({std::move(name), std::move(type), not_null});
  }
}

}  // namespace

Result<CatalogSnapshot> ReadCatalogSnapshot(ReplicationConnection& conn,
                                            const RelaySettings& settings) {
  auto res = conn.Query(std::string(kColumnsQuery) + kAllUserTables);
  if (!res.ok()) return res.status().WithContext("reading the included tables' columns");
  CatalogSnapshot snapshot;
  AddColumns(
      res->get(), [&](const std::string& t) { return settings.IncludesTable(t); }, snapshot);
  return snapshot;
}

Result<CatalogSnapshot> ReadTableCatalog(PGconn* conn, const std::string& schema,
                                         const std::string& table) {
  const std::string sql = std::string(kColumnsQuery) + kOneTable;
  const char* values[] = {schema.c_str(), table.c_str()};
  PgResultPtr res(PQexecParams(conn, sql.c_str(), 2, nullptr, values, nullptr, nullptr, 0));
  if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
    std::string why = res ? PQresultErrorMessage(res.get()) : PgErrorText(conn);
    while (!why.empty() && why.back() == '\n') why.pop_back();
    return Status::Connection("reading the columns of " + schema + "." + table + ": " + why);
  }
  CatalogSnapshot snapshot;
  AddColumns(
      res.get(), [](const std::string&) { return true; }, snapshot);
  return snapshot;
}

SourceCatalog::SourceCatalog(const RelaySettings& settings) : settings_(settings) {}
SourceCatalog::~SourceCatalog() = default;

void SourceCatalog::Adopt(std::shared_ptr<const CatalogSnapshot> snapshot) {
  snapshot_ = std::move(snapshot);
  asked_.clear();
  asked_types_.clear();
  live_.reset();  // opened again only if this session needs it
}

CatalogLookups SourceCatalog::Lookups() {
  CatalogLookups lookups;
  lookups.primary_key = [this](std::string_view schema, std::string_view table) {
    return PrimaryKey(schema, table);
  };
  lookups.table_columns = [this](std::string_view schema, std::string_view table) {
    return Columns(schema, table);
  };
  lookups.type_name = [this](uint32_t oid, int32_t typmod) { return TypeName(oid, typmod); };
  return lookups;
}

std::optional<std::vector<std::string>> SourceCatalog::PrimaryKey(std::string_view schema,
                                                                  std::string_view table) {
  const CatalogTable* found = Find(schema, table);
  if (!found) return std::nullopt;
  return found->primary_key;
}

std::optional<std::vector<CatalogColumn>> SourceCatalog::Columns(std::string_view schema,
                                                                 std::string_view table) {
  const CatalogTable* found = Find(schema, table);
  if (!found) return std::nullopt;
  return found->columns;
}

const CatalogTable* SourceCatalog::Find(std::string_view schema, std::string_view table) {
  std::string qualified = std::string(schema) + "." + std::string(table);
  if (snapshot_) {
    if (auto it = snapshot_->tables.find(qualified); it != snapshot_->tables.end())
      return &it->second;
  }
  if (auto it = asked_.find(qualified); it != asked_.end())
    return it->second ? &*it->second : nullptr;
  auto& kept = asked_[qualified];
  if (!snapshot_ || !settings_.IncludesTable(qualified)) return nullptr;
  // A table created since the connect: asked once, with short limits.
  auto res =
      LiveQuery(std::string(kColumnsQuery) + kOneTable, {std::string(schema), std::string(table)});
  if (!res.ok()) {
    spdlog::warn("cannot read the catalog entry of table {} created since the connect ({}); its "
                 "key is taken from the replication stream until the next connect",
                 qualified, res.status().message());
    return nullptr;
  }
  CatalogSnapshot one;
  AddColumns(
      res->get(), [](const std::string&) { return true; }, one);
  auto entry = one.tables.find(qualified);
  if (entry == one.tables.end()) return nullptr;
  kept = std::move(entry->second);
  return &*kept;
}

std::optional<std::string> SourceCatalog::TypeName(uint32_t oid, int32_t typmod) {
  if (snapshot_) {
    if (auto it = snapshot_->type_names.find({oid, typmod}); it != snapshot_->type_names.end())
      return it->second;
  }
  if (auto it = asked_types_.find({oid, typmod}); it != asked_types_.end()) return it->second;
  auto& kept = asked_types_[{oid, typmod}];
  if (!snapshot_) return std::nullopt;
  auto res = LiveQuery("SELECT format_type($1::oid, $2::int4)",
                       {std::to_string(oid), std::to_string(typmod)});
  if (!res.ok()) {
    spdlog::warn("cannot read the name of type {} ({}); using the name the replication stream "
                 "gives until the next connect",
                 oid, res.status().message());
    return std::nullopt;
  }
  if (PQntuples(res->get()) == 1 && !PQgetisnull(res->get(), 0, 0))
    kept = std::string(PQgetvalue(res->get(), 0, 0));
  return kept;
}

Result<PgResultPtr> SourceCatalog::LiveQuery(const std::string& sql,
                                             const std::vector<std::string>& params) {
  if (!live_ || PQstatus(live_.get()) != CONNECTION_OK) {
    auto conn = ConnectPlain(
        settings_.pg_params,
        {{"connect_timeout", std::to_string(kLiveConnectTimeoutSeconds)},
         {"options", "-c statement_timeout=" + std::to_string(kLiveStatementTimeoutMs)}},
        "a catalog query");
    if (!conn.ok()) return conn.status();
    live_ = std::move(conn).value();
  }
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p.c_str());
  PgResultPtr res(PQexecParams(live_.get(), sql.c_str(), static_cast<int>(values.size()), nullptr,
                               values.data(), nullptr, nullptr, 0));
  if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
    std::string why = res ? PQresultErrorMessage(res.get()) : PQerrorMessage(live_.get());
    while (!why.empty() && why.back() == '\n') why.pop_back();
    return Status::Connection("catalog query failed: " + why);
  }
  return res;
}

}  // namespace walrelay
