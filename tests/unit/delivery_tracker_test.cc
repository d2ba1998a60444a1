#include <doctest/doctest.h>

#include "kafka/delivery_tracker.h"

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

TEST_CASE("after a re-base no commit position learnt before is confirmable") {
  DeliveryTracker t(Lsn(100));
  t.BeginTransaction();
  const auto a = t.AddRecord(Lsn(110), 10);
  t.CommitTransaction(Lsn(200));
  t.BeginTransaction();
  const auto open = t.AddRecord(Lsn(210), 10);  // its transaction was open when the stream broke
  t.Rebase(Lsn(150));          // the slot on the new server is at 150
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
