package app

import "runtime/debug"

// GOGC defaults of the binaries, applied when the environment sets no GOGC
// (SetGCPercentDefault).
const (
	// IntakeGCPercent: the intake allocates per request (headers, body, a
	// job row) and keeps a small live heap, so at Go's default of 100 it
	// collects very often: over loopback HTTP at 32 clients (alternating
	// runs) 200 took about 14% off the intake's CPU per accepted request
	// (median 95 against 111 µs) for about 21 MB more peak RSS (87 against
	// 66 MB); 400 took 18% for 62 MB more.
	IntakeGCPercent = 200
	// WorkerGCPercent: a worker with thousands of slots has as many handler
	// goroutines, whose stacks every collection scans, and allocates per job
	// (claim rows, contexts, timers); at Go's default of 100 the collector
	// and its allocation assists took about a sixth of the worker's CPU in
	// the continuous bench. Alternating 30 s continuous runs (one inserter,
	// 2,000 slots): 100 fell behind its inserter (17,261 and 15,933 jobs/s,
	// backlog +580 and +2,169/s), 200 kept up (17,979 and 22,408 jobs/s,
	// backlog flat). docs/performance.md has the worker's RSS with it.
	WorkerGCPercent = 200
)

// SetGCPercentDefault sets the collector's target to percent unless the
// environment sets GOGC (the runtime has already applied that one,
// including "off").
func SetGCPercentDefault(getenv func(string) string, percent int) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(percent)
	}
}
