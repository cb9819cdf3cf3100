package pg

// The statements of OpsClaimableByOwner (ops_owners_test.go pins their plans).
const (
	OpsClaimableCountSQL  = opsClaimableCountSQL
	OpsClaimableHeadSQL   = opsClaimableHeadSQL
	OpsClaimableSampleSQL = opsClaimableSampleSQL
	OpsOwnerDetailSQL     = opsOwnerDetailSQL
	OpsClaimOwnersSQL     = opsClaimOwnersSQL
)
