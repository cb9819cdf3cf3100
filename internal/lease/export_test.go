package lease

// The lease statements, for plan tests (plans_test.go).
var (
	ClaimSQL   = claimSQL
	RenewSQL   = renewSQL
	SucceedSQL = succeedSQL
)
