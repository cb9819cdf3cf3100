// Package app assembles mightyETL's processes: configuration → database
// pools → metrics → HTTP server → NATS (request consumer, outbox relay) for
// the intake, and the same for the worker. The binaries under cmd/ (and
// `etlctl dev`, which runs both in one process) call it, so each process is
// wired once. The parts themselves (httpapi, events, outbox, worker) know
// nothing of configuration files, flags or each other's start order.
//
// Every assembled process follows the startstop shape: Start returns after
// its start-up checks and runs in the background; Stop stops the parts in
// reverse start order, returns ctx.Err() when the caller's context ends,
// and is safe to call twice.
package app
