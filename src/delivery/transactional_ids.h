// The transactional ids of a relay's two producers with exactly.once.support
// (docs/exactly-once.md): `transactional.id`, and SecondTransactionalId() of it.
//
// Contract: no id a first producer may have ends with kSecondIdSuffix, so one connector's second
// id is never another connector's first id, and two connectors with different first ids have
// different second ids.
// - DefaultTransactionalId() is "walrelay-<name>", with "%" appended when the name ends in ".1"
//   or in "%": the "%" after ".1" keeps the id from ending in ".1" (connector `a`'s second id,
//   walrelay-a.1, is not connector `a.1`'s first, walrelay-a.1%), the one after "%" keeps
//   different names apart (`a.1%` gives walrelay-a.1%%). Every other name keeps the id it had
//   before, so relays of one connector built before and after this rule still fence each other.
// - CheckTransactionalId() refuses a configured `transactional.id` that ends with the suffix.
// Pure functions; thread-safe.
#pragma once

#include <string>

#include "common/status.h"

namespace walrelay {

// What the second producer's id adds to the first producer's.
inline constexpr const char* kSecondIdSuffix = ".1";

// The first producer's transactional.id when none is configured.
std::string DefaultTransactionalId(const std::string& connector_name);
// The second producer's transactional.id, from the first's.
std::string SecondTransactionalId(const std::string& first_id);
// OK, or a kConfig error naming `transactional.id` when `id` ends with kSecondIdSuffix.
Status CheckTransactionalId(const std::string& id);

}  // namespace walrelay
