package console

import (
	"context"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// Overview is the fleet at a glance.
type Overview struct {
	DatabaseNow        time.Time `json:"databaseNow"`
	Pending            int       `json:"pending"`
	PendingClaimable   int       `json:"pendingClaimableNow"`
	PendingScheduled   int       `json:"pendingScheduledLater"`
	Running            int       `json:"running"`
	RunningLive        int       `json:"runningLeaseLive"`
	RunningExpired     int       `json:"runningLeaseExpired"`
	ActiveCapped       bool      `json:"activeCapped"`
	OldestClaimableAge float64   `json:"oldestClaimableAgeSeconds"`
	// Outcomes are terminal outcomes in the last hour (see OutcomesCapped).
	Outcomes       []Outcome `json:"outcomesLastHour"`
	OutcomesCapped bool      `json:"outcomesCapped"`
	// Rates are claims and finishes per minute over the last 15 minutes.
	Rates            []RatePoint `json:"rates"`
	OutboxLifecycle  int64       `json:"outboxLifecycleRows"`
	OutboxAdvisory   int64       `json:"outboxAdvisoryRows"`
	OutboxOldestAge  float64     `json:"outboxOldestAgeSeconds"`
	RelayState       string      `json:"relayState"`
	SoonestExpirySec *float64    `json:"soonestLeaseExpirySeconds,omitempty"`
	// ClaimableByOwner is the claimable jobs by owner and priority, and the
	// owners' claim state (claimableOwners).
	ClaimableByOwner ClaimableOwners `json:"claimableByOwner"`
	// nextSample is how long until the sampler's next sample is due (the
	// chart's first rate comes with it when Rates is empty).
	nextSample time.Duration
}

// Outcome is a count of terminal outcomes by state and code.
type Outcome struct {
	Status string `json:"status"`
	Code   string `json:"code,omitempty"`
	Count  int    `json:"count"`
}

// outboxCap bounds each outbox count.
const outboxCap = 100000

// outcomesScan bounds the jobs examined for the last hour's outcomes.
const outcomesScan = 20000

// Overview reads the overview: the active set (claim queue, capped), the
// claimable jobs by owner (bounded, see pg.OpsClaimableByOwner), the last
// hour's outcomes (capped primary-key walk), the outbox (partial indexes,
// capped) and the rate samples.
func (c *Console) Overview(ctx context.Context) (Overview, error) {
	active, now, capped, err := pg.OpsActiveJobs(ctx, c.opts.DB)
	if err != nil {
		return Overview{}, err
	}
	o := Overview{DatabaseNow: now, ActiveCapped: capped, RelayState: (*c.relayState.Load())()}
	var oldest *time.Time
	for _, a := range active {
		claimable := !a.ClaimableAt.After(now)
		switch a.Status {
		case pg.StatusPending:
			o.Pending++
			if claimable {
				o.PendingClaimable++
			} else {
				o.PendingScheduled++
			}
		case pg.StatusRunning:
			o.Running++
			if claimable {
				o.RunningExpired++
			} else {
				o.RunningLive++
				s := a.ClaimableAt.Sub(now).Seconds()
				if o.SoonestExpirySec == nil || s < *o.SoonestExpirySec {
					o.SoonestExpirySec = &s
				}
			}
		}
		if claimable && (oldest == nil || a.ClaimableAt.Before(*oldest)) {
			t := a.ClaimableAt
			oldest = &t
		}
	}
	if oldest != nil {
		o.OldestClaimableAge = now.Sub(*oldest).Seconds()
	}
	if o.ClaimableByOwner, err = c.claimableOwners(ctx, now); err != nil {
		return Overview{}, err
	}
	outcomes, ocapped, err := pg.OpsRecentOutcomes(ctx, c.opts.DB, now.Add(-time.Hour), outcomesScan)
	if err != nil {
		return Overview{}, err
	}
	o.OutcomesCapped = ocapped
	for _, x := range outcomes {
		o.Outcomes = append(o.Outcomes, Outcome{Status: x.Status, Code: x.Code, Count: x.Count})
	}
	b, err := pg.ReadOutboxBacklog(ctx, c.opts.DB, outboxCap)
	if err != nil {
		return Overview{}, err
	}
	o.OutboxLifecycle, o.OutboxAdvisory = b.Lifecycle, b.Advisory
	if b.OldestLifecycleAt != nil {
		o.OutboxOldestAge = max(0, now.Sub(*b.OldestLifecycleAt).Seconds())
	}
	if err := c.sampler.runOnce(ctx); err != nil {
		return Overview{}, err
	}
	o.Rates = c.sampler.rates(now)
	o.nextSample = c.sampler.nextIn(time.Now())
	return o, nil
}

// Worker is one lease owner of the fleet, as its leases show it.
type Worker struct {
	OwnerID       string    `json:"leaseOwnerId"`
	Running       int       `json:"runningClaims"`
	Live          int       `json:"liveLeases"`
	Expired       int       `json:"expiredLeases"`
	SoonestExpiry time.Time `json:"soonestLeaseExpiry"`
	// State is "renewing" (every lease live), "lagging" (some expired) or
	// "lost" (every lease expired: a crashed or partitioned worker whose
	// jobs the next claims will take over).
	State string `json:"state"`
	// Reclaim lists the jobs with an expired lease (at most 50).
	Reclaim []uuid.UUID `json:"jobsToReclaim"`
}

// Fleet is the workers page.
type Fleet struct {
	DatabaseNow time.Time `json:"databaseNow"`
	Workers     []Worker  `json:"workers"`
	Capped      bool      `json:"activeCapped"`
}

// Fleet groups the RUNNING jobs of the active set by lease owner.
func (c *Console) Fleet(ctx context.Context) (Fleet, error) {
	active, now, capped, err := pg.OpsActiveJobs(ctx, c.opts.DB)
	if err != nil {
		return Fleet{}, err
	}
	by := map[string]*Worker{}
	for _, a := range active {
		if a.Status != pg.StatusRunning || a.LeaseOwnerID == nil || a.LeaseExpiresAt == nil {
			continue
		}
		w := by[*a.LeaseOwnerID]
		if w == nil {
			w = &Worker{OwnerID: *a.LeaseOwnerID, SoonestExpiry: *a.LeaseExpiresAt}
			by[w.OwnerID] = w
		}
		w.Running++
		if a.LeaseExpiresAt.After(now) {
			w.Live++
		} else {
			w.Expired++
			if len(w.Reclaim) < 50 {
				w.Reclaim = append(w.Reclaim, a.JobID)
			}
		}
		if a.LeaseExpiresAt.Before(w.SoonestExpiry) {
			w.SoonestExpiry = *a.LeaseExpiresAt
		}
	}
	f := Fleet{DatabaseNow: now, Capped: capped, Workers: []Worker{}}
	for _, w := range by {
		switch {
		case w.Expired == 0:
			w.State = "renewing"
		case w.Live == 0:
			w.State = "lost"
		default:
			w.State = "lagging"
		}
		f.Workers = append(f.Workers, *w)
	}
	sort.Slice(f.Workers, func(i, k int) bool { return f.Workers[i].OwnerID < f.Workers[k].OwnerID })
	return f, nil
}
