package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mightyetl/mightyetl/internal/buildinfo"
	"github.com/mightyetl/mightyetl/internal/metrics"
)

// registerBuildInfo exports the running binary's build (internal/buildinfo)
// as mightyetl_build_info on reg.
func registerBuildInfo(reg prometheus.Registerer) {
	b := buildinfo.Read()
	metrics.RegisterBuildInfo(reg, b.Version, b.Commit, b.GoVersion)
}
