// SourceConnector: opens the replication connection for the relay without blocking its loop.
//
// An attempt (connect, IDENTIFY_SYSTEM and the preflight checks, for pgoutput the publication
// (pg/publication.h), CREATE_REPLICATION_SLOT with
// the decoder's plugin when the slot is missing and may be created, reading the included
// tables' catalog entries (pg/source_catalog.h), START_REPLICATION with the decoder's
// options) runs on a worker thread this
// object owns; its outcome is posted to the io_context and handed to the callback there. So
// REST, /healthz and Kafka's delivery reports are served while a slot creation waits for the
// transactions running on the server, however long that takes. Cancel() (or destruction)
// interrupts an attempt within about 100 ms: a running query is cancelled on the server and the
// callback is not called.
//
// The slot's life: a slot is streamed from before when this process streamed from it
// (ConnectPlan::streamed_before) or when the StoredPosition hook finds a position this
// connector stored for this server and slot (outside the process: a restart, a standby that
// never streamed). Before that, a missing slot is created when slot.create allows. After it, a
// missing slot means the rows since its last position may be gone: the attempt fails with
// kSlotGone, naming the slot and that position, unless slot.recreate.when.missing allows
// creating it again (then SourceSession::slot_recreated says so, for the relay to report the
// range at risk).
//
// Timelines: a stored position from another timeline than the server's is placed on the
// server's history (TIMELINE_HISTORY, delivery/timeline.h): capped at the point where its
// timeline ended, with an error-level line naming the positions streamed from the abandoned
// timeline; a timeline outside the server's history fails the attempt (kOffsetMismatch).
//
// Where the stream starts: START_REPLICATION names the LSN the StartPosition hook returns (on
// the worker thread, once the slot is known to be free and before it is taken), or the slot's
// own position when there is no hook. PostgreSQL streams only the transactions that commit
// after that LSN, so a hook may skip what is delivered already (delivery/delivery_guarantee.h).
//
// A slot held by the walsender of this relay's own previous connection (after Restart()) is
// asked again every 100 ms for up to a few seconds, as that walsender is only finishing; a slot
// held by anyone else is kSlotInUse at once (the relay waits as a standby).
//
// Start(), Cancel() and the destructor are called on the loop thread.
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
  // The LSN START_REPLICATION named (Lsn() for the slot's position), from the StartPosition hook.
  Lsn start_position;
  bool slot_created = false;
  bool slot_recreated = false;  // created again after the relay had streamed from it
  // What the StoredPosition hook found, placed on the server's timeline.
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
  // The position this connector stored for the server and slot, if any; called on the worker
  // thread before the slot is created or taken. An error fails the attempt.
  using StoredPosition = std::function<Result<std::optional<SourceOffset>>(
      const SourceIdentity& server, bool slot_missing)>;
  // The LSN to stream from, given the server, the slot's position and the stored position;
  // called on the worker thread. An error fails the attempt.
  using StartPosition = std::function<Result<Lsn>(const SourceIdentity& server, Lsn slot_position,
                                                  const std::optional<SourceOffset>& stored)>;
  SourceConnector(const RelaySettings& settings, StartOptions start_options,
                  StoredPosition stored_position, StartPosition start_position,
                  boost::asio::io_context& io);
  ~SourceConnector();
  SourceConnector(const SourceConnector&) = delete;
  SourceConnector& operator=(const SourceConnector&) = delete;

  // Starts an attempt; an attempt still running is cancelled first.
  void Start(ConnectPlan plan, Callback done);
  void Cancel();

 private:
  // Runs on the worker thread.
  Result<SourceSession> Attempt(const ConnectPlan& plan, const std::atomic<bool>& cancel);
  Status SlotGone(const ConnectPlan& plan, const std::optional<SourceOffset>& stored) const;
  // Places a position stored on another timeline on the server's history.
  Status PlaceOnServerTimeline(ReplicationConnection& conn, const SourceIdentity& server,
                               SourceOffset& stored) const;

  RelaySettings settings_;
  StartOptions start_options_;
  StoredPosition stored_position_;
  StartPosition start_position_;
  boost::asio::io_context& io_;
  // The current attempt's, shared with its worker and its posted outcome: the outcome is
  // dropped once the attempt was cancelled, even if it was posted already.
  std::shared_ptr<std::atomic<bool>> cancel_;
  std::thread worker_;
};

}  // namespace walrelay
