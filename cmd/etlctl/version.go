package main

import (
	"fmt"
	"io"
	"os"

	"github.com/mightyetl/mightyetl/internal/buildinfo"
)

// runVersion prints the build of this binary (internal/buildinfo), one
// "key: value" line each: version, commit, modified, commit_time (when
// known) and go. The intake and the worker export the same values as
// mightyetl_build_info.
func runVersion(args []string) int {
	if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "usage: etlctl version")
		return 2
	}
	printVersion(os.Stdout, buildinfo.Read())
	return 0
}

func printVersion(w io.Writer, b buildinfo.Info) {
	fmt.Fprintf(w, "version: %s\ncommit: %s\nmodified: %t\n", b.Version, b.Commit, b.Modified)
	if b.Time != "" {
		fmt.Fprintf(w, "commit_time: %s\n", b.Time)
	}
	fmt.Fprintf(w, "go: %s\n", b.GoVersion)
}
