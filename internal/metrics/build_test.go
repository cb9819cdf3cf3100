package metrics_test

import (
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestBuildInfo(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics.RegisterBuildInfo(reg, "v1.2.3", "0123456789abcdef0123456789abcdef01234567", "go1.26.8")
	want := `
# HELP mightyetl_build_info The running build (value 1): module version, VCS commit and Go version.
# TYPE mightyetl_build_info gauge
mightyetl_build_info{commit="0123456789abcdef0123456789abcdef01234567",goversion="go1.26.8",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "mightyetl_build_info"); err != nil {
		t.Fatal(err)
	}
}
