// Package chunked loads large jobs (kind etl_chunked, issue 32) chunk by
// chunk under the exact lease (design.md invariant 11).
//
// A chunked job's payload is an upload's logical byte stream (its committed
// parts 1..N, pg.StreamPayload). The Reader cuts that stream into records,
// JSON Lines (one JSON object per non-empty line; record number = line
// number, counting every line) or one JSON array (record number = element
// index), from a checkpoint position, holding at most one record of at most
// the chunk byte bound (plus one read) in memory. The Loader transforms each
// record with the transform of etl_records jobs (etl.AppendRecord, which is
// etl.Process of the one record) straight into binary COPY tuples
// (etl.CopyRows), reading and transforming the next chunk on a goroutine of
// its own while the previous one commits, and commits the chunks in payload
// order, each chunk's rows, its skipped records and the job's checkpoint in
// one short transaction whose first statement is the fenced lock of the exact
// lease (lease.FenceChunk) and whose last re-checks it with the checkpoint
// (lease.CheckpointChunk): a worker that lost its lease commits nothing, and
// the next claimant resumes after the last committed chunk, so no record is
// loaded twice. The rows stay hidden from processed_data_visible until the
// job's fenced success (lease.SucceedChunked) makes the load VISIBLE. Purge
// removes a failed or cancelled job's rows in bounded batches.
package chunked
