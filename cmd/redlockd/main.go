// Command redlockd is the Redlock quorum lock daemon.
//
//	redlockd serve --config redlockd.yaml   run against your masters
//	redlockd dev                            five local masters + the daemon
//	redlockd repair-fences --config FILE    after most masters lost their data
//	redlockd groups-change --daemons URLS   the progress of a change of master groups
//	redlockd lock run --key K --ttl 5m -- cmd   run cmd while holding a lock
//	redlockd version                            version, VCS revision, Go version
//
// main only wires: the algorithm is in package redlock, the HTTP API in
// package daemon, settings in package config.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
)

const usage = `redlockd — a Redlock quorum lock daemon over independent Redis masters.

Usage:
  redlockd serve --config FILE [flags]   serve the HTTP lock API (see "redlockd serve --help")
  redlockd dev [flags]                   start five local redis-server masters and the daemon
  redlockd repair-fences --config FILE   after most masters lost their data: raise the fencing counters
                                         so the daemons count them again (see "redlockd repair-fences --help")
  redlockd groups-change --daemons URL,…  show (and with --wait, follow) a change of master groups
                                         (see "redlockd groups-change --help")
  redlockd lock run|acquire|extend|release|status
                                         hold a lock from a shell or cron (see "redlockd lock help")
  redlockd idempotency-proxy --upstream URL
                                         a gateway that makes POST/PATCH with Idempotency-Key run once
                                         (see "redlockd idempotency-proxy --help")
  redlockd version                       show the version, VCS revision and Go version (also --version)
  redlockd help                          show this help

Settings come from the YAML file, then REDLOCKD_* environment variables, then
flags (each overrides the one before). Docs: README.md and docs/.
`

func main() {
	if len(os.Args) > 1 && os.Args[1] == gateCommand {
		// Hidden: lock run's start gate (gate.go), before any signal
		// handling of ours: the command it becomes gets the default
		// handling of every signal.
		exitOn(lockExec(os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	exitOn(err)
}

// exitOn ends the process as err says: an *exitError's code (and its
// message, if any), 1 with the message for any other error. It returns
// only for nil and flag.ErrHelp.
func exitOn(err error) {
	var ee *exitError
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case errors.As(err, &ee):
		if ee.err != nil {
			fmt.Fprintln(os.Stderr, "redlockd:", ee.err)
		}
		os.Exit(ee.code)
	default:
		fmt.Fprintln(os.Stderr, "redlockd:", err)
		os.Exit(1)
	}
}

// revision is the VCS commit, set by the Makefile with -ldflags
// "-X main.revision=…" for builds the go command did not stamp.
var revision string

// commands are the commands run knows, as the usage lists them.
var commands = []string{"serve", "dev", "repair-fences", "groups-change", "lock", "idempotency-proxy", "version", "help"}

// versionString is what `redlockd version` prints:
//
//	redlockd v1.2.3 (revision 0123456789ab, modified) go1.26.8 linux/amd64
//
// The module version is "(devel)" for a build from a checkout; the
// revision is the VCS commit the go command stamped, when it did.
func versionString(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return "redlockd (no build information) " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev == "" {
		rev = revision
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		rev = "unknown"
	}
	return fmt.Sprintf("redlockd %s (revision %s%s) %s %s/%s", bi.Main.Version, rev, modified, bi.GoVersion, runtime.GOOS, runtime.GOARCH)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing command: " + strings.Join(commands, ", "))
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "dev":
		return dev(ctx, args[1:], stdout, stderr)
	case "repair-fences":
		return repairFences(ctx, args[1:], stdout, stderr)
	case "groups-change":
		return groupsChange(ctx, args[1:], stdout, stderr)
	case "lock":
		return lockCmd(ctx, args[1:], stdout, stderr)
	case "idempotency-proxy":
		return idempotencyProxy(ctx, args[1:], stderr)
	case guardCommand: // hidden: started by lock run (guard.go)
		return lockGuard(os.Stdin, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, versionString(debug.ReadBuildInfo()))
		return nil
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return exitf(exitUsage, "unknown command %q%s; see redlockd --help", args[0], didYouMean(args[0], commands))
	}
}
