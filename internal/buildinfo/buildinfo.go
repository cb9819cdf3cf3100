// Package buildinfo identifies the running build of a mightyETL binary: its
// version, the VCS commit it was built from, whether the working tree had
// uncommitted changes, and the Go toolchain that compiled it.
//
// The Go toolchain stamps the module version and the VCS state into every
// binary built inside a git checkout (debug.ReadBuildInfo). A build without
// that information (a Docker build, whose context holds no .git, or any
// build with -buildvcs=false) passes it with the linker instead:
//
//	go build -ldflags "-X github.com/mightyetl/mightyetl/internal/buildinfo.version=v1.2.3
//	  -X github.com/mightyetl/mightyetl/internal/buildinfo.commit=<full hash>
//	  -X github.com/mightyetl/mightyetl/internal/buildinfo.modified=true" ./cmd/...
//
// `make build` and the Dockerfile (build arguments VERSION, COMMIT and
// MODIFIED) do exactly that. A value set with -X wins over the stamped one.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Linker overrides (-ldflags -X); empty means not set.
var (
	version  string
	commit   string
	modified string // "true" or "false"
)

// Unknown is the Commit of a build that carries no VCS information and was
// given none with -ldflags -X.
const Unknown = "unknown"

// Info describes one build. Every field is safe to print and to use as a
// metric label: none holds a path, host or secret.
type Info struct {
	// Version is the -X override when set, else the main module's version
	// as the toolchain stamped it: a tag ("v1.2.3"), a pseudo-version
	// ("v0.0.0-20261201153300-154590b1a2b3", "+dirty" when modified) or
	// "(devel)" for a build without VCS information. Never empty.
	Version string
	// Commit is the full VCS revision, or Unknown.
	Commit string
	// Modified reports that the working tree had uncommitted changes to
	// tracked files when the binary was built (false when unknown).
	Modified bool
	// Time is the commit time (RFC 3339) as the toolchain stamped it, or ""
	// when the binary carries none (the -X overrides do not set it).
	Time string
	// GoVersion is the Go toolchain that built the binary ("go1.26.8").
	GoVersion string
}

// Read returns the running binary's build information. It is cheap and safe
// for concurrent use.
func Read() Info {
	bi, _ := debug.ReadBuildInfo() // nil when the binary carries none
	return resolve(bi, version, commit, modified)
}

// resolve merges the toolchain's stamp bi (nil when the binary has none)
// with the linker overrides; a non-empty override wins.
func resolve(bi *debug.BuildInfo, version, commit, modified string) Info {
	info := Info{Version: "(devel)", Commit: Unknown, GoVersion: runtime.Version()}
	if bi != nil {
		if v := bi.Main.Version; v != "" {
			info.Version = v
		}
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if s.Value != "" {
					info.Commit = s.Value
				}
			case "vcs.modified":
				info.Modified = s.Value == "true"
			case "vcs.time":
				info.Time = s.Value
			}
		}
	}
	if version != "" {
		info.Version = version
	}
	if commit != "" {
		info.Commit = commit
	}
	if modified != "" {
		info.Modified = modified == "true"
	}
	return info
}
