// SourceConnector: opens the replication connection for the relay without blocking its loop.
//
// An attempt runs on a worker thread this object owns: connect, IDENTIFY_SYSTEM and the
// preflight checks; the stored position (StoredPosition hook) and the start decision; for
// pgoutput the publication (pg/publication.h); CREATE_REPLICATION_SLOT with the decoder's plugin
// when the verdict says so; the included tables' catalog entries (pg/source_catalog.h);
// START_REPLICATION with the decoder's options; then the SlotTaken and StreamStarts hooks. Its
// outcome is posted to the io_context and handed to the callback there. So REST, /healthz and
// Kafka's delivery reports are served while a slot creation waits for the transactions running
// on the server, however long that takes. Cancel() (or destruction) interrupts an attempt
// within about 100 ms while it waits on PostgreSQL (a running query is cancelled on the
// server), and the callback is not called. Cancel() never waits for the worker: the loop goes
// on serving REST, /healthz and delivery reports while a cancelled attempt winds down. The
// attempt's hooks run inside a Cancellation::Scope (common/cancellation.h) on the attempt's
// flag, so a Kafka wait that can be resumed (initialising transactions) gives up within
// Cancellation::kSlice as well; other Kafka calls in a hook end at their own timeouts. busy()
// stays true until the worker has left the attempt, hooks included: the relay starts nothing
// that uses what the hooks use (the delivery guarantee, the producers) before then.
//
// Where the stream starts, and whether a missing slot may be created, is decided once per
// attempt by DecideStart (relay/start_decision.h) from what the attempt found: the slot,
// what this process streamed (ConnectPlan), and what the StoredPosition hook returns (the
// position stored under this connector's key, whatever server and slot it names). A stop
// verdict fails the attempt with its error (kSlotGone, kSlotMissing, kOffsetMismatch). A
// slot created again after this connector streamed from it is reported through
// SourceSession::slot_recreated, for the relay to report the range at risk.
//
// Timelines: a stored position of this server from another timeline than the server's is
// placed on the server's history (TIMELINE_HISTORY, delivery/timeline.h) before the decision:
// capped at the point where its timeline ended, with an error-level line naming the positions
// streamed from the abandoned timeline; a timeline outside the server's history fails the
// attempt (kOffsetMismatch).
//
// START_REPLICATION names the decided start (the slot's position, or past it where exactly
// once skips what Kafka committed). PostgreSQL streams only the transactions that commit after
// that LSN. Only then, with the slot this attempt's, the SlotTaken hook runs: a standby never
// initialises Kafka transactions (fencing the producers of the process that streams) merely
// because it saw the slot free for a moment. When the hook finds a stored position that
// changes the verdict (another process of this connector committed meanwhile), the attempt
// fails with kConnection and the next one starts where Kafka says. Then the StreamStarts hook
// is told the start.
//
// A slot held by the walsender of this relay's own previous connection (after Restart()) is
// asked again every 100 ms for up to a few seconds, as that walsender is only finishing; a slot
// held by anyone else is kSlotInUse at once (the relay waits as a standby).
//
// Thread ownership: Start(), Cancel(), busy() and the destructor are called on the loop thread;
// the attempt and its hooks run on the worker. The destructor waits for the worker (a cancelled
// attempt ends within about 100 ms unless a hook is in a Kafka call that cannot be resumed).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>  // Boost 1.74's Asio uses std::exchange without including it

#include <boost/asio.hpp>

#include "common/lsn.h"
#include "common/status.h"
#include "config/relay_settings.h"
#include "delivery/source_offsets.h"
#include "pg/replication_connection.h"
#include "pg/source_catalog.h"
#include "relay/start_decision.h"

namespace walrelay {

struct ConnectPlan {
  bool streamed_before = false;  // the relay has streamed from the slot already
  Lsn last_confirmed;            // what the relay last confirmed, for messages
  // The walsender of the connection the relay just closed itself (Restart), if any.
  std::optional<int> previous_walsender_pid;
};

struct SourceSession {
  std::optional<ReplicationConnection> connection;  // streaming (CopyBoth)
  SourceIdentity identity;
  // The slot's confirmed_flush_lsn as read before START_REPLICATION, or the consistent point
  // of the slot just created: the server streams from here and never below it.
  Lsn slot_position;
  // The LSN START_REPLICATION named, as the start decision chose it.
  Lsn start_position;
  bool slot_created = false;
  bool slot_recreated = false;  // created again after the relay had streamed from it
  // This slot's position as the StoredPosition hook found it, placed on the server's timeline
  // (nullopt when none was read, or the stored one names another server or slot).
  std::optional<SourceOffset> stored;
  // The included tables' keys, columns and types as the catalog had them at this connect.
  std::shared_ptr<const CatalogSnapshot> catalog;
};

class SourceConnector {
 public:
  using Callback = std::function<void(Result<SourceSession>)>;

  // The decoder's START_REPLICATION options for a server version
  // (Decoder::StartReplicationOptions); called on the worker thread.
  using StartOptions = std::function<std::string(int server_version)>;
  // The position stored under this connector's key, whatever server and slot it names;
  // called on the worker thread before the slot is created or taken. An error fails the
  // attempt.
  using StoredPosition = std::function<Result<std::optional<SourceOffset>>(
      const SourceIdentity& server, bool slot_missing)>;
  // The slot is this attempt's (START_REPLICATION succeeded): what needs the slot first is
  // done (exactly once initialises its transactions, fencing older producers), and the
  // stored position is read again when it may have changed since StoredPosition. Called on
  // the worker thread. An error fails the attempt.
  using SlotTaken = std::function<Result<StoredReread>(const SourceIdentity& server)>;
  // The stream starts at `start` (`own_position_stored`: this slot's position is stored
  // already); called on the worker thread once the slot is taken. An error fails the attempt.
  using StreamStarts =
      std::function<Status(const SourceIdentity& server, Lsn start, bool own_position_stored)>;
  // What the last stream left waiting for Kafka is finished (DeliveryGuarantee::
  // FinishLastStream); called on the worker thread first, before PostgreSQL is connected. An
  // error fails the attempt.
  using FinishLastStream = std::function<Status()>;
  struct Hooks {
    StartOptions start_options;
    FinishLastStream finish_last_stream;  // optional
    StoredPosition stored_position;       // optional
    SlotTaken slot_taken;                 // optional
    StreamStarts stream_starts;           // optional
  };
  SourceConnector(const RelaySettings& settings, Hooks hooks, boost::asio::io_context& io);
  ~SourceConnector();
  SourceConnector(const SourceConnector&) = delete;
  SourceConnector& operator=(const SourceConnector&) = delete;

  // Starts an attempt. Only when !busy(): the previous attempt has ended.
  void Start(ConnectPlan plan, Callback done);
  // The current attempt's outcome is dropped, and its waits give up; returns at once.
  void Cancel();
  // An attempt (cancelled or not) still runs on the worker.
  bool busy() const { return busy_.load(); }

 private:
  // Runs on the worker thread.
  Result<SourceSession> Attempt(const ConnectPlan& plan, const std::atomic<bool>& cancel);
  // The verdict with `stored`, what the offsets topic holds once the slot is taken, when it
  // streams from the same start; kConnection (start again) otherwise.
  Result<StartVerdict> VerdictStands(StartFacts facts, const std::optional<SourceOffset>& stored,
                                     const StartVerdict& verdict) const;
  // Places a position stored on another timeline on the server's history.
  Status PlaceOnServerTimeline(ReplicationConnection& conn, const SourceIdentity& server,
                               SourceOffset& stored) const;

  RelaySettings settings_;
  Hooks hooks_;
  boost::asio::io_context& io_;
  // The current attempt's, shared with its worker and its posted outcome: the outcome is
  // dropped once the attempt was cancelled, even if it was posted already.
  std::shared_ptr<std::atomic<bool>> cancel_;
  // Set by Start() on the loop, cleared by the worker once the attempt is over.
  std::atomic<bool> busy_{false};
  std::thread worker_;
};

}  // namespace walrelay
