package pg

// CountOwnerPendingSQL is countOwnerPendingSQL (owners_test.go pins its
// plan).
const CountOwnerPendingSQL = countOwnerPendingSQL
