package app

import "runtime/debug"

// GOGC defaults of the binaries, applied only when the environment sets no
// GOGC (SetGCPercentDefault); a GOGC in the environment, "off" included,
// always wins. The measurements behind both values are in
// docs/performance.md ("Why these constants").
const (
	// IntakeGCPercent is cmd/intake's collector target. The intake
	// allocates per request and keeps a small live heap, so a higher target
	// trades some peak RSS for fewer collections.
	IntakeGCPercent = 200
	// WorkerGCPercent is cmd/worker's collector target. A worker with
	// thousands of slots has as many handler goroutines, whose stacks every
	// collection scans, and allocates per job, so a higher target trades
	// some RSS for fewer collections.
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
