// RAII owners for libpq handles: connections, results and CopyData buffers.
#pragma once

#include <libpq-fe.h>

#include <memory>

namespace walrelay {

struct PgConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct PgResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
struct PgFreememDeleter {
  void operator()(char* p) const { PQfreemem(p); }
};

using PgConnPtr = std::unique_ptr<PGconn, PgConnDeleter>;
using PgResultPtr = std::unique_ptr<PGresult, PgResultDeleter>;
using PgBufferPtr = std::unique_ptr<char, PgFreememDeleter>;

}  // namespace walrelay
