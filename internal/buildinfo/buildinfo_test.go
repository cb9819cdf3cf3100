package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func stamped(version string, settings ...string) *debug.BuildInfo {
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/mightyetl/mightyetl", Version: version}}
	for i := 0; i+1 < len(settings); i += 2 {
		bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
	}
	return bi
}

func TestResolve(t *testing.T) {
	const rev = "154590b1a2b3c4d5e6f708192a3b4c5d6e7f8091"
	for _, tc := range []struct {
		name                      string
		bi                        *debug.BuildInfo
		version, commit, modified string
		want                      Info
	}{
		{name: "no stamp, no override", bi: nil,
			want: Info{Version: "(devel)", Commit: Unknown, GoVersion: runtime.Version()}},
		{name: "built without VCS information", bi: stamped("(devel)"),
			want: Info{Version: "(devel)", Commit: Unknown, GoVersion: "go1.99.1"}},
		{name: "stamped by the toolchain in a clean checkout",
			bi: stamped("v0.0.0-20261201153300-154590b1a2b3", "vcs", "git", "vcs.revision", rev,
				"vcs.time", "2026-12-01T15:33:00Z", "vcs.modified", "false"),
			want: Info{Version: "v0.0.0-20261201153300-154590b1a2b3", Commit: rev, Time: "2026-12-01T15:33:00Z", GoVersion: "go1.99.1"}},
		{name: "stamped by the toolchain in a modified checkout",
			bi:   stamped("v1.2.3+dirty", "vcs.revision", rev, "vcs.modified", "true"),
			want: Info{Version: "v1.2.3+dirty", Commit: rev, Modified: true, GoVersion: "go1.99.1"}},
		{name: "overrides win over the stamp",
			bi:      stamped("v0.0.0-20261201153300-154590b1a2b3", "vcs.revision", rev, "vcs.modified", "true"),
			version: "v1.2.3", commit: "0123456789abcdef0123456789abcdef01234567", modified: "false",
			want: Info{Version: "v1.2.3", Commit: "0123456789abcdef0123456789abcdef01234567", GoVersion: "go1.99.1"}},
		{name: "overrides without a stamp (Docker build)", bi: stamped("(devel)"),
			version: "v1.2.3-4-gabcdef0-dirty", commit: rev, modified: "true",
			want: Info{Version: "v1.2.3-4-gabcdef0-dirty", Commit: rev, Modified: true, GoVersion: "go1.99.1"}},
		{name: "empty overrides are unset", bi: stamped("v1.2.3", "vcs.revision", rev),
			want: Info{Version: "v1.2.3", Commit: rev, GoVersion: "go1.99.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resolve(tc.bi, tc.version, tc.commit, tc.modified); got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestReadUsesTheLinkerOverrides: Read applies the package variables that
// -ldflags -X sets (the test binary itself carries no override).
func TestReadUsesTheLinkerOverrides(t *testing.T) {
	if version != "" || commit != "" || modified != "" {
		t.Fatalf("test binary built with overrides %q %q %q", version, commit, modified)
	}
	if got := Read(); got.Version == "" || got.Commit == "" || got.GoVersion != runtime.Version() {
		t.Fatalf("Read() = %+v: empty version or commit, or not this toolchain", got)
	}
	version, commit, modified = "v9.8.7", "feedface", "true"
	t.Cleanup(func() { version, commit, modified = "", "", "" })
	got := Read()
	if got.Version != "v9.8.7" || got.Commit != "feedface" || !got.Modified {
		t.Fatalf("Read() = %+v, want the overrides", got)
	}
}
