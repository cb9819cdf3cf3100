package app

import (
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/outbox"
)

// RelayListen sets how the outbox relay of o is woken, from the database
// settings d of a process whose pools use databaseURL: LISTEN on the pools'
// own connection settings without a transaction pooler; LISTEN on
// d.DirectURL (as application_name appName) when set; otherwise, with
// MIGHTYETL_DATABASE_POOLER=transaction and no direct URL, no LISTEN at
// all: the relay polls (its poll interval, and Wake from this process's own
// commits), which it says in one log line at start. A direct URL that does
// not parse is an error (its text never holds the URL).
func RelayListen(o outbox.Options, d config.Database, databaseURL, appName string, log *slog.Logger) (outbox.Options, error) {
	switch u := d.ListenURL(databaseURL); u {
	case databaseURL:
		return o, nil
	case "":
		o.PollOnly = true
		log.Info("outbox relay polling only: MIGHTYETL_DATABASE_POOLER=transaction and no MIGHTYETL_DATABASE_DIRECT_URL for its LISTEN connection",
			"poll_interval", o.WithDefaults().PollInterval.String())
		return o, nil
	default:
		cfg, err := pgx.ParseConfig(u)
		if err != nil {
			return o, fmt.Errorf("MIGHTYETL_DATABASE_DIRECT_URL: cannot parse the database settings (not shown: they may hold a password)")
		}
		if appName != "" {
			cfg.RuntimeParams["application_name"] = appName
		}
		o.ListenConnConfig = cfg
		return o, nil
	}
}
