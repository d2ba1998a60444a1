#include "polling/mark_failure.h"

namespace walrelay {

MarkFailure ClassifyMarkFailure(std::string_view sqlstate) {
  if (sqlstate.size() != 5) return MarkFailure::kRetry;  // no answer: the connection went
  const std::string_view cls = sqlstate.substr(0, 2);
  // The statement itself can never pass as the database stands: a value it cannot take (22),
  // a constraint or foreign key refusing it (23), a read-only session (25006), a feature the
  // table lacks (0A), a trigger or rule raising (P0, 38, 39), a view's check option (44), the
  // table or a privilege (42).
  if (cls == "22" || cls == "23" || cls == "0A" || cls == "P0" || cls == "38" || cls == "39" ||
      cls == "44" || cls == "42" || sqlstate == "25006")
    return MarkFailure::kStop;
  return MarkFailure::kRetry;
}

}  // namespace walrelay
