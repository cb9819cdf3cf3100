package lease

// FairClaimSQL is the fair claim statement, for plan tests.
var FairClaimSQL = fairClaimSQL
