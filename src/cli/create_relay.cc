#include "cli/commands.h"
#include "polling/polling_relay.h"
#include "relay/relay.h"

namespace walrelay {

Result<std::unique_ptr<RunningRelay>> CreateRelay(RelaySettings settings,
                                                  boost::asio::io_context& io) {
  if (settings.source_mode == SourceMode::kPolling) {
    auto polling = PollingRelay::Create(std::move(settings), io);
    if (!polling.ok()) return polling.status();
    return std::unique_ptr<RunningRelay>(std::move(polling).value());
  }
  auto replication = Relay::Create(std::move(settings), io);
  if (!replication.ok()) return replication.status();
  return std::unique_ptr<RunningRelay>(std::move(replication).value());
}

}  // namespace walrelay
