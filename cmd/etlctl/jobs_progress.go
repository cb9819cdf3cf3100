package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/mightyetl/mightyetl/client"
)

// progressSummary is the line `jobs get` (and `wait`'s final state) prints
// under a large job's table row: records done (loaded or skipped as bad)
// of the total when known, loaded, bad, chunks, the failed record, the last checkpoint and the
// payload size.
func progressSummary(p *client.Progress) string {
	var b strings.Builder
	b.WriteString("progress: ")
	done := p.RecordsLoaded + p.BadRecords
	if p.RecordsTotal != nil && *p.RecordsTotal > 0 {
		fmt.Fprintf(&b, "%d / %d records done (%.1f%%): ", done, *p.RecordsTotal, 100*float64(done)/float64(*p.RecordsTotal))
	}
	fmt.Fprintf(&b, "%d loaded, %d bad, %d chunks", p.RecordsLoaded, p.BadRecords, p.ChunksDone)
	if p.FailedRecordNumber != nil {
		fmt.Fprintf(&b, ", failed at record %d", *p.FailedRecordNumber)
	}
	if p.LastCheckpointAt != nil {
		fmt.Fprintf(&b, ", last checkpoint %s", p.LastCheckpointAt.UTC().Format(time.RFC3339))
	} else {
		b.WriteString(", no checkpoint yet")
	}
	fmt.Fprintf(&b, ", payload %s", humanBytes(p.PayloadBytes))
	return b.String()
}
