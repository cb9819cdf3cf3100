package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// printTable writes every result, then the ratios against peers.
func printTable(w io.Writer, rep *Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SYSTEM\tSCENARIO\tVARIANT\tMETRIC\tVALUE")
	for _, r := range append(append([]Result(nil), rep.Results...), rep.Peers...) {
		keys := make([]string, 0, len(r.Metrics))
		for k := range r.Metrics {
			if strings.HasSuffix(k, "_samples") || strings.HasSuffix(k, "_mean_ms") {
				continue
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.System, r.Scenario, r.Variant, k, num(r.Metrics[k]))
		}
		for _, n := range r.Notes {
			fmt.Fprintf(tw, "%s\t%s\t%s\tnote\t%s\n", r.System, r.Scenario, r.Variant, n)
		}
	}
	_ = tw.Flush()
	printLockProbeTable(w, rep.Results)
	if len(rep.Ratios) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SCENARIO\tMETRIC\tMIGHTYETL\tPEER\tRATIO mightyETL/peer\tBETTER")
		for _, r := range rep.Ratios {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s %s\t%.2fx\t%s\n", r.Scenario, r.Metric, num(r.Mighty), r.PeerName, num(r.Peer), r.Ratio, r.better())
		}
		_ = tw.Flush()
	}
	for _, e := range rep.Errors {
		fmt.Fprintf(w, "ERROR %s\n", e)
	}
}

func num(v float64) string {
	switch {
	case v == float64(int64(v)) && (v >= 1000 || v <= -1000):
		return strconv.FormatInt(int64(v), 10)
	case v >= 100 || v <= -100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

// find returns the first result of scenario whose variant starts with prefix.
func find(rs []Result, scenario, prefix string) (Result, bool) {
	for _, r := range rs {
		if r.Scenario == scenario && strings.HasPrefix(r.Variant, prefix) {
			return r, true
		}
	}
	return Result{}, false
}

// ratios pairs mightyETL figures with the peer's from the same run.
func ratios(mine, peers []Result) []Ratio {
	var out []Ratio
	add := func(scenario, mv, pv, metric, dir string) {
		m, ok1 := find(mine, scenario, mv)
		p, ok2 := find(peers, scenario, pv)
		if !ok1 || !ok2 {
			return
		}
		a, okA := m.Metrics[metric]
		b, okB := p.Metrics[metric]
		if !okA || !okB || b == 0 {
			return
		}
		label := metric
		if mv != "" || pv != "" {
			label = fmt.Sprintf("%s [%s vs %s]", metric, strings.TrimSuffix(mv, "/"), pv)
		}
		out = append(out, Ratio{Scenario: scenario, Metric: label, Mighty: a, Peer: b, PeerName: p.System, Ratio: a / b, Direction: dir})
	}
	// Burndown: the default variant at the peer's n; with
	// -burndown-claim-owners, each of its runs in run order (the fair and
	// the first-come first-served claim against the same peer run).
	if p, ok := find(peers, "burndown", ""); ok {
		mv := "default/" + p.Variant
		var runs []Result
		for _, r := range mine {
			if r.Scenario == "burndown" && strings.HasPrefix(r.Variant, mv+"/claim-owners=") {
				runs = append(runs, r)
			}
		}
		if len(runs) == 0 {
			add("burndown", mv, "", "jobs_per_s", "higher")
			add("burndown", mv, "", "wal_bytes_per_job", "lower")
			add("burndown", mv, "", "wal_run_bytes_per_job", "lower")
		}
		for i, r := range runs {
			for _, m := range [][2]string{{"jobs_per_s", "higher"}, {"wal_bytes_per_job", "lower"}} {
				a, okA := r.Metrics[m[0]]
				b, okB := p.Metrics[m[0]]
				if okA && okB && b > 0 {
					out = append(out, Ratio{Scenario: "burndown", Metric: fmt.Sprintf("%s [%s vs %s] (run %d of %d)", m[0], r.Variant, p.Variant, i+1, len(runs)),
						Mighty: a, Peer: b, PeerName: p.System, Ratio: a / b, Direction: m[1]})
				}
			}
		}
	}
	add("continuous", "", "", "jobs_per_s", "higher")
	for _, pair := range [][2]string{{"nats-announced", "tuned"}, {"nats-announced", "default"}, {"nats-relay", "tuned"}, {"poll-only", "poll-only"}} {
		add("pickup", pair[0], pair[1], "submit_to_start_p50_ms", "lower")
		add("pickup", pair[0], pair[1], "submit_to_start_p99_ms", "lower")
	}
	return out
}

// intakeRatios compares the intake-binary figures of one run: HTTP accepted/s
// against pgbench's single-row INSERT tps on the same server (the floor of
// one durable row per request), and JetStream intake against HTTP intake.
func intakeRatios(rs []Result) []Ratio {
	var out []Ratio
	add := func(variant, metric, baseVariant, baseMetric, baseName, label string, target float64) {
		a, ok1 := find(rs, "intake-binary", variant)
		b, ok2 := find(rs, "intake-binary", baseVariant)
		if !ok1 || !ok2 {
			return
		}
		x, okX := a.Metrics[metric]
		y, okY := b.Metrics[baseMetric]
		if !okX || !okY || y == 0 {
			return
		}
		out = append(out, Ratio{Scenario: "intake-binary", Metric: label, Mighty: x, Peer: y, PeerName: baseName,
			Ratio: x / y, Direction: "higher", Target: target})
	}
	add("http", "accepted_per_s", "insert-autocommit", "tps", "pgbench", "accepted_per_s / tps [http vs pgbench insert]", 0.6)
	add("jetstream", "jobs_per_s", "http", "accepted_per_s", "http", "jobs_per_s / accepted_per_s [jetstream vs http]", 1.0)
	return out
}

// better is the BETTER column: the direction, and the target with whether
// this run met it.
func (r Ratio) better() string {
	if r.Target == 0 {
		return r.Direction
	}
	op, met := ">=", r.Ratio >= r.Target
	if r.Direction == "lower" {
		op, met = "<=", r.Ratio <= r.Target
	}
	verdict := "met"
	if !met {
		verdict = "MISSED"
	}
	return fmt.Sprintf("%s (target %s %.2fx: %s)", r.Direction, op, r.Target, verdict)
}

// runRiverPeer runs bench/peers/river with `go run` in its own module
// directory against a sibling database "<bench db>_river" on the same server.
func runRiverPeer(ctx context.Context, o options) ([]Result, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return nil, err
	}
	riverURL, err := riverDatabaseURL(o)
	if err != nil {
		return nil, err
	}
	var scen []string
	for _, s := range o.Scenarios {
		if s == "burndown" || s == "continuous" || s == "pickup" {
			scen = append(scen, s)
		}
	}
	if len(scen) == 0 {
		return nil, nil
	}
	args := []string{"run", ".", "-database-url", riverURL, "-scenarios", strings.Join(scen, ","),
		"-n", strconv.Itoa(o.N), "-duration", o.Duration.String(), "-pickup-duration", o.PickupDuration.String(),
		"-rate", strconv.FormatFloat(o.Rate, 'f', -1, 64), "-max-workers", strconv.Itoa(o.Concurrency)}
	args = append(args, o.Feed.Args()...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = filepath.Join(root, "bench", "peers", "river")
	cmd.Stderr = os.Stderr
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	runErr := cmd.Run()
	var res []Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil && runErr == nil {
		return nil, fmt.Errorf("decode river peer output: %w", err)
	}
	if runErr != nil {
		return res, fmt.Errorf("river peer: %w", runErr)
	}
	return res, nil
}

// riverDatabaseURL is the River peer's database: "<bench db>_river" on the
// bench server.
func riverDatabaseURL(o options) (string, error) {
	cfg, err := pgx.ParseConfig(o.DatabaseURL)
	if err != nil {
		return "", err
	}
	return withDatabaseName(o.DatabaseURL, cfg.Database+"_river")
}

// withDatabaseName returns url with its database (path) replaced.
func withDatabaseName(url, name string) (string, error) {
	i := strings.Index(url, "://")
	if i < 0 {
		return "", fmt.Errorf("database url is not a URL")
	}
	rest := url[i+3:]
	slash := strings.IndexByte(rest, '/')
	query := ""
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		query = rest[q:]
		rest = rest[:q]
	}
	if slash >= 0 && slash < len(rest) {
		rest = rest[:slash]
	}
	return url[:i+3] + rest + "/" + name + query, nil
}

// source is the code a run measured: the commit and whether the tree held
// changes outside it. Every JSON result records both (Report.MarshalJSON),
// so a figure can always be traced to the code that produced it.
type source struct {
	Commit string `json:"commit"`
	Dirty  bool   `json:"dirty"`
}

// unknownCommit is recorded when neither the build nor git names the
// commit; such a result is also recorded as dirty, since nothing vouches
// for the tree.
const unknownCommit = "unknown"

// measuredSource is this process's source, found once, when the first
// result is written: the build's VCS stamp when the bench binary has one
// (`go build ./bench` in a checkout), else git in the module root, whose
// cmd/worker and cmd/intake the harness builds (`go run ./bench`, tests).
var measuredSource = sync.OnceValue(func() source {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if s, ok := sourceFromBuildInfo(bi); ok {
			return s
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if root, err := moduleRoot(ctx); err == nil {
		if s, err := sourceFromGit(ctx, root); err == nil {
			return s
		}
	}
	return source{Commit: unknownCommit, Dirty: true}
})

// sourceFromBuildInfo reads the vcs.revision and vcs.modified settings the
// go command stamps into a binary built in a checkout; ok is false unless
// both are there.
func sourceFromBuildInfo(bi *debug.BuildInfo) (s source, ok bool) {
	var haveRev, haveMod bool
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			s.Commit, haveRev = kv.Value, kv.Value != ""
		case "vcs.modified":
			s.Dirty, haveMod = kv.Value == "true", true
		}
	}
	return s, haveRev && haveMod
}

// sourceFromGit is HEAD of the git work tree at dir, dirty when `git status
// --porcelain` lists anything (untracked files included, as the go
// command's vcs.modified does).
func sourceFromGit(ctx context.Context, dir string) (source, error) {
	rev, err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return source{}, fmt.Errorf("git rev-parse HEAD: %w", err)
	}
	status, err := exec.CommandContext(ctx, "git", "-C", dir, "status", "--porcelain").Output()
	if err != nil {
		return source{}, fmt.Errorf("git status: %w", err)
	}
	return source{Commit: strings.TrimSpace(string(rev)), Dirty: len(bytes.TrimSpace(status)) > 0}, nil
}

// MarshalJSON writes the report with the commit it measured and its dirty
// flag ("commit", "dirty") ahead of its own fields.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report // no methods: no recursion
	s := measuredSource()
	return json.Marshal(struct {
		Commit string `json:"commit"`
		Dirty  bool   `json:"dirty"`
		plain
	}{s.Commit, s.Dirty, plain(r)})
}
