package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"

	"github.com/google/uuid"
)

// Operator is the authenticated operator of a request.
type Operator struct {
	// ScopeHash is the operator's principal scope hash (never shown whole,
	// never logged; recorded on the lifecycle event of its cancellations).
	ScopeHash string
}

type operatorKey struct{}

// WithOperator returns ctx carrying op.
func WithOperator(ctx context.Context, op Operator) context.Context {
	return context.WithValue(ctx, operatorKey{}, op)
}

func operatorFrom(ctx context.Context) (Operator, bool) {
	op, ok := ctx.Value(operatorKey{}).(Operator)
	return op, ok && op.ScopeHash != ""
}

// CSRFToken is the operator's form token: an HMAC of its scope hash under
// the server's key, domain-separated. Forms carry it; POSTs must return it.
func (c *Console) CSRFToken(op Operator) string {
	m := hmac.New(sha256.New, c.opts.HashKey)
	m.Write([]byte("mightyetl:console-csrf:v1:" + op.ScopeHash))
	return hex.EncodeToString(m.Sum(nil))
}

func (c *Console) validToken(op Operator, token string) bool {
	return hmac.Equal([]byte(c.CSRFToken(op)), []byte(token))
}

// operatorCancellationKeyHash is the cancellation_key_hash of an
// operator's cancellation, domain-separated from the owner's key hashes.
func operatorCancellationKeyHash(op Operator, id uuid.UUID) string {
	s := sha256.Sum256([]byte("mightyetl:operator-cancellation:v1:" + op.ScopeHash + ":" + id.String()))
	return hex.EncodeToString(s[:])
}
