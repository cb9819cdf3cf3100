package app

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/mightyetl/mightyetl/internal/buildinfo"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// labelsOf returns the labels of the one series of the metric name in reg,
// failing unless there is exactly one.
func labelsOf(t *testing.T, reg prometheus.Gatherer, name string) map[string]string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		if len(mf.GetMetric()) != 1 {
			t.Fatalf("%s has %d series, want 1", name, len(mf.GetMetric()))
		}
		m := mf.GetMetric()[0]
		if mf.GetType() == dto.MetricType_GAUGE && m.GetGauge().GetValue() != 1 {
			t.Fatalf("%s = %v, want 1", name, m.GetGauge().GetValue())
		}
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		return labels
	}
	t.Fatalf("%s is not registered", name)
	return nil
}

func wantBuildInfo(t *testing.T, reg prometheus.Gatherer) buildinfo.Info {
	t.Helper()
	b := buildinfo.Read()
	got := labelsOf(t, reg, "mightyetl_build_info")
	if got["version"] != b.Version || got["commit"] != b.Commit || got["goversion"] != b.GoVersion {
		t.Fatalf("mightyetl_build_info labels %v, want version %q commit %q goversion %q", got, b.Version, b.Commit, b.GoVersion)
	}
	return b
}

// Every process registry (the intake's, the dev process's) exports the build.
func TestNewRegistryExportsBuildInfo(t *testing.T) {
	t.Parallel()
	wantBuildInfo(t, NewRegistry())
}

// The worker process exports the build too, and its configuration info
// carries the same version in its build label.
func TestWorkerProcessExportsBuildInfo(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDatabase(t)
	p := newTestWorkerProcess(t, testWorkerConfig(t, url, ""))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	b := wantBuildInfo(t, p.Registry)
	if got := labelsOf(t, p.Registry, "mightyetl_worker_config_info")["build"]; got != b.Version {
		t.Fatalf("mightyetl_worker_config_info{build=%q}, want %q", got, b.Version)
	}
}
