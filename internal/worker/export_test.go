package worker

import "github.com/mightyetl/mightyetl/internal/lease"

// TestHooks pause a worker's roles at exact points; nil fields do nothing.
// They exist only in this package's tests.
type TestHooks struct {
	// BeforeFinish runs on the executor after the handler returned, before
	// its slot frees and the result commits.
	BeforeFinish func(c *lease.Claim)
	// BeforeRenew runs at the start of every scheduled renewal round.
	BeforeRenew func()
	// InFinishTx runs inside each finish transaction after the fenced
	// success locked the won job rows, before the target rows are written.
	InFinishTx func()
	// BeforeFinishCommit runs inside each finish transaction after its
	// last statement, just before the COMMIT is sent.
	BeforeFinishCommit func()
	// AfterFinishCommit runs after a finish transaction committed, before
	// its results are answered (the claims still live and finishing).
	AfterFinishCommit func()
	// WriteFailed runs when a fenced write failed with a database error,
	// before it is tried again.
	WriteFailed func()
}

// TestSignals are the worker's test signals, for tests to wait on.
type TestSignals struct {
	Claimed     <-chan int      // after each claim statement: the number claimed
	Arrivals    <-chan int      // after each arrivals claim statement: the number claimed
	RenewRound  <-chan struct{} // at the start of each scheduled renewal round
	RenewBusy   <-chan int      // a renewal statement found claims busy: their number
	FinishGroup <-chan [2]int   // before each finish transaction: its jobs and target rows
	Lost        <-chan string   // a claim was lost: its metrics.Lost* reason
	Outcome     <-chan string   // a claim settled: its metrics.Outcome* value ("" abandoned)
	SchemaGate  <-chan bool     // after each schema compatibility check: whether claiming is allowed
}

// SetUpTest installs hooks and sets up the test signals; call before Start.
func (w *Worker) SetUpTest(h TestHooks) TestSignals {
	s := &w.signals
	s.beforeFinish, s.beforeRenew, s.inFinishTx, s.writeFailed = h.BeforeFinish, h.BeforeRenew, h.InFinishTx, h.WriteFailed
	s.beforeFinishCommit, s.afterFinishCommit = h.BeforeFinishCommit, h.AfterFinishCommit
	s.claimed.init()
	s.arrivals.init()
	s.renewRound.init()
	s.renewBusy.init()
	s.finishGroup.init()
	s.lost.init()
	s.outcome.init()
	s.schemaGate.init()
	return TestSignals{Claimed: s.claimed.ch, Arrivals: s.arrivals.ch, RenewRound: s.renewRound.ch, RenewBusy: s.renewBusy.ch, FinishGroup: s.finishGroup.ch,
		Lost: s.lost.ch, Outcome: s.outcome.ch, SchemaGate: s.schemaGate.ch}
}

// RenewOnce runs one scheduled renewal round now, on the caller's goroutine.
func (w *Worker) RenewOnce() { w.renewer.renewOnce() }

// RenewerDone is closed once the renewer stopped: its loop has returned, so
// no renewal round runs again.
func (w *Worker) RenewerDone() <-chan struct{} { return w.renewer.Done() }
