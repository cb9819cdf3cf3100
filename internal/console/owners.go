package console

import (
	"context"
	"strconv"
	"time"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// ClaimableOwners is the overview's claimable jobs by owner and priority
// (pg.OpsClaimableByOwner): exact up to ExactLimit claimable jobs, estimated
// from a sample of the claim queue beyond; the oldest ages and the claim
// states are exact either way. Owners are short prefixes of the principal
// scope hash, as in the job list.
type ClaimableOwners struct {
	Estimated      bool    `json:"estimated"`
	ExactLimit     int64   `json:"exactLimit"`
	SampledPercent float64 `json:"sampledPercent,omitempty"`
	Claimable      int64   `json:"claimable"`
	// ByPriority counts priorities 1..4 in that order.
	ByPriority          [4]int64 `json:"claimableByPriority"`
	WithoutOwnerSlot    int64    `json:"claimableWithoutOwner"`
	OwnersWithClaimable int64    `json:"ownersWithClaimable"`
	// Owners are the owners with the most claimable jobs (at most
	// pg.OpsOwnersTop), most first.
	Owners      []OwnerRow  `json:"owners"`
	ClaimOwners ClaimOwners `json:"claimOwners"`
}

// OwnerRow is one owner of ClaimableOwners.
type OwnerRow struct {
	Owner      string   `json:"owner"`
	Claimable  int64    `json:"claimable"`
	ByPriority [4]int64 `json:"claimableByPriority"`
	// OldestClaimableAge is how long its oldest claimable job has been
	// claimable (database clock); nil when it has none any more.
	OldestClaimableAge *float64 `json:"oldestClaimableAgeSeconds,omitempty"`
	// Weight is its claim weight; nil when unregistered.
	Weight *int `json:"weight,omitempty"`
	// ClaimState is due, idle, scheduled, parked or unregistered
	// (pg.OwnerDue and the others).
	ClaimState string `json:"claimState"`
	IdleVisits int    `json:"idleVisits"`
	// DueSince is how long a due owner has waited for a claim to serve
	// it; NextLookIn is how long until an idle or scheduled owner is due.
	DueSince   *float64 `json:"dueSinceSeconds,omitempty"`
	NextLookIn *float64 `json:"nextLookInSeconds,omitempty"`
}

// ClaimOwners count the owners the fair claim knows (etl_claim_owners) by
// claim state.
type ClaimOwners struct {
	Owners    int64 `json:"owners"`
	Due       int64 `json:"due"`
	Idle      int64 `json:"idle"`
	Scheduled int64 `json:"scheduled"`
	Parked    int64 `json:"parked"`
	Weighted  int64 `json:"weighted"`
	Capped    bool  `json:"capped"`
	// LongestDue is how long the due owner the claims have left waiting
	// longest has waited; nil when no owner is due.
	LongestDue *float64 `json:"longestDueSeconds,omitempty"`
}

// claimableOwners reads ClaimableOwners at the database time now.
func (c *Console) claimableOwners(ctx context.Context, now time.Time) (ClaimableOwners, error) {
	r, err := pg.OpsClaimableByOwner(ctx, c.opts.DB, pg.OpsOwnersParams{Now: now})
	if err != nil {
		return ClaimableOwners{}, err
	}
	age := func(t time.Time) *float64 { s := max(0, now.Sub(t).Seconds()); return &s }
	out := ClaimableOwners{Estimated: r.Estimated, ExactLimit: int64(r.ExactLimit), SampledPercent: r.SampledPercent,
		Claimable: r.Claimable, ByPriority: r.ByPriority, WithoutOwnerSlot: r.WithoutOwnerSlot,
		OwnersWithClaimable: r.OwnersWithClaimable, Owners: []OwnerRow{},
		ClaimOwners: ClaimOwners{Owners: r.ClaimOwners.Owners, Due: r.ClaimOwners.Due, Idle: r.ClaimOwners.Idle,
			Scheduled: r.ClaimOwners.Scheduled, Parked: r.ClaimOwners.Parked, Weighted: r.ClaimOwners.Weighted,
			Capped: r.ClaimOwners.Capped}}
	if r.ClaimOwners.LongestDueAt != nil {
		out.ClaimOwners.LongestDue = age(*r.ClaimOwners.LongestDueAt)
	}
	for _, o := range r.Owners {
		row := OwnerRow{Owner: o.Owner, Claimable: o.Claimable, ByPriority: o.ByPriority, ClaimState: o.State,
			IdleVisits: o.IdleVisits}
		if o.OldestClaimableAt != nil {
			row.OldestClaimableAge = age(*o.OldestClaimableAt)
		}
		if o.State != pg.OwnerUnregistered {
			w := o.Weight
			row.Weight = &w
		}
		if o.DueAt != nil {
			switch o.State {
			case pg.OwnerDue:
				row.DueSince = age(*o.DueAt)
			case pg.OwnerIdle, pg.OwnerScheduled:
				s := o.DueAt.Sub(now).Seconds()
				row.NextLookIn = &s
			}
		}
		out.Owners = append(out.Owners, row)
	}
	return out, nil
}

// StateText is the owner's claim state as the overview says it.
func (o OwnerRow) StateText() string {
	secs := func(p *float64) string {
		if p == nil {
			return ""
		}
		return time.Duration(*p * float64(time.Second)).Round(100 * time.Millisecond).String()
	}
	switch o.ClaimState {
	case pg.OwnerDue:
		return "due for " + secs(o.DueSince)
	case pg.OwnerIdle:
		return "idle (" + strconv.Itoa(o.IdleVisits) + " empty looks), next look in " + secs(o.NextLookIn)
	case pg.OwnerScheduled:
		return "scheduled: due in " + secs(o.NextLookIn)
	case pg.OwnerParked:
		return "parked: no queued job"
	}
	return "not registered for fair claims"
}

// PriorityCount is one priority's count.
type PriorityCount struct {
	Priority int
	Count    int64
}

// Priorities are ByPriority with their priorities.
func (c ClaimableOwners) Priorities() []PriorityCount {
	out := make([]PriorityCount, len(c.ByPriority))
	for i, n := range c.ByPriority {
		out[i] = PriorityCount{Priority: i + 1, Count: n}
	}
	return out
}

// SampleText is the sampled share of the claim queue's pages, as a
// percentage of three significant digits ("2.76%").
func (c ClaimableOwners) SampleText() string {
	return strconv.FormatFloat(c.SampledPercent, 'g', 3, 64) + "%"
}
