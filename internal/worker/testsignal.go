package worker

import "github.com/mightyetl/mightyetl/internal/lease"

// testSignal is a test seam after River's internal/testsignal: a buffered
// channel a role sends a value to at one point of its work, so a test waits
// for that point instead of polling metrics. Unset (the zero value, always
// in production) it does nothing. Tests set it up through export_test.go
// before Start.
type testSignal[T any] struct {
	ch chan T
}

// init readies the signal for a test.
func (s *testSignal[T]) init() { s.ch = make(chan T, 4096) }

// signal sends v when the signal is set up. It never blocks: past 4096
// unread values (a test that does not read this signal) it drops v.
func (s *testSignal[T]) signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// testSignals are the worker's test seams, all unset in production. The
// signals report; the pause functions (nil: no pause) let a test hold a
// role at an exact point.
type testSignals struct {
	claimed     testSignal[int]      // producer: after each claim statement, the number claimed
	arrivals    testSignal[int]      // producer: after each arrivals claim statement, the number claimed
	renewRound  testSignal[struct{}] // renewer: at the start of each scheduled renewal round
	renewBusy   testSignal[int]      // renewer: a renewal statement found claims busy (rows another transaction held), their number
	finishGroup testSignal[[2]int]   // completer: before each finish transaction, its jobs and target rows
	lost        testSignal[string]   // any role: a claim was lost, with the metrics.Lost* reason
	outcome     testSignal[string]   // executor: a claim settled, with its metrics.Outcome* value ("" abandoned)
	schemaGate  testSignal[bool]     // producer: after each schema compatibility check, whether claiming is allowed

	// beforeFinish runs on the executor after the handler returned and
	// before its execution slot frees and the result commits.
	beforeFinish func(c *lease.Claim)
	// beforeRenew runs on the renewer at the start of every scheduled round.
	beforeRenew func()
	// inFinishTx runs inside each finish transaction after the fenced
	// success locked the won job rows, before the target rows are written.
	inFinishTx func()
	// beforeFinishCommit runs on the completer inside each finish
	// transaction after its last statement, before the COMMIT is sent.
	beforeFinishCommit func()
	// afterFinishCommit runs on the completer after a finish transaction
	// committed, before its results are answered (the claims still live
	// and finishing).
	afterFinishCommit func()
	// writeFailed runs on the executor when a fenced write failed with a
	// database error, before it is tried again.
	writeFailed func()
}
