package faultinject

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Recovery is how long the system took, after one fault was injected, to
// make each kind of progress again. A negative duration means no progress
// of that kind was seen after the fault.
type Recovery struct {
	Fault  Fault
	Submit time.Duration // until the next acknowledged submission
	Finish time.Duration // until the next job reached a terminal state
}

// Recoveries measures every fault: the next acknowledgement from the
// ledger's times, the next terminal transition from updated_at of the
// terminal jobs (the database clock of the same machine).
func Recoveries(ctx context.Context, db *pgxpool.Pool, faults []Fault, acks []time.Time) ([]Recovery, error) {
	out := make([]Recovery, 0, len(faults))
	for _, f := range faults {
		r := Recovery{Fault: f, Submit: -1, Finish: -1}
		if i, _ := slices.BinarySearchFunc(acks, f.At, func(a, t time.Time) int { return a.Compare(t) }); i < len(acks) {
			r.Submit = acks[i].Sub(f.At)
		}
		var next *time.Time
		if err := db.QueryRow(ctx, `SELECT min(updated_at) FROM etl_job_records
			WHERE job_status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND updated_at > $1`, f.At).Scan(&next); err != nil {
			return nil, fmt.Errorf("recovery of a fault: %w", err)
		}
		if next != nil {
			r.Finish = next.Sub(f.At)
		}
		out = append(out, r)
	}
	return out, nil
}

// RecoveryTable is one line per fault kind: count, submit and finish
// recovery p50/max, and harness errors.
func RecoveryTable(rs []Recovery) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s %6s %22s %22s %7s\n", "fault", "count", "submit p50/max", "finish p50/max", "errors")
	var allS, allF []time.Duration
	total, errs := 0, 0
	for _, k := range AllFaults {
		var s, f []time.Duration
		n, e := 0, 0
		for _, r := range rs {
			if r.Fault.Kind != k {
				continue
			}
			n++
			if r.Fault.Err != nil {
				e++
			}
			if r.Submit >= 0 {
				s = append(s, r.Submit)
			}
			if r.Finish >= 0 {
				f = append(f, r.Finish)
			}
		}
		allS, allF = append(allS, s...), append(allF, f...)
		total, errs = total+n, errs+e
		fmt.Fprintf(&b, "%-22s %6d %22s %22s %7d\n", k, n, p50Max(s), p50Max(f), e)
	}
	fmt.Fprintf(&b, "%-22s %6d %22s %22s %7d\n", "all", total, p50Max(allS), p50Max(allF), errs)
	return b.String()
}

func p50Max(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("%s / %s", s[(len(s)-1)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

// Sample is one reading of a process's /metrics.
type Sample struct {
	At         time.Time
	RSS        float64 // process_resident_memory_bytes
	Goroutines float64 // go_goroutines
	Start      int     // which start of the process (1 = first) it was
}

// Sampler reads RSS and goroutine counts of every product process from
// their Prometheus endpoints. Safe for concurrent use.
type Sampler struct {
	sys     *System
	client  *http.Client
	mu      sync.Mutex
	samples map[string][]Sample
}

// NewSampler returns a sampler of sys's processes.
func NewSampler(sys *System) *Sampler {
	return &Sampler{sys: sys, client: &http.Client{Timeout: 2 * time.Second}, samples: map[string][]Sample{}}
}

// SampleOnce reads every process once; a process that does not answer is
// skipped.
func (s *Sampler) SampleOnce(ctx context.Context) {
	for _, p := range s.sys.Processes() {
		base := s.sys.MetricsURLs()[p.Name]
		smp, err := s.read(ctx, base+"/metrics")
		if err != nil {
			continue
		}
		smp.Start = p.Stats().Starts
		s.mu.Lock()
		s.samples[p.Name] = append(s.samples[p.Name], smp)
		s.mu.Unlock()
	}
}

// Run samples every period until ctx ends.
func (s *Sampler) Run(ctx context.Context, period time.Duration) {
	for sleep(ctx, period) {
		s.SampleOnce(ctx)
	}
}

func (s *Sampler) read(ctx context.Context, url string) (Sample, error) {
	smp := Sample{At: time.Now(), RSS: -1, Goroutines: -1}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return smp, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return smp, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return smp, fmt.Errorf("metrics: status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "process_resident_memory_bytes":
			smp.RSS, _ = strconv.ParseFloat(value, 64)
		case "go_goroutines":
			smp.Goroutines, _ = strconv.ParseFloat(value, 64)
		}
	}
	if smp.RSS < 0 || smp.Goroutines < 0 {
		return smp, fmt.Errorf("metrics: no process_resident_memory_bytes or go_goroutines")
	}
	return smp, sc.Err()
}

// Table is one line per process: starts, RSS and goroutines at the first
// and last sample and their maxima. A process that restarted shows its
// last start's first sample as "start" after a '*'.
func (s *Sampler) Table() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %6s %8s %24s %8s %24s\n", "process", "starts", "samples", "RSS MiB first/last/max", "", "goroutines first/last/max")
	for _, p := range s.sys.Processes() {
		ss := s.samples[p.Name]
		if len(ss) == 0 {
			fmt.Fprintf(&b, "%-10s %6d %8d %24s %8s %24s\n", p.Name, p.Stats().Starts, 0, "-", "", "-")
			continue
		}
		first, last := ss[0], ss[len(ss)-1]
		mark := ""
		if first.Start != last.Start {
			// Compare like with like: the first sample of the last start.
			mark = "*"
			for _, x := range ss {
				if x.Start == last.Start {
					first = x
					break
				}
			}
		}
		var maxRSS, maxG float64
		for _, x := range ss {
			maxRSS, maxG = max(maxRSS, x.RSS), max(maxG, x.Goroutines)
		}
		fmt.Fprintf(&b, "%-10s %6d %8d %24s %8s %24s\n", p.Name, p.Stats().Starts, len(ss),
			fmt.Sprintf("%s%.1f/%.1f/%.1f", mark, first.RSS/(1<<20), last.RSS/(1<<20), maxRSS/(1<<20)), "",
			fmt.Sprintf("%s%.0f/%.0f/%.0f", mark, first.Goroutines, last.Goroutines, maxG))
	}
	return b.String()
}

// WriteFile writes lines to path (the run directory's detail files).
func WriteFile(path string, lines []string) error {
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}
