#include "polling/order_column.h"

namespace walrelay {

OrderColumnVerdict CheckOrderColumn(const OrderColumnFacts& f) {
  OrderColumnVerdict verdict;
  const std::string what = "'polling.order.column': column '" + f.column + "' of " + f.table;
  std::vector<std::string> missing;
  if (!f.not_null) missing.push_back("NOT NULL");
  if (!f.unique_alone) missing.push_back("a unique index on it alone");
  if (!missing.empty()) {
    const std::string lacks = missing.size() == 2 ? missing[0] + " and " + missing[1] : missing[0];
    verdict.error = Status::Config(
        what + " lacks " + lacks +
        ": published rows are marked by its value, so rows sharing a value would be marked "
        "with a batch that never relayed them (lost), and a NULL would never be marked (relayed "
        "again at every poll). " +
        (f.partitioned && f.not_null
             ? "A partitioned table's unique indexes must hold its partition key: partition " +
                   f.table + " by this column (PARTITION BY RANGE (" + f.column +
                   ")), then CREATE UNIQUE INDEX ON " + f.table + " (" + f.column + ")"
             : "Use an identity column with a unique index (docs/outbox-polling.sql): ALTER "
               "TABLE " +
                   f.table +
                   " ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY; CREATE UNIQUE INDEX "
                   "ON " +
                   f.table + " (seq)"));
    return verdict;
  }
  if (!f.from_sequence) {
    verdict.warnings.push_back(
        what +
        " is neither an identity column nor drawn from a sequence: rows are relayed in its "
        "order, so events of one key keep their order only if its values grow with each insert");
  } else if (f.sequence_cache > 1) {
    verdict.warnings.push_back(
        what + " draws from a sequence with CACHE " + std::to_string(f.sequence_cache) +
        ": sessions take values in blocks, so a later event can get a smaller value than an "
        "earlier one and be relayed before it; set its sequence to CACHE 1");
  }
  return verdict;
}

}  // namespace walrelay
