// Package worker runs claimed durable jobs. A Worker composes four roles,
// each its own type with its own Start and Stop (internal/startstop), around
// one record of the claims it holds (claimSet). New builds and wires them;
// their constructors are internal:
//
//	Producer      claims (lease.ClaimJobs) when a slot frees, a wake-up arrives or the poll interval
//	              passes, in a transaction it commits only once it has read the claimed rows (a claim
//	              it gave up on never commits), and hands each claim to the executor pool (launcher);
//	              a wake-up that finds it claiming or full also runs an arrivals claim
//	              (lease.ClaimArrivals: light owners' new jobs) at once, onto the wake-up slots
//	              (Config.WakeupSlots) that its regular claims never use
//	ExecutorPool  runs the handler for the job kind OUTSIDE any transaction, under a context that is
//	              cancelled (with a typed cause) as soon as the lease is known lost; then settles the
//	              claim: a success goes to the completer (finisher), anything else is one fenced write
//	Completer     one short transaction per group: fenced success first (lease.Succeed), then the
//	              target rows of the jobs that won; losers write nothing
//	Renewer       every RenewInterval one lease.Renew for all live claims on its own pool; zero rows
//	              for a claim cancels its handler (ErrLeaseLost); database errors are retried only
//	              while the worker's own conservative view of the lease leaves time (fail closed)
//
// Chunked (large) jobs, kind etl_chunked, run on a second set of the same
// roles with a claim set of their own (chunkedRoles, Config.ChunkedSlots
// slots), so the small-job path is unchanged: a Producer claiming with
// lease.ClaimChunkedJobs, an ExecutorPool whose handler loads the job chunk
// by chunk (chunked.Loader: one fenced transaction per chunk) and which
// settles by lease.SucceedChunked and lease.FailChunked, a Renewer, and a
// purger that removes a failed or cancelled job's staged rows and a
// terminal job's stored payload in bounded batches.
//
// Stop runs the roles' Stops in order: the producer stops claiming; the
// executor pools wait (together) up to ShutdownGrace for running handlers while
// renewals continue, cancels the rest (ErrShutdown) and Releases their
// claims; then the renewer and the completer stop. Renewal never runs for a
// claim the worker has abandoned.
package worker
