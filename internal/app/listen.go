package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/mightyetl/mightyetl/internal/config"
)

// Listen binds a TCP listener on addr for the setting named setting (as
// config.HTTPAddrSetting and config.MetricsAddrSetting name them). Its
// error is one line naming the address and the setting, wrapping the
// system's cause (errors.Is(err, syscall.EADDRINUSE) holds for a taken
// port): "listen 127.0.0.1:8080 (MIGHTYETL_HTTP_ADDR / --http-addr):
// address already in use".
func Listen(ctx context.Context, addr, setting string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err == nil {
		return ln, nil
	}
	// Drop the "listen tcp ADDR: bind:" prefixes the line restates.
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		err = oe.Err
		var se *os.SyscallError
		if errors.As(err, &se) && se.Err != nil {
			err = se.Err
		}
	}
	return nil, fmt.Errorf("listen %s (%s): %w", addr, setting, err)
}

// ListenHTTP binds the intake's HTTP listener on cfg.HTTPAddr (see Listen).
func ListenHTTP(ctx context.Context, cfg config.Intake) (net.Listener, error) {
	return Listen(ctx, cfg.HTTPAddr, config.HTTPAddrSetting)
}

// ListenMetrics binds the worker's metrics and health listener on
// cfg.MetricsAddr (see Listen).
func ListenMetrics(ctx context.Context, cfg config.Worker) (net.Listener, error) {
	return Listen(ctx, cfg.MetricsAddr, config.MetricsAddrSetting)
}
