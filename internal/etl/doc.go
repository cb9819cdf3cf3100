// Package etl is the record transform and the target loader of mightyETL.
//
// It has three parts, used by both the synchronous path (POST /api/etl/process) and the
// worker:
//
//   - [ParseBatch] validates an untrusted request body: a JSON array of flat records, each a
//     JSON object with a textual "id". It rejects anything the transform could not encode
//     unambiguously, so that "the whole batch is validated and transformed before any database
//     write" holds.
//   - [Transform] turns records into rows: every key upper-cased, NAME upper-cased, EMAIL
//     lower-cased, AMOUNT rounded half-up to two decimal places, and each row's data the
//     concatenation of "KEY:value," in input order. [Process] is ParseBatch followed by
//     Transform. Both are pure, deterministic and safe for concurrent use.
//   - [LoadRows] writes rows into processed_data inside the caller's transaction.
//
// Large (chunked) loads use the one-record form: [AppendRecord] is Process of a one-record
// batch, appending the row's text and JSON to caller buffers (the common flat record in one
// pass without allocation), and [CopyRows] holds one job's rows as binary COPY tuples built
// as the records are transformed, loaded by one COPY in the caller's transaction.
//
// Rejections are reported as *[Error], whose Code is one of [codes.InvalidJSON],
// [codes.InvalidRecord] and [codes.BatchTooLarge]; its Error text never contains payload data.
// Only httpapi turns a code into problem+json.
//
// Precedence of rejections: a body that is not well-formed JSON (or breaks the duplicate-member
// or nesting rules) is etl_invalid_json, and too many records is etl_batch_too_large, whatever
// the records contain; only a well-formed batch within the record limit reports the FIRST
// invalid record as etl_invalid_record.
package etl
