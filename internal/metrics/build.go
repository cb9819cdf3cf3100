package metrics

import "github.com/prometheus/client_golang/prometheus"

// RegisterBuildInfo registers mightyetl_build_info{version,commit,goversion},
// a gauge fixed at 1 that identifies the running build (the values of
// internal/buildinfo: a module version or the -ldflags override, the full VCS
// commit or "unknown", the Go toolchain). Every process registry carries it
// (app.NewRegistry), so a query can join any series to the build that made it.
func RegisterBuildInfo(reg prometheus.Registerer, version, commit, goVersion string) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mightyetl_build_info",
		Help: "The running build (value 1): module version, VCS commit and Go version.",
	}, []string{"version", "commit", "goversion"})
	g.WithLabelValues(version, commit, goVersion).Set(1)
	reg.MustRegister(g)
}
