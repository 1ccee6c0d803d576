// Command redlock-chaos runs the fault drills of package chaos and the
// fault-injecting TCP proxy the compose drills put in front of each master.
//
//	redlock-chaos drill [flags]   run the drill matrix and write a report
//	redlock-chaos fuzz [flags]    run a seeded random schedule of operations and faults
//	redlock-chaos proxy [flags]   one proxy per --listen address, with a control API
//
// It is built from the drill module (chaos/go.mod), apart from the
// product: redlockd links none of the drill code.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `redlock-chaos — fault drills for redlockd.

Usage:
  redlock-chaos drill [flags]   run fault drills and write a report (see "redlock-chaos drill --help")
  redlock-chaos fuzz [flags]    a seeded random schedule of operations and faults on local masters (see "redlock-chaos fuzz --help")
  redlock-chaos proxy [flags]   a fault-injecting TCP proxy for the compose drills (see "redlock-chaos proxy --help")
  redlock-chaos help            show this help

Docs: chaos/README.md.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	default:
		fmt.Fprintln(os.Stderr, "redlock-chaos:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing command (drill, fuzz or proxy)")
	}
	switch args[0] {
	case "drill":
		return drillCmd(ctx, args[1:], stdout, stderr)
	case "fuzz":
		return fuzzCmd(ctx, args[1:], stdout, stderr)
	case "proxy":
		return proxyCmd(ctx, args[1:], stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}
