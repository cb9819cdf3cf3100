package pg

// PruneTerminalJobsSQL is prune's statement, for the lineage guard's
// isolation tests (prune_isolation_test.go): $1 the window in microseconds,
// $2 the batch limit.
const PruneTerminalJobsSQL = pruneTerminalJobsSQL
