package worker

import (
	"context"

	"github.com/google/uuid"
)

// ChunkedTestHooks pause the chunked loader at exact points; nil fields do
// nothing (chunked.Hooks).
type ChunkedTestHooks struct {
	// InChunkTx runs inside each chunk transaction after its fenced
	// statement and its rows, before the checkpoint and the commit.
	InChunkTx func(ctx context.Context, chunk int64)
	// AfterChunkCommit runs after each chunk committed.
	AfterChunkCommit func(chunk int64)
}

// SetUpChunkedTest installs hooks in the chunked roles and returns their
// test signals and, for each job whose clean-up (chunked.Purge) ended, its
// id. Call before Start; the worker must run chunked jobs.
func (w *Worker) SetUpChunkedTest(h ChunkedTestHooks) (TestSignals, <-chan uuid.UUID) {
	ch := w.chunked
	ch.loader.Hooks.InChunkTx, ch.loader.Hooks.AfterChunkCommit = h.InChunkTx, h.AfterChunkCommit
	s := &ch.sig
	s.claimed.init()
	s.renewRound.init()
	s.renewBusy.init()
	s.finishGroup.init()
	s.lost.init()
	s.outcome.init()
	s.schemaGate.init()
	ch.purger.done = make(chan uuid.UUID, 64)
	return TestSignals{Claimed: s.claimed.ch, RenewRound: s.renewRound.ch, RenewBusy: s.renewBusy.ch, FinishGroup: s.finishGroup.ch,
		Lost: s.lost.ch, Outcome: s.outcome.ch, SchemaGate: s.schemaGate.ch}, ch.purger.done
}
