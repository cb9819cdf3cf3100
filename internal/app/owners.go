package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// owners is the intake's per-owner configuration (MIGHTYETL_OWNER_*): the
// quotas of its intake.Service and, when MIGHTYETL_OWNER_OVERRIDES_FILE is
// set, the owners' claim weights in etl_claim_owners, written at start and
// at every reload.
type owners struct {
	cfg     config.OwnerQuotas
	hashKey []byte
	db      pg.DBTX
	svc     *intake.Service
	log     *slog.Logger

	mu      sync.Mutex // one reload at a time
	current config.OwnerSettings
}

// writeWeights writes the configured weights when the overrides file
// manages them, and logs the outcome (counts only, never a principal). A
// failure leaves the weights as they were; the next start or reload tries
// again.
func (o *owners) writeWeights(ctx context.Context, s config.OwnerSettings) error {
	if !s.ManagesWeights {
		return nil
	}
	set, reset, err := pg.SetOwnerWeights(ctx, o.db, s.Weights)
	if err != nil {
		o.log.Error("owner weights not written", "error_class", pg.ErrorClass(err))
		return err
	}
	o.log.Info("owner weights written", "owners", len(s.Weights), "changed", set, "reset_to_1", reset)
	return nil
}

// errOwnersReload is the error of a reload whose file could not be used.
var errOwnersReload = errors.New("owner overrides not reloaded")

// reload reads MIGHTYETL_OWNER_OVERRIDES_FILE again: the service takes the
// new quotas at once (buckets kept, pending jobs counted again), then the
// weights are written. A file that cannot be read or parsed changes
// nothing: the last good configuration stays, and the error says so in one
// line (never the file's content).
func (o *owners) reload(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, err := o.cfg.Load(o.hashKey)
	if err != nil {
		o.log.Error("owner overrides not reloaded; the last good ones stay", "error", err.Error())
		return errors.Join(errOwnersReload, err)
	}
	if err := o.svc.SetQuotas(s.Quotas); err != nil {
		o.log.Error("owner overrides not reloaded; the last good ones stay", "error", err.Error())
		return errors.Join(errOwnersReload, err)
	}
	o.current = s
	o.log.Info("owner overrides reloaded", "overrides", len(s.Quotas.Overrides), "quotas", s.Quotas.Enabled())
	return o.writeWeights(ctx, s)
}

// ReloadOwners re-reads the per-owner overrides file (cmd/intake calls it
// on SIGHUP): see owners.reload. Without MIGHTYETL_OWNER_OVERRIDES_FILE it
// only re-applies the environment's defaults, which a running process
// cannot change, so it does nothing visible. Safe for concurrent use.
func (in *Intake) ReloadOwners(ctx context.Context) error { return in.owners.reload(ctx) }
