package config

import (
	"errors"
	"net"
	"net/url"
	"strings"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// redactedValue is the provenance value of the setting named env: database
// and NATS server settings are described without their secrets, anything
// else as it is.
func redactedValue(env, v string) string {
	switch {
	case strings.HasSuffix(env, "DATABASE_URL"), strings.HasSuffix(env, "DATABASE_DIRECT_URL"):
		return pg.RedactURL(v)
	case strings.HasSuffix(env, "NATS_URL"):
		return RedactNATSURL(v)
	}
	return v
}

// RedactNATSURL describes NATS_URL (one server URL or a comma-separated list)
// without secrets. It reads the list as nats.go does (split on commas, trim
// spaces, skip empty entries, nats:// when no scheme is given, the scheme's
// default port when none is given) and shows each server as
// scheme://host:port. A token (nats://TOKEN@host) becomes xxxxx@, a password
// (nats://user:PASSWORD@host) user:xxxxx@; paths, queries and fragments are
// dropped. An unparseable list gives "(unparseable)", an empty one "".
func RedactNATSURL(s string) string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		raw := strings.TrimSpace(part)
		if raw == "" {
			continue
		}
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" {
			return pg.Unparseable
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"ws": "80", "wss": "443"}[u.Scheme]
			if port == "" {
				port = "4222"
			}
		}
		var auth string
		if u.User != nil {
			auth = "xxxxx@"
			if _, ok := u.User.Password(); ok {
				auth = u.User.Username() + ":xxxxx@"
			}
		}
		out = append(out, u.Scheme+"://"+auth+net.JoinHostPort(u.Hostname(), port))
	}
	return strings.Join(out, ",")
}

// natsSecrets lists the tokens and passwords in a NATS_URL value.
func natsSecrets(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		raw := strings.TrimSpace(part)
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil || u.User == nil {
			continue
		}
		secret, ok := u.User.Password()
		if !ok {
			secret = u.User.Username()
		}
		if secret != "" {
			out = append(out, secret, url.QueryEscape(secret), url.PathEscape(secret))
		}
	}
	return out
}

// redactError is err's text with the database settings' secrets handled as
// pg.RedactError does and the NATS tokens and passwords replaced as well.
func redactError(err error, databaseURL, natsURL string, more ...string) string {
	msg := pg.RedactError(err, databaseURL, natsSecrets(natsURL)...)
	for _, u := range more { // MIGHTYETL_DATABASE_DIRECT_URL
		if u != "" && msg != "" {
			msg = pg.RedactError(errors.New(msg), u)
		}
	}
	return msg
}

// RedactError returns err's text for a start-up message, without the secrets
// of the worker's DATABASE_URL and NATS_URL (see pg.RedactError). A nil err
// gives "".
func (w Worker) RedactError(err error) string {
	return redactError(err, w.DatabaseURL, w.NATS.URL, w.Database.DirectURL)
}

// RedactError returns err's text for a start-up message, without the secrets
// of the intake's DATABASE_URL and NATS_URL (see pg.RedactError). A nil err
// gives "".
func (c Intake) RedactError(err error) string {
	return redactError(err, c.DatabaseURL, c.NATS.URL, c.Database.DirectURL)
}
