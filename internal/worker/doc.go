// Package worker runs claimed durable jobs: a producer loop that claims up to
// the free execution slots, one goroutine per running job, a renewer that
// extends every live lease on its own goroutine and connection pool, and
// completers that commit finished jobs in groups.
//
// Shape and order:
//
//	producer  claims (lease.ClaimJobs) when a slot frees, a wake-up arrives or the poll interval passes
//	executor  runs the handler for the job kind OUTSIDE any transaction, under a context that is
//	          cancelled (with a typed cause) as soon as the lease is known lost
//	completer one short transaction per group: fenced success first (lease.Succeed), then the
//	          target rows and ledger rows of the jobs that won; losers write nothing
//	renewer   every RenewInterval one lease.Renew for all live claims; zero rows for a claim
//	          cancels its handler (ErrLeaseLost); database errors are retried only while the
//	          worker's own conservative view of the lease leaves time (fail closed)
//
// Stop: stop claiming, wait up to ShutdownGrace for running handlers while
// renewals continue, cancel the rest (ErrShutdown) and Release their claims,
// then stop the renewer and the completers. Renewal never runs for a claim the
// worker has abandoned.
package worker
