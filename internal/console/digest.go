package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// payloadDigestKeyLabel separates the payload tag key from every other use
// of MIGHTYETL_PRINCIPAL_HASH_KEY.
const payloadDigestKeyLabel = "console-payload-digest"

// PayloadDigestTagLen is the length of a payload digest tag in hex
// characters (48 bits).
const PayloadDigestTagLen = 12

// PayloadDigestKey is the key of payload digest tags derived from the
// principal hash key: HMAC-SHA-256(hashKey, "console-payload-digest"). The
// hash key itself never keys a tag.
func PayloadDigestKey(hashKey []byte) []byte {
	m := hmac.New(sha256.New, hashKey)
	m.Write([]byte(payloadDigestKeyLabel))
	return m.Sum(nil)
}

// PayloadDigestTag is what an operator sees of a job's stored payload
// digest (the SHA-256 of the request body): the first PayloadDigestTagLen
// hex characters of HMAC-SHA-256(key, digest), key from PayloadDigestKey.
// The same digest always gives the same tag, so two jobs with one payload
// show one tag; without the server's key a tag cannot be checked against a
// guessed payload, unlike a prefix of the digest itself.
func PayloadDigestTag(key, digest []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(digest)
	return hex.EncodeToString(m.Sum(nil))[:PayloadDigestTagLen]
}

// JobDetail is one job as the console and /api/ops show it: pg.OpsDetail
// with its RequestDigest cleared, and the digest's PayloadDigestTag.
type JobDetail struct {
	pg.OpsDetail
	// PayloadDigestTag is PayloadDigestTag of the stored request digest.
	PayloadDigestTag string
	// Progress is the load of a chunked job (pg.OpsJobProgress), nil for
	// any other kind and once the load's row is gone.
	Progress *pg.OpsProgress
}

// Detail reads one job (and a chunked job's load); pg.ErrNotFound when
// absent. The stored payload digest is returned only as its keyed tag
// (JobDetail).
func (c *Console) Detail(ctx context.Context, id uuid.UUID) (JobDetail, error) {
	d, err := pg.OpsJobDetail(ctx, c.opts.DB, id)
	if err != nil {
		return JobDetail{}, err
	}
	tag := PayloadDigestTag(c.digestKey, d.RequestDigest)
	d.RequestDigest = nil
	out := JobDetail{OpsDetail: d, PayloadDigestTag: tag}
	if d.Kind == pg.KindETLChunked {
		p, err := pg.OpsJobProgress(ctx, c.opts.DB, id)
		switch {
		case err == nil:
			out.Progress = &p
		case !errors.Is(err, pg.ErrNotFound):
			return JobDetail{}, err
		}
	}
	return out, nil
}
