// PickFreePort: a loopback TCP port nobody listens on right now, for the throwaway servers
// (PostgreSQL, Redis) that tests and the demo start.
//
// Binding port 0 lets the kernel choose. Another process may take the port before the server
// binds it, so callers retry with a new port when the server fails to start on it.
#pragma once

#include "common/status.h"

namespace walrelay::devtools {

Result<int> PickFreePort();

}  // namespace walrelay::devtools
