package pg

import (
	"crypto/tls"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unparseable stands in for database settings that pgconn cannot parse: such
// a string is never printed, since no parser can say where its password is.
const Unparseable = "(unparseable)"

// RedactURL describes the database settings in databaseURL for logs and
// messages without any secret. It parses them as the driver does
// (pgconn.ParseConfig: a postgres:// URL or a keyword/value string, completed
// by the PG* environment variables and the passfile) and shows only
// "host=... port=... user=... database=... sslmode=...", with several hosts
// as host=h1:p1,h2:p2. Passwords, sslpassword, the passfile, key paths and
// every other parameter are left out; settings that do not parse give
// Unparseable. Safe for concurrent use.
func RedactURL(databaseURL string) string {
	cfg, err := pgconn.ParseConfig(databaseURL)
	if err != nil {
		return Unparseable
	}
	type target struct {
		host string
		port uint16
		tls  []*tls.Config
	}
	var targets []*target
	add := func(host string, port uint16, t *tls.Config) {
		for _, x := range targets {
			if x.host == host && x.port == port {
				x.tls = append(x.tls, t)
				return
			}
		}
		targets = append(targets, &target{host: host, port: port, tls: []*tls.Config{t}})
	}
	add(cfg.Host, cfg.Port, cfg.TLSConfig)
	for _, fb := range cfg.Fallbacks {
		add(fb.Host, fb.Port, fb.TLSConfig)
	}
	var b strings.Builder
	if len(targets) == 1 {
		b.WriteString("host=" + quoteValue(targets[0].host) + " port=" + strconv.Itoa(int(targets[0].port)))
	} else {
		hosts := make([]string, len(targets))
		for i, x := range targets {
			hosts[i] = x.host + ":" + strconv.Itoa(int(x.port))
			if strings.HasPrefix(x.host, "/") { // a socket directory has no port of its own
				hosts[i] = x.host
			}
		}
		b.WriteString("host=" + quoteValue(strings.Join(hosts, ",")))
	}
	b.WriteString(" user=" + quoteValue(cfg.User) + " database=" + quoteValue(cfg.Database))
	b.WriteString(" sslmode=" + sslMode(targets[0].tls))
	return b.String()
}

// sslMode names the libpq sslmode that produced one host's list of TLS
// configurations (pgconn tries them in order).
func sslMode(list []*tls.Config) string {
	first := list[0]
	switch {
	case first == nil && len(list) > 1:
		return "allow"
	case first == nil:
		return "disable"
	case len(list) > 1:
		return "prefer"
	case !first.InsecureSkipVerify:
		return "verify-full"
	case first.VerifyPeerCertificate != nil:
		return "verify-ca"
	}
	return "require"
}

// quoteValue quotes a value for a keyword/value description when it is
// empty or holds a space or a quote, as libpq would.
func quoteValue(v string) string {
	if v != "" && !strings.ContainsAny(v, ` '\`) {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// RedactError returns err's text for a start-up message about the database
// settings databaseURL, without their secrets. An error from parsing the
// settings keeps the context that wraps it but not the parser's message,
// which may quote the settings (pgconn redacts those only on a best-effort
// basis). Any other error (pgconn's connect errors name host, user and
// database, not the password) is shown with the password the settings
// resolve to, and each of more (other secrets such as NATS tokens), replaced
// by "xxxxx", as a second line of defence; secrets shorter than 4 bytes are
// left alone there, since replacing them would garble the message. A nil err
// gives "".
func RedactError(err error, databaseURL string, more ...string) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	var pce *pgconn.ParseConfigError
	if errors.As(err, &pce) {
		msg = strings.TrimSuffix(msg, pce.Error()) + "cannot parse the database settings (not shown: they may hold a password)"
	}
	for _, secret := range append(secretsOf(databaseURL), more...) {
		if len(secret) >= 4 {
			msg = strings.ReplaceAll(msg, secret, "xxxxx")
		}
	}
	return msg
}

// secretsOf lists the password databaseURL resolves to (pgconn also takes
// it from PGPASSWORD or the passfile). The sslpassword only decrypts a key
// file while parsing, so it can reach a parse error but no connect error.
func secretsOf(databaseURL string) []string {
	cfg, err := pgconn.ParseConfig(databaseURL)
	if err != nil || cfg.Password == "" {
		return nil
	}
	return []string{cfg.Password}
}
