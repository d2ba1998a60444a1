// The replication connection against a real PostgreSQL and the mock Kafka cluster: the slot's
// identity across reconnects, a loop that stays responsive while connecting, silent
// connections, and failures classified by what they are rather than by their wording.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <optional>
#include <sstream>

#include "config/connector_config.h"
#include "config/relay_settings.h"
#include "outbox_events.h"
#include "pg/replication_connection.h"
#include "relay/relay.h"
#include "relay_fixture.h"
#include "rest_client.h"
#include "status/rest_api.h"

using namespace walrelay;
using namespace walrelay::testing;

namespace {

using namespace std::chrono_literals;

RelaySettings Settings(RelayFixture& fx, const std::string& slot,
                       const std::map<std::string, std::string>& overrides) {
  auto config = LoadConnectorConfig(fx.WriteConfig(slot, overrides));
  REQUIRE(config.ok());
  auto settings = ParseRelaySettings(*config);
  REQUIRE_MESSAGE(settings.ok(), settings.status().ToString());
  return std::move(settings).value();
}

// A relay and its REST API in this process, its loop on a thread of its own.
class InProcessRelay {
 public:
  explicit InProcessRelay(RelaySettings settings)
      : relay_(Built(std::move(settings), io_)), api_(*relay_, "127.0.0.1:0") {
    loop_ = std::thread([this] { result_.set_value(relay_->Run()); });
  }
  ~InProcessRelay() {
    relay_->RequestStop();
    loop_.join();
  }
  Relay& relay() { return *relay_; }
  // Runs `fn` on the loop; nullopt if the loop did not get to it within `timeout`.
  template <typename Fn>
  auto OnLoop(Fn fn, std::chrono::milliseconds timeout = 1000ms) -> std::optional<decltype(fn())> {
    auto done = std::make_shared<std::promise<decltype(fn())>>();
    auto answer = done->get_future();
    boost::asio::post(io_, [done, fn] { done->set_value(fn()); });
    if (answer.wait_for(timeout) != std::future_status::ready) return std::nullopt;
    return answer.get();
  }
  std::optional<HttpResponse> Get(const std::string& path) {
    return OnLoop([this, path] { return api_.Handle({"GET", path}); });
  }
  // True if Run() returned within `timeout`.
  bool StoppedWithin(std::chrono::milliseconds timeout) {
    return finished_.wait_for(timeout) == std::future_status::ready;
  }

 private:
  static std::unique_ptr<Relay> Built(RelaySettings settings, boost::asio::io_context& io) {
    auto relay = Relay::Create(std::move(settings), io);
    REQUIRE_MESSAGE(relay.ok(), relay.status().ToString());
    return std::move(relay).value();
  }

  boost::asio::io_context io_{1};
  std::unique_ptr<Relay> relay_;
  RestApi api_;
  std::promise<Status> result_;
  std::future<Status> finished_ = result_.get_future();
  std::thread loop_;
};

// A plain libpq session of the test's own, for holding a transaction open.
class Session {
 public:
  explicit Session(RelayFixture& fx)
      : conn_(PQconnectdb(
            ("host=127.0.0.1 dbname=postgres user=postgres port=" + std::to_string(fx.pg().port()))
                .c_str())) {
    REQUIRE(PQstatus(conn_.get()) == CONNECTION_OK);
  }
  void Exec(const std::string& sql) {
    PgResultPtr res(PQexec(conn_.get(), sql.c_str()));
    REQUIRE_MESSAGE(PQresultStatus(res.get()) == PGRES_COMMAND_OK, PQerrorMessage(conn_.get()));
  }

 private:
  PgConnPtr conn_;
};

// Ends the relay's walsender and drops the slot before the relay reconnects; returns the
// slot's last confirmed position.
Lsn DropSlotUnderRelay(RelayFixture& fx, const std::string& slot) {
  fx.Value("SELECT pg_terminate_backend(active_pid)::text FROM pg_replication_slots WHERE "
           "slot_name = '" +
           slot + "'");
  fx.WaitSlotFree(slot);
  const Lsn confirmed = fx.ConfirmedFlush(slot);
  fx.Exec("SELECT pg_drop_replication_slot('" + slot + "')");
  return confirmed;
}

std::string SlotCount(const std::string& slot) {
  return "SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = '" + slot + "'";
}

}  // namespace

TEST_CASE(
    "a slot dropped under a streaming relay stops it with exit 16 rather than re-creating it") {
  RelayFixture fx;
  // The reconnect waits long enough for the test to drop the slot first.
  const std::map<std::string, std::string> slow_reconnect = {
      {"reconnect.backoff.initial.ms", "3000"}, {"reconnect.backoff.max.ms", "3000"}};
  auto relay = fx.StartRelay(fx.WriteConfig("gone", slow_reconnect));
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  const Lsn first = fx.CurrentWal();
  REQUIRE(fx.WaitConfirmed("gone", first, 20s) >= first);
  const Lsn confirmed = DropSlotUnderRelay(fx, "gone");
  auto code = relay->Wait(20s);
  REQUIRE_MESSAGE(code.ok(), Log(fx));
  CHECK_MESSAGE(*code == 16, Log(fx));
  const std::string log = Log(fx);
  CHECK(log.find("replication slot 'gone' this connector streamed from no longer exists") !=
        std::string::npos);
  CHECK(log.find("the last LSN confirmed to it was " + confirmed.ToString()) != std::string::npos);
  CHECK(fx.Value(SlotCount("gone")) == "0");

  {
    // slot.recreate.when.missing=true creates it again, says so at error level, counts it.
    auto config = slow_reconnect;
    config["slot.recreate.when.missing"] = "true";
    auto again = fx.StartRelay(fx.WriteConfig("gone", config));
    const int port = RestPort(fx);
    // The connector's stored position says the slot was streamed from: a new process creating
    // it again is a re-creation too.
    CHECK(Metric(Http(port, "GET", "/metrics").body, "walrelay_slot_recreated_total") == 1);
    CHECK(Log(fx).find("(the last stored position)") != std::string::npos);
    fx.Exec("BEGIN;" + InsertEvent(2) + "COMMIT;");
    const Lsn second = fx.CurrentWal();
    REQUIRE(fx.WaitConfirmed("gone", second, 20s) >= second);
    const Lsn last = DropSlotUnderRelay(fx, "gone");
    REQUIRE(devtools::WaitForFileContains(fx.log_path(), "has been created again", 20s));
    REQUIRE(Eventually([&] { return Count(Log(fx), "streaming slot") == 2; }, 10s));
    const std::string recreated = Log(fx);
    CHECK(recreated.find(" error replication slot 'gone' was missing") != std::string::npos);
    CHECK_MESSAGE(recreated.find("rows committed between LSN " + last.ToString() +
                                 " (the last confirmed) and LSN ") != std::string::npos,
                  recreated);
    CHECK(fx.Value(SlotCount("gone")) == "1");
    CHECK(Metric(Http(port, "GET", "/metrics").body, "walrelay_slot_recreated_total") == 2);
    fx.Exec("BEGIN;" + InsertEvent(3) + "COMMIT;");
    auto reader = fx.Reader();
    auto records = reader->ReadAtLeast(OutboxTopics(), 3, 20s);
    REQUIRE(records.ok());
    CHECK(CheckRecords(*records).count(3) == 1);
    CHECK(again->Running());
  }
}

TEST_CASE("a slot moved by another process meanwhile: the relay never confirms below it") {
  RelayFixture fx;
  InProcessRelay in_process(
      Settings(fx, "moved",
               {{"reconnect.backoff.initial.ms", "3000"}, {"reconnect.backoff.max.ms", "3000"}}));
  Relay& relay = in_process.relay();
  REQUIRE(Eventually([&] { return relay.streaming(); }, 20s));
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  const Lsn first = fx.CurrentWal();
  REQUIRE(fx.WaitConfirmed("moved", first, 20s) >= first);
  // Paused, the relay reads nothing from the server, so only the slot's position as read at
  // connect can correct its ledger.
  REQUIRE(in_process
              .OnLoop([&] {
                relay.Pause();
                return true;
              })
              .has_value());
  fx.Value("SELECT pg_terminate_backend(active_pid)::text FROM pg_replication_slots WHERE "
           "slot_name = 'moved'");
  fx.WaitSlotFree("moved");
  fx.Exec("INSERT INTO unrelated (filler) VALUES ('wal the relay never saw')");
  const Lsn moved = *Lsn::Parse(fx.Value(
      "SELECT end_lsn::text FROM pg_replication_slot_advance('moved', pg_current_wal_lsn())"));
  REQUIRE(moved > first);
  // Back on the slot, paused: only periodic status updates (every 200 ms) go to the server.
  const std::string reported =
      "SELECT coalesce(flush_lsn::text, '') FROM pg_stat_replication r JOIN pg_replication_slots "
      "s ON s.active_pid = r.pid WHERE s.slot_name = 'moved'";
  REQUIRE(Eventually(
      [&] {
        auto v = fx.pg().QueryValue(reported);
        return v.ok() && !v->empty();
      },
      20s));
  const Lsn flushed = *Lsn::Parse(fx.Value(reported));
  CHECK_MESSAGE(flushed >= moved,
                "flush " << flushed.ToString() << " below the slot's " << moved.ToString());
  CHECK(fx.ConfirmedFlush("moved") >= moved);
  CHECK(relay.confirmed_lsn() >= moved);
}

TEST_CASE("connecting never blocks the loop: REST answers while the slot waits for a transaction") {
  RelayFixture fx;
  const std::string waiting =
      "SELECT count(*)::text FROM pg_stat_activity WHERE query LIKE 'CREATE_REPLICATION_SLOT%'";
  auto hold_transaction = [&](Session& session) {
    session.Exec("BEGIN");
    session.Exec("INSERT INTO unrelated (filler) VALUES ('holds back slot creation')");
  };
  {
    // Declared first, destroyed last: the held transaction ends (and the relay can finish
    // connecting) before the relay is stopped, whatever this block's checks find.
    std::optional<InProcessRelay> relay;
    Session holder(fx);
    hold_transaction(holder);
    relay.emplace(Settings(fx, "blocked", {}));
    InProcessRelay& in_process = *relay;
    REQUIRE(Eventually([&] { return fx.Value(waiting) == "1"; }, 20s));
    for (int i = 0; i < 3; ++i) {
      auto health = in_process.Get("/healthz");
      REQUIRE_MESSAGE(health, "/healthz did not answer within 1 s while connecting");
      CHECK(health->status == 503);
      CHECK_MESSAGE(health->body.find("no replication connection") != std::string::npos,
                    health->body);
      auto status = in_process.Get("/connectors/itest-blocked/status");
      REQUIRE_MESSAGE(status, "/status did not answer within 1 s while connecting");
      CHECK(status->status == 200);
      CHECK(in_process.relay().state() == RelayState::kConnecting);
    }
    holder.Exec("COMMIT");
    CHECK(Eventually([&] { return in_process.relay().streaming(); }, 20s));
  }
  {
    // A stop while the slot waits: the creation is cancelled and the relay stops at once.
    std::optional<InProcessRelay> relay;
    Session holder(fx);
    hold_transaction(holder);
    relay.emplace(Settings(fx, "stopped", {}));
    InProcessRelay& in_process = *relay;
    REQUIRE(Eventually([&] { return fx.Value(waiting) == "1"; }, 20s));
    const auto start = std::chrono::steady_clock::now();
    in_process.relay().RequestStop();
    CHECK(in_process.StoppedWithin(2s));
    CHECK(std::chrono::steady_clock::now() - start < 2s);
    CHECK(Eventually([&] { return fx.Value(waiting) == "0"; }, 5s));
    holder.Exec("COMMIT");
  }
}

TEST_CASE("a walsender that stops answering is noticed by the receive timeout and reconnected") {
  RelayFixture fx;
  auto relay =
      fx.StartRelay(fx.WriteConfig("silent", {{"database.replication.receive.timeout.ms", "2000"},
                                              {"slot.retry.delay.ms", "300"},
                                              {"reconnect.backoff.initial.ms", "100"},
                                              {"reconnect.backoff.max.ms", "400"}}));
  const pid_t walsender = std::stoi(
      fx.Value("SELECT active_pid::text FROM pg_replication_slots WHERE slot_name = 'silent'"));
  REQUIRE(kill(walsender, SIGSTOP) == 0);
  const bool noticed =
      devtools::WaitForFileContains(fx.log_path(), "nothing received from the server", 10s);
  fx.Value("SELECT pg_terminate_backend(" + std::to_string(walsender) + ")::text");
  kill(walsender, SIGCONT);
  REQUIRE_MESSAGE(noticed, Log(fx));
  CHECK(Log(fx).find("database.replication.receive.timeout.ms") != std::string::npos);
  REQUIRE(Eventually([&] { return Count(Log(fx), "streaming slot") == 2; }, 15s));
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast(OutboxTopics(), 1, 20s);
  REQUIRE(records.ok());
  CHECK(records->size() == 1);
  CHECK(relay->Running());
}

TEST_CASE("an idle stream is not mistaken for a silent one") {
  RelayFixture fx;
  auto relay =
      fx.StartRelay(fx.WriteConfig("idle", {{"database.replication.receive.timeout.ms", "1000"},
                                            {"status.update.interval.ms", "100"}}));
  // Several timeouts long: the status update that asks for an answer gets one.
  std::this_thread::sleep_for(3500ms);
  CHECK(Log(fx).find("nothing received") == std::string::npos);
  CHECK(Count(Log(fx), "streaming slot") == 1);
}

TEST_CASE("Restart() takes the slot back from its own finishing walsender without a standby wait") {
  RelayFixture fx;
  // slot.retry.delay.ms keeps its default of 10 s: a standby round would overrun the wait.
  auto relay = fx.StartRelay(fx.WriteConfig("again", {}));
  const int port = RestPort(fx);
  // A walsender slow to finish, as under load: it holds the slot after the relay hung up.
  const pid_t walsender = std::stoi(
      fx.Value("SELECT active_pid::text FROM pg_replication_slots WHERE slot_name = 'again'"));
  REQUIRE(kill(walsender, SIGSTOP) == 0);
  const int restarted = Http(port, "POST", "/connectors/itest-again/restart").status;
  std::this_thread::sleep_for(500ms);  // the relay finds the slot held by that walsender
  kill(walsender, SIGCONT);
  REQUIRE(restarted == 204);
  REQUIRE_MESSAGE(Eventually([&] { return Count(Log(fx), "streaming slot") == 2; }, 4s), Log(fx));
  CHECK(Log(fx).find("standby:") == std::string::npos);
}

TEST_CASE("a slot created by another process meanwhile makes the relay a standby, not an error") {
  RelayFixture fx;
  fx.Exec("SELECT pg_create_logical_replication_slot('raced', 'wal2json')");
  const RelaySettings settings = Settings(fx, "raced", {});
  auto conn = ReplicationConnection::Connect(settings);
  REQUIRE(conn.ok());
  // What a relay that saw no slot in its preflight gets from CREATE_REPLICATION_SLOT.
  auto created = conn->CreateSlot("raced", "wal2json");
  REQUIRE_FALSE(created.ok());
  CHECK_MESSAGE(created.status().code() == ErrorCode::kSlotInUse, created.status().ToString());
  CHECK(created.status().message().find("created by another process meanwhile") !=
        std::string::npos);
}

TEST_CASE("a TLS session the server cuts short is retried, not taken for a refused login") {
  RelayFixture fx;
  // A server that accepts TLS and hangs up: libpq reports an SSL error, as with a flaky link.
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  REQUIRE(listen(listener, 8) == 0);
  std::atomic<bool> serving{true};
  std::atomic<int> handshakes{0};
  std::thread server([&] {
    while (serving) {
      pollfd p{listener, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      const int client = accept(listener, nullptr, nullptr);
      if (client < 0) continue;
      char request[8];
      if (read(client, request, sizeof request) == sizeof request) {
        (void)!write(client, "S", 1);
        ++handshakes;
      }
      close(client);
    }
  });
  auto result = fx.RunCommand(
      {"run", "--config",
       fx.WriteConfig("flaky", {{"database.port", std::to_string(ntohs(addr.sin_port))},
                                {"database.sslmode", "require"},
                                {"errors.max.retries", "2"},
                                {"reconnect.backoff.initial.ms", "50"},
                                {"reconnect.backoff.max.ms", "100"}})});
  auto& code = result.first;
  auto& out = result.second;
  serving = false;
  server.join();
  close(listener);
  CHECK_MESSAGE(code == 3, out);
  CHECK_MESSAGE(out.find("giving up after 2 retries (errors.max.retries)") != std::string::npos,
                out);
  CHECK(out.find("refused the connection") == std::string::npos);
  CHECK(handshakes >= 3);
}

TEST_CASE("a setup query that hangs is cancelled after database.query.timeout.ms, as a retriable "
          "failure") {
  RelayFixture fx;
  // Holding pg_tablespace (in the pg_tables view) makes the preflight's look-up of the included
  // tables wait, while logins go on.
  Session holder(fx);
  holder.Exec("BEGIN");
  holder.Exec("LOCK TABLE pg_catalog.pg_tablespace IN ACCESS EXCLUSIVE MODE");
  auto relay = fx.SpawnRelay(
      fx.WriteConfig("hung", {{"database.query.timeout.ms", "1000"}, {"errors.max.retries", "0"}}));
  auto code = relay->Wait(15s);
  holder.Exec("COMMIT");
  REQUIRE_MESSAGE(code.ok(), Log(fx));
  CHECK(*code == 3);
  CHECK_MESSAGE(Log(fx).find("within 1000 ms (database.query.timeout.ms)") != std::string::npos,
                Log(fx));
  CHECK(Log(fx).find("giving up after 0 retries (errors.max.retries)") != std::string::npos);
}

TEST_CASE("START_REPLICATION past the slot's position skips the transactions committed before it") {
  // Exactly-once delivery starts the stream at the commit LSN stored in Kafka when the slot
  // lags behind it (docs/exactly-once.md): the server must leave out exactly the transactions
  // whose commit end LSN is at or below that position, and send every later one.
  RelayFixture fx;
  fx.Exec("CREATE TABLE public.eos_skip (id int primary key)");
  fx.Exec("SELECT pg_create_logical_replication_slot('eos_skip', 'test_decoding')");
  for (int id = 1; id <= 3; ++id)
    fx.Exec("INSERT INTO public.eos_skip VALUES (" + std::to_string(id) + ")");
  // The SQL interface reports a commit at its end LSN, the position a relay confirms.
  auto second_commit = Lsn::Parse(
      fx.Value("SELECT lsn::text FROM pg_logical_slot_peek_changes('eos_skip', NULL, NULL) "
               "WHERE data LIKE 'COMMIT%' ORDER BY lsn OFFSET 1 LIMIT 1"));
  REQUIRE(second_commit.ok());

  const RelaySettings settings = Settings(fx, "eos_skip", {});
  auto conn = ReplicationConnection::Connect(settings);
  REQUIRE_MESSAGE(conn.ok(), conn.status().ToString());
  REQUIRE(conn->StartReplication("eos_skip", *second_commit, "\"skip-empty-xacts\" '1'").ok());
  std::string decoded;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (decoded.find("id[integer]:3") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::string_view message;
    auto read = conn->ReadMessage(message);
    REQUIRE_MESSAGE(read.ok(), read.status().ToString());
    if (*read == ReplicationConnection::ReadStatus::kWouldBlock) {
      pollfd fd{conn->socket(), POLLIN, 0};
      ::poll(&fd, 1, 100);
      REQUIRE(conn->ConsumeInput().ok());
      continue;
    }
    REQUIRE(*read == ReplicationConnection::ReadStatus::kMessage);
    // XLogData: 'w', start, end, send time (8 bytes each), then the plugin's text.
    if (!message.empty() && message[0] == 'w') decoded += std::string(message.substr(25)) + "\n";
  }
  CHECK_MESSAGE(decoded.find("id[integer]:3") != std::string::npos, decoded);
  CHECK_MESSAGE(decoded.find("id[integer]:1") == std::string::npos, decoded);
  CHECK_MESSAGE(decoded.find("id[integer]:2") == std::string::npos, decoded);
}
