package pg

// InReadCommittedForTest is inReadCommitted (pooler_test.go).
var InReadCommittedForTest = inReadCommitted
