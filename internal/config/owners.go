package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// Bounds of the per-owner quota settings (issue 33). Their defaults are
// zero: unlimited.
const (
	// MaxOwnerPendingJobsCeiling is the highest
	// MIGHTYETL_OWNER_MAX_PENDING_JOBS (and maxPendingJobs of an override):
	// a count reads up to the cap's index entries once per owner per
	// window, so the cap stays a number one read can afford.
	MaxOwnerPendingJobsCeiling = 1_000_000
	// MaxOwnerSubmitRateCeiling is the highest MIGHTYETL_OWNER_SUBMIT_RATE,
	// in jobs per second.
	MaxOwnerSubmitRateCeiling = 1_000_000
	// MaxOwnerSubmitBurstCeiling is the highest MIGHTYETL_OWNER_SUBMIT_BURST.
	MaxOwnerSubmitBurstCeiling = 1_000_000
	// MaxOwnerOverridesFileBytes bounds MIGHTYETL_OWNER_OVERRIDES_FILE.
	MaxOwnerOverridesFileBytes = 16 << 20
)

// OwnerQuotas are the intake's per-owner quotas and the owners' claim
// weights.
type OwnerQuotas struct {
	MaxPendingJobs int     // MIGHTYETL_OWNER_MAX_PENDING_JOBS, default 0 = unlimited (0..1,000,000): an owner's PENDING and RUNNING jobs
	SubmitRate     float64 // MIGHTYETL_OWNER_SUBMIT_RATE, default 0 = unlimited (0..1,000,000): an owner's submissions per second, per intake process
	SubmitBurst    int     // MIGHTYETL_OWNER_SUBMIT_BURST, default 0 = max(1, ceil(rate)) (0..1,000,000): submissions an idle owner may make at once
	OverridesFile  string  // MIGHTYETL_OWNER_OVERRIDES_FILE: JSON per-principal overrides and claim weights (see ParseOwnerOverrides)
}

// RegisterOwnerQuotas registers the per-owner quota settings on l into dst.
func RegisterOwnerQuotas(l *Loader, dst *OwnerQuotas) {
	l.Int(&dst.MaxPendingJobs, "MIGHTYETL_OWNER_MAX_PENDING_JOBS", "owner-max-pending-jobs", 0, 0, MaxOwnerPendingJobsCeiling,
		"an owner's PENDING and RUNNING jobs, 0 = unlimited (429 etl_owner_quota_exceeded beyond)")
	l.String(new(string), "MIGHTYETL_OWNER_SUBMIT_RATE", "owner-submit-rate", "0",
		"an owner's submissions per second per intake, 0 = unlimited (429 etl_owner_quota_exceeded beyond)", func(s string) error {
			r, err := parseRate(s)
			if err != nil {
				return err
			}
			dst.SubmitRate = r
			return nil
		})
	l.Int(&dst.SubmitBurst, "MIGHTYETL_OWNER_SUBMIT_BURST", "owner-submit-burst", 0, 0, MaxOwnerSubmitBurstCeiling,
		"submissions an idle owner may make at once, 0 = max(1, ceil(rate))")
	l.String(&dst.OverridesFile, "MIGHTYETL_OWNER_OVERRIDES_FILE", "owner-overrides-file", "",
		"JSON file of per-principal quota overrides and claim weights", nil)
}

// parseRate accepts a decimal number of jobs per second within
// 0..MaxOwnerSubmitRateCeiling.
func parseRate(s string) (float64, error) {
	r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(r) || r < 0 || r > MaxOwnerSubmitRateCeiling {
		return 0, fmt.Errorf("must be a number of jobs per second between 0 and %d (like 0.5 or 20)", MaxOwnerSubmitRateCeiling)
	}
	return r, nil
}

// Validate checks the cross-setting rules (a burst needs a rate) and that
// the overrides file, when set, can be read and is well-formed.
func (o OwnerQuotas) Validate() error {
	if o.SubmitBurst > 0 && o.SubmitRate == 0 {
		return errors.New("MIGHTYETL_OWNER_SUBMIT_BURST: only used with MIGHTYETL_OWNER_SUBMIT_RATE above 0")
	}
	if o.OverridesFile != "" {
		if _, err := o.overrides(); err != nil {
			return err
		}
	}
	return nil
}

// OwnerSettings are the effective per-owner settings: the intake's quotas
// and, when an overrides file is set, the claim weights it manages.
type OwnerSettings struct {
	// Quotas are the intake.Service's QuotaOptions.
	Quotas intake.QuotaOptions
	// ManagesWeights is true when MIGHTYETL_OWNER_OVERRIDES_FILE is set:
	// then Weights are the weights of every owner it names (1 for those
	// that give none), and every other owner's weight is 1
	// (pg.SetOwnerWeights). Without the file the intake writes no weight.
	ManagesWeights bool
	Weights        []pg.OwnerWeight
}

// Load reads the overrides file (when set) and returns the settings, with
// each override's principal hashed under hashKey for its weight.
func (o OwnerQuotas) Load(hashKey []byte) (OwnerSettings, error) {
	def := intake.OwnerLimits{MaxPendingJobs: int64(o.MaxPendingJobs), SubmitRate: o.SubmitRate, SubmitBurst: o.SubmitBurst}
	s := OwnerSettings{Quotas: intake.QuotaOptions{Default: def}}
	if o.OverridesFile == "" {
		return s, nil
	}
	entries, err := o.overrides()
	if err != nil {
		return OwnerSettings{}, err
	}
	if len(hashKey) == 0 {
		return OwnerSettings{}, errors.New("MIGHTYETL_OWNER_OVERRIDES_FILE: needs MIGHTYETL_PRINCIPAL_HASH_KEY")
	}
	s.ManagesWeights = true
	s.Quotas.Overrides = make(map[string]intake.OwnerLimits, len(entries))
	scopes := auth.NewScopeHasher(hashKey)
	for _, e := range entries {
		s.Quotas.Overrides[e.Principal] = e.Limits(def)
		s.Weights = append(s.Weights, pg.OwnerWeight{PrincipalScopeHash: scopes.Hash(e.Principal), Weight: e.weight()})
	}
	return s, nil
}

func (o OwnerQuotas) overrides() ([]OwnerOverride, error) {
	f, err := os.Open(o.OverridesFile)
	if err != nil {
		return nil, fmt.Errorf("MIGHTYETL_OWNER_OVERRIDES_FILE: %w", err)
	}
	defer f.Close()
	entries, err := ParseOwnerOverrides(io.LimitReader(f, MaxOwnerOverridesFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("MIGHTYETL_OWNER_OVERRIDES_FILE: %w", err)
	}
	return entries, nil
}

// OwnerOverride is one entry of MIGHTYETL_OWNER_OVERRIDES_FILE: a
// principal's own limits and claim weight. An absent limit is the
// default's (MIGHTYETL_OWNER_*); 0 is unlimited. An absent submitBurst is
// the default's when submitRate is absent too, else 0 (max(1,
// ceil(submitRate))). An absent weight is 1.
type OwnerOverride struct {
	// Principal is the principal as the credentials name it (a Basic user
	// name, a JWT sub): non-blank, at most 512 code points.
	Principal      string   `json:"principal"`
	MaxPendingJobs *int64   `json:"maxPendingJobs,omitempty"`
	SubmitRate     *float64 `json:"submitRate,omitempty"`
	SubmitBurst    *int     `json:"submitBurst,omitempty"`
	// Weight is the owner's share of a fair claim against other owners
	// with claimable jobs, 1..1000.
	Weight *int `json:"weight,omitempty"`
}

// Limits are the override's limits over def.
func (e OwnerOverride) Limits(def intake.OwnerLimits) intake.OwnerLimits {
	l := def
	if e.MaxPendingJobs != nil {
		l.MaxPendingJobs = *e.MaxPendingJobs
	}
	if e.SubmitRate != nil {
		l.SubmitRate, l.SubmitBurst = *e.SubmitRate, 0
	}
	if e.SubmitBurst != nil {
		l.SubmitBurst = *e.SubmitBurst
	}
	return l
}

func (e OwnerOverride) weight() int {
	if e.Weight == nil {
		return pg.DefaultOwnerWeight
	}
	return *e.Weight
}

// ownerOverridesFile is the file's document.
type ownerOverridesFile struct {
	Owners []OwnerOverride `json:"owners"`
}

// ParseOwnerOverrides parses MIGHTYETL_OWNER_OVERRIDES_FILE's JSON:
//
//	{"owners": [
//	  {"principal": "tenant-a", "maxPendingJobs": 10000, "submitRate": 50, "submitBurst": 100, "weight": 4},
//	  {"principal": "nightly-import", "maxPendingJobs": 0, "weight": 1}
//	]}
//
// Unknown members, a principal named twice, a blank or too long principal
// and values out of range are errors, which name the entry by its position
// (never its principal).
func ParseOwnerOverrides(r io.Reader) ([]OwnerOverride, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if len(raw) > MaxOwnerOverridesFileBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxOwnerOverridesFileBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var doc ownerOverridesFile
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("not a JSON object {\"owners\": [...]} of known members: %s", jsonErrorClass(err))
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	seen := make(map[string]bool, len(doc.Owners))
	for i, e := range doc.Owners {
		if err := e.validate(); err != nil {
			return nil, fmt.Errorf("owners[%d]: %w", i, err)
		}
		if seen[e.Principal] {
			return nil, fmt.Errorf("owners[%d]: principal already named by an earlier entry", i)
		}
		seen[e.Principal] = true
	}
	return doc.Owners, nil
}

// jsonErrorClass describes a decoding error without the file's content.
func jsonErrorClass(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("syntax error at byte %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("member %s has the wrong type", typ.Field)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return "unknown member"
	}
	return "malformed"
}

func (e OwnerOverride) validate() error {
	switch {
	case strings.TrimSpace(e.Principal) == "":
		return errors.New("principal is blank")
	case utf8.RuneCountInString(e.Principal) > auth.MaxPrincipalRunes:
		return fmt.Errorf("principal longer than %d code points", auth.MaxPrincipalRunes)
	case e.MaxPendingJobs != nil && (*e.MaxPendingJobs < 0 || *e.MaxPendingJobs > MaxOwnerPendingJobsCeiling):
		return fmt.Errorf("maxPendingJobs outside 0..%d", MaxOwnerPendingJobsCeiling)
	case e.SubmitRate != nil && (math.IsNaN(*e.SubmitRate) || *e.SubmitRate < 0 || *e.SubmitRate > MaxOwnerSubmitRateCeiling):
		return fmt.Errorf("submitRate outside 0..%d", MaxOwnerSubmitRateCeiling)
	case e.SubmitBurst != nil && (*e.SubmitBurst < 0 || *e.SubmitBurst > MaxOwnerSubmitBurstCeiling):
		return fmt.Errorf("submitBurst outside 0..%d", MaxOwnerSubmitBurstCeiling)
	case e.SubmitBurst != nil && *e.SubmitBurst > 0 && e.SubmitRate != nil && *e.SubmitRate == 0:
		return errors.New("submitBurst without a submitRate above 0")
	case e.Weight != nil && (*e.Weight < pg.MinOwnerWeight || *e.Weight > pg.MaxOwnerWeight):
		return fmt.Errorf("weight outside %d..%d", pg.MinOwnerWeight, pg.MaxOwnerWeight)
	}
	return nil
}
