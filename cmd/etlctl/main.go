// Command etlctl is mightyETL's operator tool:
//
//	etlctl migrate up|down|status   apply, roll back one (or -to a version), or list migrations (creates the database if missing)
//	etlctl credentials hash NAME    read a password on stdin, print the "NAME:argon2id-hash" line
//	etlctl relay                    run the outbox relay alone (needs NATS_URL)
//	etlctl backfill list|status|run run a resumable batched backfill (docs/operations/upgrades.md)
//	etlctl prune                    delete old terminal jobs, ledger rows no replay needs and old audit records
//	etlctl dev                      run the whole system in one process (see README; etlctl dev -h)
//	etlctl jobs <command>           submit, get, list, cancel, replay, wait for and process jobs over the HTTP API
//	etlctl version                  print the build: version, commit, modified, Go version
//
// Settings come from flags and MIGHTYETL_* / DATABASE_URL variables like the
// other binaries. Exit status 2 means bad usage or configuration.
package main

import (
	"fmt"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

const usage = `usage:
  etlctl migrate up|down|status [-to VERSION]
  etlctl credentials hash <principal>   (password on standard input)
  etlctl relay
  etlctl backfill list|status [NAME]|run NAME [-batch-size N] [-pause D]
  etlctl prune [-terminal-jobs-older-than 720h] [-ledger-older-than 720h] [-audit-older-than 2160h]
  etlctl dev [--http-addr ADDR] [--metrics-addr ADDR] [--reset-identity]
  etlctl jobs submit|get|list|cancel|replay|wait|process   (etlctl jobs --help)
  etlctl version`

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	switch args[0] {
	case "migrate":
		return runMigrate(args[1:])
	case "credentials":
		return runCredentials(args[1:])
	case "dev":
		return runDev(args[1:])
	case "relay":
		return runRelay(args[1:])
	case "backfill":
		return runBackfill(args[1:])
	case "prune":
		return runPrune(args[1:])
	case "jobs":
		return runJobs(args[1:])
	case "version", "-version", "--version":
		return runVersion(args[1:])
	case "-h", "--help", "help":
		fmt.Println(usage)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "etlctl: unknown command %q\n%s\n", args[0], usage)
		return 2
	}
}
