package pg

// Test access to the console's statements (ops_plan_test.go).
var (
	OpsListSQL        = opsListSQL
	OpsDetailSQL      = opsDetailSQL
	OpsChildrenSQL    = opsChildrenSQL
	RecentOutcomesSQL = recentOutcomesSQL
	UUIDV7Floor       = uuidV7Floor
)

// OpsListArgs are the arguments OpsListJobs passes to opsListSQL for p
// (PENDING and RUNNING filters excluded: they read the active set).
func OpsListArgs(p OpsListParams) []any { return opsListArgs(p) }

// ConflictFreeInserts is how many inserts will still skip the plain INSERT
// after the last conflict (insertJobs).
func ConflictFreeInserts() int32 { return conflictFreeInserts.Load() }

// ConflictCooldown is conflictCooldown.
const ConflictCooldown = conflictCooldown

// DecodeDigest is decodeDigest.
func DecodeDigest(dst []byte, h string) ([]byte, error) { return decodeDigest(dst, h) }

// The lookups of a (principal, key) pair (migration 00015's index).
var (
	ExistingJobsSQL = existingJobsSQL
	ReplayByKeySQL  = replayByKeySQL
)

// ListJobsSQL is ListJobs's statement and arguments.
func ListJobsSQL(p ListParams) (string, []any) { return listJobsSQL(p) }
