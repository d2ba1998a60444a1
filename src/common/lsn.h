// Lsn: a PostgreSQL WAL position (64-bit), written "X/X" in hex as PostgreSQL prints it.
// Value type; 0 (0/0) is the invalid position. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace walrelay {

class Lsn {
 public:
  constexpr Lsn() = default;
  constexpr explicit Lsn(uint64_t value) : value_(value) {}

  // Parses "16/B374D848". Rejects anything else with a message quoting the input.
  static Result<Lsn> Parse(std::string_view text);

  constexpr uint64_t value() const { return value_; }
  constexpr bool valid() const { return value_ != 0; }
  std::string ToString() const;

  friend constexpr auto operator<=>(Lsn, Lsn) = default;

 private:
  uint64_t value_ = 0;
};

}  // namespace walrelay
