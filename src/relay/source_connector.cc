#include "relay/source_connector.h"

#include <spdlog/spdlog.h>

#include <cassert>
#include <chrono>

#include "common/cancellation.h"
#include "delivery/timeline.h"
#include "pg/preflight.h"
#include "pg/publication.h"
#include "relay/start_decision.h"

namespace walrelay {
namespace {

// How long a slot held by this relay's own previous walsender is asked again, and how often.
constexpr auto kOwnWalsenderWait = std::chrono::seconds(5);
constexpr auto kOwnWalsenderStep = std::chrono::milliseconds(100);

}  // namespace

SourceConnector::SourceConnector(const RelaySettings& settings, Hooks hooks,
                                 boost::asio::io_context& io)
    : settings_(settings), hooks_(std::move(hooks)), io_(io) {}

SourceConnector::~SourceConnector() {
  Cancel();
  if (worker_.joinable()) worker_.join();
}

void SourceConnector::Cancel() {
  if (cancel_) cancel_->store(true);
}

void SourceConnector::Start(ConnectPlan plan, Callback done) {
  assert(!busy());
  // The previous worker has left its attempt (!busy()): at most it is still posting the outcome.
  if (worker_.joinable()) worker_.join();
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  busy_ = true;
  worker_ = std::thread([this, plan = std::move(plan), done = std::move(done), cancel = cancel_] {
    std::shared_ptr<Result<SourceSession>> outcome;
    {
      Cancellation::Scope give_up_when(*cancel);
      outcome = std::make_shared<Result<SourceSession>>(Attempt(plan, *cancel));
    }
    busy_ = false;
    boost::asio::post(io_, [done, cancel, outcome] {
      if (!cancel->load()) done(std::move(*outcome));
    });
  });
}

Status SourceConnector::PlaceOnServerTimeline(ReplicationConnection& conn,
                                              const SourceIdentity& server,
                                              SourceOffset& stored) const {
  // Positions stored before timelines were recorded carry 0: nothing to compare.
  if (stored.timeline == 0 || static_cast<int>(stored.timeline) == server.timeline)
    return Status::Ok();
  auto content = conn.TimelineHistory(server.timeline);
  if (!content.ok()) return content.status();
  auto history = ParseTimelineHistory(*content);
  if (!history.ok())
    return history.status().WithContext("timeline " + std::to_string(server.timeline) +
                                        "'s history");
  auto placed = PlaceOnTimeline(stored.lsn_commit, stored.timeline,
                                static_cast<uint32_t>(server.timeline), *history);
  if (!placed.ok())
    return placed.status().WithContext("offsets topic '" + settings_.offsets.topic + "', slot '" +
                                       settings_.slot_name + "'");
  if (placed->abandoned) {
    spdlog::error(
        "timeline switch: this connector's stored position LSN {} is on timeline {}, which the "
        "server (now timeline {}) left at LSN {}. Records relayed from positions after LSN {} up "
        "to LSN {} came from the abandoned timeline: the new primary never committed those "
        "transactions, though their records are in Kafka. The relay does not skip past LSN {}",
        stored.lsn_commit.ToString(), stored.timeline, server.timeline,
        placed->valid_until->ToString(), placed->valid_until->ToString(),
        stored.lsn_commit.ToString(), placed->valid_until->ToString());
  } else {
    spdlog::info("timeline switch: stored position LSN {} of timeline {} lies before its end "
                 "(LSN {}) and holds on the server's timeline {}",
                 stored.lsn_commit.ToString(), stored.timeline, placed->valid_until->ToString(),
                 server.timeline);
  }
  stored.lsn = std::min(stored.lsn, placed->position);
  stored.lsn_commit = placed->position;
  return Status::Ok();
}

Result<StartVerdict> SourceConnector::VerdictStands(StartFacts facts,
                                                    const std::optional<SourceOffset>& stored,
                                                    const StartVerdict& verdict) const {
  const Status again = Status::Connection(
      "offsets topic '" + settings_.offsets.topic + "' holds " +
      (stored ? "LSN " + stored->lsn_commit.ToString() + " of slot '" + stored->slot + "'"
              : std::string("no position")) +
      " for this connector now that slot '" + settings_.slot_name +
      "' is taken, which changes where the stream starts; connecting again to start there");
  // A slot this attempt created has nothing of its own stored past its start; a position that
  // must first be placed on the server's timelines is placed by the next attempt.
  if (verdict.action != StartVerdict::Action::kStream) return again;
  if (stored && IsOwnPosition(*stored, facts.server, facts.slot_name) && stored->timeline != 0 &&
      static_cast<int>(stored->timeline) != facts.server.timeline)
    return again;
  facts.stored = stored;
  const StartVerdict now = DecideStart(facts);
  if (now.action != StartVerdict::Action::kStream || now.start != verdict.start) return again;
  return now;
}

Result<SourceSession> SourceConnector::Attempt(const ConnectPlan& plan,
                                               const std::atomic<bool>& cancel) {
  if (hooks_.finish_last_stream) WALRELAY_RETURN_IF_ERROR(hooks_.finish_last_stream());
  auto conn = ReplicationConnection::Connect(settings_, &cancel);
  if (!conn.ok()) return conn.status();
  PreflightReport report;
  Status checked = RunPreflight(*conn, settings_, report);
  // After Restart() the previous walsender may still be finishing: it lets go within moments.
  const auto give_up = std::chrono::steady_clock::now() + kOwnWalsenderWait;
  while (checked.code() == ErrorCode::kSlotInUse && plan.previous_walsender_pid &&
         report.slot.active_pid == plan.previous_walsender_pid &&
         std::chrono::steady_clock::now() < give_up && !cancel.load()) {
    std::this_thread::sleep_for(kOwnWalsenderStep);
    checked = RunPreflight(*conn, settings_, report);
  }
  // A missing slot is the start decision's to judge; every other failure ends the attempt.
  if (!checked.ok() && checked.code() != ErrorCode::kSlotMissing) return checked;

  SourceSession session;
  session.identity = {report.server.system_id, report.server.timeline};
  StartFacts facts;
  std::optional<SourceOffset> stored_as_read;  // before its placement on the timeline
  facts.mode =
      settings_.exactly_once.enabled() ? DeliveryMode::kExactlyOnce : DeliveryMode::kAtLeastOnce;
  facts.slot_name = settings_.slot_name;
  facts.offsets_topic = settings_.offsets.topic;
  facts.server = session.identity;
  facts.slot_exists = report.slot.exists;
  facts.slot_position = report.slot.confirmed_flush;
  facts.streamed_here = plan.streamed_before;
  facts.last_confirmed = plan.last_confirmed;
  facts.slot_create = settings_.slot_create;
  facts.recreate_when_missing = settings_.slot_recreate_when_missing;
  if (hooks_.stored_position) {
    auto stored = hooks_.stored_position(session.identity, !report.slot.exists);
    if (!stored.ok()) return stored.status();
    facts.stored = std::move(stored).value();
    stored_as_read = facts.stored;
    // Only this server's positions have a place on its timelines.
    if (facts.stored && IsOwnPosition(*facts.stored, facts.server, facts.slot_name))
      WALRELAY_RETURN_IF_ERROR(PlaceOnServerTimeline(*conn, session.identity, *facts.stored));
  }
  StartVerdict verdict = DecideStart(facts);
  if (verdict.action == StartVerdict::Action::kStop) return verdict.stop;
  if (!verdict.warning.empty()) spdlog::warn("{}", verdict.warning);
  // For the pipeline's messages: this slot's last stored position, even when the slot is new.
  if (facts.stored && IsOwnPosition(*facts.stored, facts.server, facts.slot_name))
    session.stored = facts.stored;

  if (settings_.plugin_name == "pgoutput") {
    // Before the slot: a slot created first would decode rows from before the publication.
    PublicationReport publication;
    WALRELAY_RETURN_IF_ERROR(EnsurePublication(*conn, settings_, /*apply=*/true, publication));
    if (publication.action != "used as it is") {
      spdlog::info(
          "publication '{}' {} (publication.autocreate.mode={}); it publishes {}",
          settings_.publication_name, publication.action,
          PublicationModeName(settings_.publication_mode),
          (publication.all_tables ? std::string("all tables")
                                  : std::to_string(publication.tables.size()) + " table(s)") +
              " (" + publication.publishes.ToString() + ")");
    }
  }

  session.slot_position = report.slot.confirmed_flush;
  session.start_position = verdict.start;
  if (verdict.action == StartVerdict::Action::kCreateSlot) {
    auto created =
        conn->CreateSlot(settings_.slot_name, settings_.plugin_name, settings_.slot_failover);
    if (!created.ok()) return created.status();
    session.slot_position = session.start_position = *created;
    session.slot_created = true;
    session.slot_recreated = verdict.slot_recreated;
  } else if (session.start_position > session.slot_position) {
    spdlog::info("exactly-once: offsets topic '{}' holds commit LSN {}, past slot '{}' at LSN {}: "
                 "the source transactions in between are in Kafka already and are not sent again",
                 settings_.offsets.topic, session.start_position.ToString(), settings_.slot_name,
                 session.slot_position.ToString());
  }
  auto catalog = ReadCatalogSnapshot(*conn, settings_);
  if (!catalog.ok()) return catalog.status();
  session.catalog = std::make_shared<const CatalogSnapshot>(std::move(catalog).value());
  WALRELAY_RETURN_IF_ERROR(
      conn->StartReplication(settings_.slot_name, session.start_position,
                             hooks_.start_options(report.server.server_version)));
  if (hooks_.slot_taken) {
    auto now = hooks_.slot_taken(session.identity);
    if (!now.ok()) return now.status();
    if (now->read && now->stored != stored_as_read) {
      auto stands = VerdictStands(facts, now->stored, verdict);
      if (!stands.ok()) return stands.status();
      verdict = *stands;
      if (now->stored && IsOwnPosition(*now->stored, facts.server, facts.slot_name))
        session.stored = now->stored;
    }
  }
  if (hooks_.stream_starts) {
    WALRELAY_RETURN_IF_ERROR(hooks_.stream_starts(session.identity, session.start_position,
                                                  verdict.own_position_stored));
  }
  conn->ForgetCancelFlag();
  session.connection.emplace(std::move(conn).value());
  return session;
}

}  // namespace walrelay
