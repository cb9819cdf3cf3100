// Package faultinject runs the real mightyETL binaries (cmd/intake, three
// cmd/worker processes, cmd/etlctl migrate) against a private PostgreSQL
// cluster and a private NATS server, submits jobs over HTTP and NATS while
// it injects faults, and then proves the system's end-state invariants with
// SQL and a read of the lifecycle stream.
//
// The parts are reusable on their own:
//
//   - Postgres: a private cluster (initdb + pg_ctl on a free port) that can
//     be stopped with -m immediate and started again (crash recovery).
//   - NATSServer: a private nats-server -js with its own store directory.
//   - NATSCluster: private nats-server -js nodes routed into one JetStream
//     cluster, each killed (SIGKILL) and started again on its own store
//     (Config.NATSNodes; the node-loss test).
//   - Proxy: a TCP proxy for the workers' database connections that can add
//     latency and reset every connection (RST, not FIN).
//   - Process: a supervised child process (SIGKILL, restart, readiness).
//   - System: the whole deployment wired from the above.
//   - Producers: HTTP and NATS submitters that retry with the same key and
//     body until acknowledged, plus owners that cancel running jobs.
//   - Injector: the fault schedule and the recovery times it measures.
//   - Checker: the invariants (see docs/reliability.md).
//   - LargeJob, CheckLargeJobs, VisibilityReader: large (chunked) jobs
//     uploaded over HTTP, the proof from the database that each loaded its
//     records' rows once and all visible (none for a cancelled one), and a
//     reader of processed_data_visible that must never see part of one
//     (the large-job test, Config.WorkerEnv for small chunks).
//   - Release, Deployment, Frontend: the previous release (the commit in
//     compat/previous-release) built from git, and a fleet whose intake
//     (behind a draining load balancer) and workers are replaced one at a
//     time by another build's (the version-skew test).
//
// Nothing here prints a payload, key or id: the test output is counts only.
// Details of a violation (job ids, the fault that preceded it) go to a file
// in the run directory, which is kept when the test fails.
package faultinject
