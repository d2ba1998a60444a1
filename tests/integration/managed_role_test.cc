// Managed-service roles (RDS, Cloud SQL, Azure): a role with REPLICATION that owns the outbox
// table but is not a superuser, against real PostgreSQL (Debian's 15; 17 and other majors
// through WALRELAY_TEST_PG_MAJOR, tests/CMakeLists.txt) and the mock cluster. It streams with
// publication.autocreate.mode=filtered and with a publication created beforehand, under
// slot health; the default all_tables mode fails at once naming the mode to use.
#include <csignal>

#include "outbox_events.h"
#include "relay_fixture.h"

using namespace walrelay;
using namespace walrelay::testing;
using namespace std::chrono_literals;

namespace {

// As the providers grant it: LOGIN REPLICATION, CREATE on the database, owner of the outbox.
void CreateManagedRole(RelayFixture& fx) {
  fx.Exec("CREATE ROLE app_relay LOGIN REPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE;"
          "GRANT CREATE ON DATABASE postgres TO app_relay;"
          "ALTER TABLE public.outbox OWNER TO app_relay");
  REQUIRE(fx.Value("SELECT rolsuper::text FROM pg_roles WHERE rolname = 'app_relay'") == "false");
}

// Writes `n` outbox rows in single-row transactions and checks they all arrive once.
void WriteAndRead(RelayFixture& fx, const std::string& slot, int first, int n) {
  std::string sql;
  for (int seq = first; seq < first + n; ++seq) sql += "BEGIN;" + InsertEvent(seq) + "COMMIT;";
  fx.Exec(sql);
  const Lsn end = fx.CurrentWal();
  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast(OutboxTopics(), static_cast<size_t>(n), 30s);
  REQUIRE(records.ok());
  auto seen = CheckRecords(*records);
  CHECK(seen.size() == static_cast<size_t>(n));
  for (const auto& entry : seen) {
    const auto& s = entry.first;
    const auto& count = entry.second;
    CHECK_MESSAGE(count == 1, "seq " << s << " x" << count);
  }
  CHECK(fx.WaitConfirmed(slot, end, 20s) >= end);
}

void StopRelay(devtools::ChildProcess& relay) {
  REQUIRE(relay.Kill(SIGTERM).ok());
  auto code = relay.Wait(20s);
  REQUIRE(code.ok());
  CHECK(*code == 0);
}

}  // namespace

TEST_CASE("managed role: REPLICATION owner without superuser streams with "
          "publication.autocreate.mode=filtered") {
  RelayFixture fx;
  fx.UsePlugin("pgoutput");
  CreateManagedRole(fx);
  const std::map<std::string, std::string> config = {{"database.user", "app_relay"},
                                                     {"publication.autocreate.mode", "filtered"},
                                                     {"slot.health.interval.ms", "500"}};
  auto relay = fx.StartRelay(fx.WriteConfig("managed", config));
  CHECK(fx.Value("SELECT pubowner::regrole::text || '/' || puballtables::text FROM "
                 "pg_publication WHERE pubname = 'dbz_publication'") == "app_relay/false");
  CHECK(fx.Value("SELECT string_agg(schemaname || '.' || tablename, ',') FROM "
                 "pg_publication_tables WHERE pubname = 'dbz_publication'") == "public.outbox");
  WriteAndRead(fx, "managed", 1, 200);
  // The slot health check works with the role's own rights (no pg_monitor): no read failure.
  CHECK(Log(fx).find("slot health") == std::string::npos);
  StopRelay(*relay);
  MESSAGE("PostgreSQL " << fx.pg().major_version() << ": filtered publication as app_relay");
}

TEST_CASE("managed role: a publication created beforehand by an administrator, with "
          "publication.autocreate.mode=disabled") {
  RelayFixture fx;
  fx.UsePlugin("pgoutput");
  CreateManagedRole(fx);
  fx.Exec("CREATE PUBLICATION outbox_pub FOR TABLE public.outbox");  // as the administrator
  auto relay =
      fx.StartRelay(fx.WriteConfig("precreated", {{"database.user", "app_relay"},
                                                  {"publication.name", "outbox_pub"},
                                                  {"publication.autocreate.mode", "disabled"}}));
  WriteAndRead(fx, "precreated", 1, 100);
  CHECK(fx.Value("SELECT count(*) FROM pg_publication") == "1");  // nothing created
  StopRelay(*relay);
}

TEST_CASE("managed role: the default all_tables mode without superuser stops at once (exit 19) "
          "naming publication.autocreate.mode=filtered") {
  RelayFixture fx;
  fx.UsePlugin("pgoutput");
  CreateManagedRole(fx);
  auto relay = fx.SpawnRelay(fx.WriteConfig("alltables", {{"database.user", "app_relay"}}));
  auto code = relay->Wait(30s);
  REQUIRE(code.ok());
  const std::string log = Log(fx);
  CHECK_MESSAGE(*code == 19, log);
  CHECK_MESSAGE(log.find("FOR ALL TABLES needs a superuser") != std::string::npos, log);
  CHECK_MESSAGE(log.find("publication.autocreate.mode=filtered") != std::string::npos, log);
  CHECK(fx.Value("SELECT count(*) FROM pg_publication") == "0");
}
