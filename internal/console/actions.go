package console

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// CancelResult is the outcome of one operator cancellation.
type CancelResult struct {
	Cancelled      bool
	PreviousStatus string
	Status         string
}

// Cancel cancels one job as op (etl_operator_cancel_job) and logs the
// action without identifiers.
func (c *Console) Cancel(ctx context.Context, op Operator, id uuid.UUID) (CancelResult, error) {
	out, err := pg.OperatorCancelJob(ctx, c.opts.DB, pg.OperatorCancelParams{JobID: id,
		OperatorScopeHash: op.ScopeHash, CancellationKeyHash: operatorCancellationKeyHash(op, id)})
	if err != nil {
		if !errors.Is(err, pg.ErrNotFound) {
			c.opts.Logger.LogAttrs(ctx, slog.LevelError, "operator action", slog.String("action", "cancel"),
				slog.String("outcome", "error"), slog.String("error_class", pg.ErrorClass(err)))
		}
		return CancelResult{}, err
	}
	outcome := "not_active"
	if out.Cancelled {
		outcome = "cancelled"
	}
	c.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "operator action", slog.String("action", "cancel"),
		slog.String("outcome", outcome), slog.String("previous_status", out.PreviousStatus))
	return CancelResult{Cancelled: out.Cancelled, PreviousStatus: out.PreviousStatus, Status: out.Job.Status}, nil
}

// BulkCancelPlan is the set a bulk cancellation would cancel now.
type BulkCancelPlan struct {
	Jobs []uuid.UUID
	// Capped is true when more jobs match than BulkCancelCap.
	Capped bool
}

// PlanBulkCancel returns the active jobs (PENDING or RUNNING) matching f,
// at most BulkCancelCap of them, newest first. A priority filter is refused
// (errBulkPriority): the audit row records the filter, and its CHECK
// (migration 00020) admits no priority member yet.
func (c *Console) PlanBulkCancel(ctx context.Context, f Filter) (BulkCancelPlan, error) {
	if f.Status != pg.StatusPending && f.Status != pg.StatusRunning {
		return BulkCancelPlan{}, errBulkNeedsActiveState
	}
	if f.Priority != 0 {
		return BulkCancelPlan{}, errBulkPriority
	}
	f.Before = nil
	p := f.params()
	p.Limit = c.opts.BulkCancelCap
	page, err := pg.OpsListJobs(ctx, c.opts.DB, p)
	if err != nil {
		return BulkCancelPlan{}, err
	}
	plan := BulkCancelPlan{Capped: page.Next != nil}
	for _, j := range page.Jobs {
		plan.Jobs = append(plan.Jobs, j.JobID)
	}
	return plan, nil
}

var (
	errBulkNeedsActiveState = errors.New("bulk cancel needs a PENDING or RUNNING state filter")
	errBulkPriority         = errors.New("bulk cancel does not filter by priority")
)

// BulkCancel cancels at most confirmed jobs of the plan for f in one
// statement (pg.OperatorBulkCancelJobs, in job id order) that also writes
// the action's one audit row (the filter's fields and the count, see
// auditFilter), and returns how many it cancelled. On an error nothing is
// cancelled and no audit row is written.
func (c *Console) BulkCancel(ctx context.Context, op Operator, f Filter, confirmed int) (int, error) {
	plan, err := c.PlanBulkCancel(ctx, f)
	if err != nil {
		return 0, err
	}
	ids := plan.Jobs[:min(max(confirmed, 0), len(plan.Jobs))]
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = operatorCancellationKeyHash(op, id)
	}
	n, err := pg.OperatorBulkCancelJobs(ctx, c.opts.DB, pg.OperatorBulkCancelParams{JobIDs: ids,
		CancellationKeyHashes: keys, OperatorScopeHash: op.ScopeHash, Filter: auditFilter(f, confirmed)})
	if err != nil {
		c.opts.Logger.LogAttrs(ctx, slog.LevelError, "operator action", slog.String("action", "bulk_cancel"),
			slog.String("outcome", "error"), slog.String("error_class", pg.ErrorClass(err)), slog.Int("cancelled", 0))
		return 0, fmt.Errorf("bulk cancel: %w", err)
	}
	c.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "operator action", slog.String("action", "bulk_cancel"),
		slog.String("outcome", "done"), slog.Int("confirmed", confirmed), slog.Int("cancelled", n))
	return n, nil
}

// errReplayUnavailable: the console was built without Options.Replay.
var errReplayUnavailable = errors.New("console: replay not configured")

// ReplayKey draws a fresh replay key for a replay form: the form carries it
// as a hidden field, so submitting the same rendered form twice (a double
// click, a resent POST) replays the same job, while a newly rendered form
// makes a new key. 32 hex characters of crypto/rand after "console-".
func ReplayKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "console-" + hex.EncodeToString(b[:])
}

// Replay replays the FAILED or CANCELLED job id of any owner as op with the
// resent original body and replay key (see intake.Service.OperatorReplay:
// the same errors, intake codes) and logs the action without identifiers,
// payloads or hashes.
func (c *Console) Replay(ctx context.Context, op Operator, id uuid.UUID, key string, body []byte) (intake.ReplayResult, error) {
	if c.opts.Replay == nil {
		return intake.ReplayResult{}, errReplayUnavailable
	}
	res, err := c.opts.Replay(ctx, intake.OperatorReplayRequest{OperatorScopeHash: op.ScopeHash,
		IdempotencyKey: key, JobID: id, Body: body})
	outcome := "created"
	switch {
	case err != nil:
		outcome = intake.CodeOf(err)
	case res.Replayed:
		outcome = "replayed"
	}
	level := slog.LevelInfo
	if outcome == codes.TargetUnavailable || outcome == codes.InternalError {
		level = slog.LevelError
	}
	c.opts.Logger.LogAttrs(ctx, level, "operator action", slog.String("action", "replay"),
		slog.String("outcome", outcome))
	return res, err
}

// ReplayEnabled reports whether the console offers replay.
func (c *Console) ReplayEnabled() bool { return c.opts.Replay != nil }

// MaxPayloadBytes is the largest replay body the console accepts.
func (c *Console) MaxPayloadBytes() int64 { return c.opts.MaxPayloadBytes }
