#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "delivery/delivery_tracker.h"

using namespace walrelay;

TEST_CASE("a transaction is confirmable only when all its records are acked") {
  DeliveryTracker t(Lsn(100));
  t.BeginTransaction();
  const auto a = t.AddRecord(Lsn(110), 10);
  const auto b = t.AddRecord(Lsn(120), 20);
  t.CommitTransaction(Lsn(200));
  CHECK(t.confirmable() == Lsn(100));
  CHECK(t.inflight_records() == 2);
  CHECK(t.inflight_bytes() == 30);
  t.Acknowledge(b);  // out of order
  CHECK(t.confirmable() == Lsn(100));
  t.Acknowledge(a);
  CHECK(t.confirmable() == Lsn(200));
  CHECK(t.inflight_records() == 0);
  CHECK(t.idle());
}

TEST_CASE("a later transaction acked first does not move past an earlier one") {
  DeliveryTracker t;
  t.BeginTransaction();
  const auto first = t.AddRecord(Lsn(10), 1);
  t.CommitTransaction(Lsn(20));
  t.BeginTransaction();
  const auto second = t.AddRecord(Lsn(30), 1);
  t.CommitTransaction(Lsn(40));
  t.Acknowledge(second);
  CHECK(t.confirmable() == Lsn());
  t.Acknowledge(first);
  CHECK(t.confirmable() == Lsn(40));
}

TEST_CASE("empty transactions confirm at once when nothing is pending") {
  DeliveryTracker t(Lsn(5));
  t.BeginTransaction();
  t.CommitTransaction(Lsn(50));
  CHECK(t.confirmable() == Lsn(50));
  t.BeginTransaction();
  const auto r = t.AddRecord(Lsn(60), 1);
  t.CommitTransaction(Lsn(70));
  t.BeginTransaction();
  t.CommitTransaction(Lsn(80));  // empty, but behind an unacked record
  CHECK(t.confirmable() == Lsn(50));
  t.Acknowledge(r);
  CHECK(t.confirmable() == Lsn(80));
}

TEST_CASE("a failed record pins the confirmable position forever") {
  DeliveryTracker t;
  t.BeginTransaction();
  const auto ok = t.AddRecord(Lsn(10), 1);
  t.CommitTransaction(Lsn(20));
  t.BeginTransaction();
  const auto bad = t.AddRecord(Lsn(30), 1);
  const auto after = t.AddRecord(Lsn(31), 1);
  t.CommitTransaction(Lsn(40));
  t.Acknowledge(ok);
  t.Fail(bad, "event id X: too large");
  t.Acknowledge(after);
  t.ServerPosition(Lsn(1000));
  CHECK(t.confirmable() == Lsn(20));
  REQUIRE(t.failure().has_value());
  CHECK(t.failure()->lsn == Lsn(30));
  CHECK(t.failure()->error == "event id X: too large");
  CHECK(t.inflight_records() == 0);
}

TEST_CASE("server position counts only while idle") {
  DeliveryTracker t(Lsn(10));
  t.ServerPosition(Lsn(100));
  CHECK(t.confirmable() == Lsn(100));
  t.ServerPosition(Lsn(50));  // never backwards
  CHECK(t.confirmable() == Lsn(100));
  t.BeginTransaction();
  t.ServerPosition(Lsn(200));  // inside an open transaction: its commit lies ahead
  CHECK(t.confirmable() == Lsn(100));
  const auto r = t.AddRecord(Lsn(210), 1);
  t.CommitTransaction(Lsn(300));
  t.ServerPosition(Lsn(400));  // a record is in flight
  CHECK(t.confirmable() == Lsn(100));
  t.Acknowledge(r);
  CHECK(t.confirmable() == Lsn(300));
  t.ServerPosition(Lsn(400));
  CHECK(t.confirmable() == Lsn(400));
}

TEST_CASE("unknown and repeated tickets are ignored") {
  DeliveryTracker t;
  t.BeginTransaction();
  const auto r = t.AddRecord(Lsn(1), 1);
  t.CommitTransaction(Lsn(2));
  t.Acknowledge(r + 100);
  CHECK(t.inflight_records() == 1);
  t.Acknowledge(r);
  t.Acknowledge(r);
  CHECK(t.inflight_records() == 0);
  CHECK(t.confirmable() == Lsn(2));
}

TEST_CASE(
    "behind a stuck record, settled entries collapse: the ledger stays O(records in flight)") {
  DeliveryTracker t(Lsn(1));
  t.BeginTransaction();
  const auto stuck = t.AddRecord(Lsn(10), 5, "public.outbox");
  t.CommitTransaction(Lsn(20));
  uint64_t lsn = 100;
  size_t peak = 0;
  for (int i = 0; i < 100000; ++i) {
    // An empty transaction of another table, then one outbox record acked soon after.
    t.BeginTransaction();
    t.CommitTransaction(Lsn(lsn += 10));
    t.BeginTransaction();
    const auto r = t.AddRecord(Lsn(lsn += 10), 7, "public.outbox");
    t.CommitTransaction(Lsn(lsn += 10));
    t.Acknowledge(r);
    peak = std::max(peak, t.entries());
  }
  CHECK(peak <= 4 * 2 + 65);
  CHECK(t.entries() <= 4 * 1 + 65);  // acknowledgements shrink it too
  CHECK(t.confirmable() == Lsn(1));  // never passes the stuck record
  CHECK(t.inflight_records() == 1);
  CHECK(t.inflight_bytes() == 5);
  REQUIRE(t.OldestPending().has_value());
  CHECK(*t.OldestPending() == stuck);
  REQUIRE(t.SourceOf(stuck).has_value());
  CHECK(t.SourceOf(stuck)->table == "public.outbox");
  CHECK(t.SourceOf(stuck)->lsn == Lsn(10));
  t.Acknowledge(stuck);
  CHECK(t.confirmable() == Lsn(lsn));  // the newest commit, once everything before is acked
  CHECK(t.idle());
  CHECK(t.entries() == 0);
}

TEST_CASE("collapsing keeps tickets, pending records in the middle and out-of-order reports") {
  DeliveryTracker t;
  t.BeginTransaction();
  const auto head = t.AddRecord(Lsn(10), 1, "a.t");
  t.CommitTransaction(Lsn(20));
  std::vector<uint64_t> held;  // every 1000th record stays pending until the end
  uint64_t lsn = 100;
  for (int i = 0; i < 20000; ++i) {
    t.BeginTransaction();
    const auto r = t.AddRecord(Lsn(lsn += 10), 1, i % 2 ? "a.t" : "b.t");
    t.CommitTransaction(Lsn(lsn += 10));
    if (i % 1000 == 999) {
      held.push_back(r);
    } else {
      t.Acknowledge(r);
    }
  }
  CHECK(t.entries() <= 4 * (1 + held.size()) + 65);
  CHECK(t.inflight_records() == 1 + held.size());
  // Out of order: the newest held record first, then the head; confirmable stops at the next.
  t.Acknowledge(held.back());
  CHECK(t.confirmable() == Lsn());
  t.Acknowledge(head);
  const auto first_held = t.SourceOf(held.front());
  REQUIRE(first_held.has_value());
  CHECK(first_held->table == "a.t");  // i = 999 is odd
  CHECK(t.confirmable() > Lsn(20));
  CHECK(t.confirmable() < first_held->lsn);
  for (size_t i = 0; i + 1 < held.size(); ++i) {
    const Lsn before = t.confirmable();
    t.Acknowledge(held[i]);
    CHECK(t.confirmable() > before);
  }
  CHECK(t.confirmable() == Lsn(lsn));
  CHECK(t.idle());
}

TEST_CASE("collapsing never passes a failed record") {
  DeliveryTracker t;
  t.BeginTransaction();
  const auto bad = t.AddRecord(Lsn(10), 1);
  t.CommitTransaction(Lsn(20));
  t.Fail(bad, "refused");
  uint64_t lsn = 100;
  for (int i = 0; i < 10000; ++i) {
    t.BeginTransaction();
    t.Acknowledge(t.AddRecord(Lsn(lsn += 10), 1));
    t.CommitTransaction(Lsn(lsn += 10));
  }
  CHECK(t.entries() <= 4 + 65);
  t.ServerPosition(Lsn(lsn + 100));
  CHECK(t.confirmable() == Lsn());
  CHECK(t.inflight_records() == 0);
  REQUIRE(t.failure().has_value());
  CHECK(t.failure()->lsn == Lsn(10));
}

TEST_CASE("a transaction replayed after a reconnect with lower commit LSNs does not move "
          "confirmable back") {
  DeliveryTracker t;
  t.BeginTransaction();
  const auto stuck = t.AddRecord(Lsn(10), 1);
  t.CommitTransaction(Lsn(20));
  for (uint64_t lsn = 1000; lsn < 1000 + 200 * 10; lsn += 10) {
    t.BeginTransaction();
    t.CommitTransaction(Lsn(lsn));
  }
  t.StreamRestarted();
  for (uint64_t lsn = 30; lsn < 30 + 200 * 10; lsn += 10) {  // replayed from the slot
    t.BeginTransaction();
    t.CommitTransaction(Lsn(lsn));
  }
  t.Acknowledge(stuck);
  CHECK(t.confirmable() == Lsn(1000 + 199 * 10));
}

TEST_CASE("after a re-base no commit position learnt before is confirmable") {
  DeliveryTracker t(Lsn(100));
  t.BeginTransaction();
  const auto a = t.AddRecord(Lsn(110), 10);
  t.CommitTransaction(Lsn(200));
  t.BeginTransaction();
  const auto open = t.AddRecord(Lsn(210), 10);  // its transaction was open when the stream broke
  t.Rebase(Lsn(150));                           // the slot on the new server is at 150
  CHECK(t.confirmable() == Lsn(150));
  CHECK_FALSE(t.transaction_open());
  t.Acknowledge(a);  // still tracked for its acknowledgement ...
  CHECK(t.inflight_records() == 1);
  CHECK(t.confirmable() == Lsn(150));  // ... but 200 came from the old stream
  // The replayed stream's own commits count again.
  t.BeginTransaction();
  const auto b = t.AddRecord(Lsn(160), 10);
  t.CommitTransaction(Lsn(170));
  t.Acknowledge(b);
  CHECK(t.confirmable() == Lsn(150));  // the record from before still holds it
  t.Acknowledge(open);
  CHECK(t.confirmable() == Lsn(170));
}
