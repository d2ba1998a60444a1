// RestApi: Kafka Connect's REST API for the one connector a walrelay process runs, plus
// GET /metrics (Prometheus) and GET /healthz.
//
// Shapes follow Kafka Connect so its tooling works unchanged: connector and task status with
// states RUNNING, PAUSED, FAILED (with "trace") and UNASSIGNED (a standby waiting for the slot),
// and errors as {"error_code": <HTTP status>, "message": "..."}. Configuration values of secret
// keys, and values that came from ${env:...} or ${file:...}, are shown as "[hidden]". Handle()
// runs on the relay's loop thread (see HttpServer).
//
// State mapping: a relay that is (re)connecting shows RUNNING, as Kafka Connect shows a task
// that retries, while /healthz answers 503 until the replication connection is back. FAILED is
// visible only between the fatal error and the process exit.
//
// Who may call what (Host check, credentials for pause, resume and restart) is RestAccess's.
#pragma once

#include <string>

#include "status/http_server.h"
#include "status/relay_view.h"
#include "status/rest_access.h"

namespace walrelay {

class RestApi {
 public:
  // `worker_id` is host:port of the listener, as Kafka Connect reports workers. `server`, when
  // given, supplies /metrics with its accept() failures.
  RestApi(RelayView& relay, std::string worker_id, const HttpServer* server = nullptr);

  HttpResponse Handle(const HttpRequest& request);

  // Kafka Connect's state name for the relay's connector and its one task.
  std::string State() const;

  const RestAccess& access() const { return access_; }

 private:
  HttpResponse Metrics() const;
  HttpResponse Health() const;
  HttpResponse ConnectorStatus() const;
  HttpResponse TaskStatus() const;
  HttpResponse Info() const;
  HttpResponse Config() const;
  HttpResponse Connector() const;

  RelayView& relay_;
  const HttpServer* server_;
  std::string worker_id_;
  RestAccess access_;
};

}  // namespace walrelay
