// Package outbox is the relay of the transactional outbox: it moves
// etl_outbox_events rows, written in the same transaction as the state change
// they announce, to NATS.
//
// # Waking
//
// The relay wakes on LISTEN etl_outbox_events (through pgxlisten, on a
// dedicated connection that reconnects by itself), on a fallback poll
// (default 1s), when its NATS connection comes back, and on Wake.
// Notifications come two ways (migration 00013). Single-job rows
// (cancellation, retry, failure, exhaustion, operator actions) are
// announced by a row trigger (AFTER INSERT, only for rows without
// job_record_ids) whose NOTIFY is delivered at commit. Group rows (an
// insert statement's, a finish group's, a replay's) notify nothing inside
// their transaction: their writers send the wake-up right after commit from
// a transaction of their own (pg.OutboxNotifier), or, in a process that
// runs its own relay, call Wake instead. An intake with NATS writes no
// job_available row at all and publishes the wake-up itself
// (AnnounceAvailable). Notifications are only hints; the table is the truth.
//
// # One batch
//
// One short transaction: SELECT up to BatchSize advisory rows (job_available,
// lease_revoked) and up to BatchSize lifecycle rows, oldest first, FOR UPDATE
// SKIP LOCKED, so any number of relays can run side by side and each row is
// handled by one of them. Each class is read through its own partial index
// (migration 00008) with generic plans, so a batch reads O(BatchSize) index
// entries however large the other class's backlog is. Then:
//
//   - all job_available rows of the batch become ONE core NATS message on
//     "<p>.jobs.available" (coalesced: a wake-up says "look", not "look at N");
//   - each lease_revoked row becomes one core NATS message on
//     "<p>.jobs.revoked" whose body is the job id;
//   - each job_lifecycle row becomes one JetStream message on
//     "<p>.lifecycle.<state>" per job: a plain row one, with event id and
//     Nats-Msg-Id = "<outbox id>"; a group row (a worker's whole finish
//     group, migration 00006) one per member, with the stable id
//     "<outbox id>-<member>" (events.Lifecycle.EventID, the v0.1.0 ids).
//     All are published asynchronously and then awaited (bounded by
//     PublishTimeout); a batch publishes at most BatchSize events (always
//     at least one row). An event JetStream acknowledges as a duplicate is
//     compared with the stored original: the same transition is a copy;
//     another one (an outbox id reused after a failover to an asynchronous
//     standby), or an original no longer stored, is published again as
//     "<id>@<occurred_at µs>" (Relay.resolveDuplicates);
//   - the advisory rows and the lifecycle rows whose every event was
//     acknowledged are deleted in the same transaction, which commits.
//
// A lifecycle row is deleted only after JetStream acknowledged all its
// events. If the
// relay dies between publish and commit, the rows come back and are
// published again; JetStream drops the copy by Nats-Msg-Id inside the
// stream's duplicate window (2 minutes), and consumers deduplicate by the
// CloudEvents id beyond it. Nothing is lost; at worst an event is delivered
// twice.
//
// # NATS unavailable
//
// Lifecycle rows are never dropped: while NATS is down (or JetStream does not
// acknowledge) they stay in the outbox, the backlog gauge grows, and they
// drain, without restarting anything, once NATS is back.
//
// Advisory rows ARE dropped while NATS is down: the relay deletes them
// without publishing (counted as outcome "dropped"). They carry no
// information the database does not already hold: workers poll for work and
// learn of a revoked lease from their next renewal, so a late wake-up is
// worthless, and keeping them would grow an unbounded backlog during a long
// outage. Advisory and lifecycle rows are selected separately so a stuck
// lifecycle backlog never holds up wake-ups.
//
// # Backlog gauges
//
// Refreshed at most once per PollInterval, not on every wake-up. One
// refresh reads at most a fixed number of index entries per class
// (backlogMeasureLimit): the row count is exact up to that many lifecycle
// rows and estimated beyond it from the id range; the age of the oldest row
// is exact. backlogSQL documents the estimate.
//
// The relay never logs or labels an id, payload, principal, key or SQL.
package outbox
