// Package lease is the only code that changes who owns a durable job.
//
// A worker owns a job only through an exact lease: a fresh random
// lease_claim_id, its own lease_owner_id and a lease_expires_at taken from the
// database clock, plus a monotonic lease_fencing_token that external sinks can
// compare. The invariants this package keeps (design.md section 4):
//
//  1. Only a claim (ClaimJobs, ClaimArrivals, ClaimChunkedJobs) establishes
//     ownership. It sets a new claim id, the owner, an expiry from
//     clock_timestamp() and a new fencing token from a sequence.
//  2. Every later write (Renew, Succeed, Retry, Fail, Release, and for
//     chunked jobs FenceChunk, CheckpointChunk, SucceedChunked, FailChunked)
//     is one conditional statement whose predicate is the whole exact lease:
//     job_record_id, job_status = 'RUNNING', lease_claim_id, lease_owner_id and
//     lease_expires_at > clock_timestamp(). Zero rows means the caller lost
//     authority: the functions return ErrLost (or report the claim as lost) and
//     the caller must stop, roll back and never retry the write.
//  3. Lease time comes from the database clock (clock_timestamp(), never the
//     host clock, never now() which is frozen at transaction start).
//  4. Renew never creates, revives or transfers a claim; it only extends a
//     live exact lease, and never shortens one.
//
// Each state change writes its outbox row in the same statement, so the event
// exists if and only if the change committed.
//
// All functions are safe for concurrent use; they hold no state of their own.
package lease
