package intake

// Request body limits (MIGHTYETL_MAX_PAYLOAD_BYTES), shared by every part
// that reads a submission's body (config, httpapi, console) so they cannot
// disagree.
const (
	// DefaultMaxPayloadBytes is the default request body limit: 1 MiB.
	DefaultMaxPayloadBytes = 1 << 20
	// MaxPayloadBytesCeiling is the highest accepted limit: 64 MiB.
	MaxPayloadBytesCeiling = 64 << 20
)
