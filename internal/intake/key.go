package intake

import (
	"crypto/sha256"
	"encoding/hex"
)

// Idempotency-key length bounds; the alphabet is [A-Za-z0-9._:-].
const (
	MinKeyLength = 16
	MaxKeyLength = 128
)

// ValidKey reports whether key is a normalised idempotency key: 16 to 128
// characters of [A-Za-z0-9._:-].
func ValidKey(key string) bool {
	if len(key) < MinKeyLength || len(key) > MaxKeyLength {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

func sha256Hex(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// SubmissionKeyHash is the stored submission_key_hash of a durable-job key:
// hex sha256("mightyetl:durable-job-submission:v1:" + scope + ":" + key).
func SubmissionKeyHash(scope, key string) string {
	return sha256Hex("mightyetl:durable-job-submission:v1:", scope, ":", key)
}

// CancellationKeyHash is the stored cancellation_key_hash: hex
// sha256("mightyetl:durable-job-cancellation:v1:" + scope + ":" + jobID + ":" + key).
func CancellationKeyHash(scope, jobID, key string) string {
	return sha256Hex("mightyetl:durable-job-cancellation:v1:", scope, ":", jobID, ":", key)
}

// ReplayKeyHash is the submission_key_hash of a replay job: hex
// sha256("mightyetl:durable-job-replay:v1:" + scope + ":" + key). It is
// principal-scoped and domain-separated from submission keys, so a replay key
// never collides with a submission key of the same value.
func ReplayKeyHash(scope, key string) string {
	return sha256Hex("mightyetl:durable-job-replay:v1:", scope, ":", key)
}

// OperatorReplayKeyHash is the submission_key_hash of an operator's replay
// job: hex sha256("mightyetl:operator-replay:v1:" + operatorScope + ":" +
// key). It is scoped by the operator (two operators' keys never meet) and
// domain-separated from the owner's submission and replay keys; the job is
// stored under the source's owner, so one key makes at most one job per
// owner.
func OperatorReplayKeyHash(operatorScope, key string) string {
	return sha256Hex("mightyetl:operator-replay:v1:", operatorScope, ":", key)
}

// SyncProcessKeyHash is the ledger idempotency_key_hash of the synchronous
// path: hex sha256("mightyetl:sync-process:v1:" + scope + ":" + key).
func SyncProcessKeyHash(scope, key string) string {
	return sha256Hex("mightyetl:sync-process:v1:", scope, ":", key)
}

// RequestDigest is the hex SHA-256 of the exact body bytes.
func RequestDigest(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}
