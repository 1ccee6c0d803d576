package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redlockd/redlockd/config"
	"github.com/redlockd/redlockd/internal/redisproc"
)

// DevAPIKey is the API key of the "dev" account in `redlockd dev`. It is
// public on purpose (the curl lines of the README and docs/api.md use it): dev listens on
// loopback only and its masters keep nothing.
const DevAPIKey = "dev-key-0123456789abcdef"

func dev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:7070", "address of the HTTP API (loopback recommended: the dev API key is public)")
	n := fs.Int("masters", 5, "number of local redis-server masters to start (odd, ≥ 3)")
	apiKey := fs.String("api-key", DevAPIKey, "API key of the dev account")
	binary := fs.String("redis-server", "redis-server", "redis-server binary")
	logFormat := fs.String("log-format", "console", "log format: console or json")
	maxTTL := fs.Int("max-ttl", 600, "largest ttl in seconds, and how long a master restarted empty is quarantined (serve's default is 86400)")
	useTLS := fs.Bool("tls", false, "TLS on both sides: a throwaway CA, TLS-only masters that require client certificates and know only the least-privilege ACL user of docs/operations.md, and HTTPS with client certificates")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: redlockd dev [flags]\n\nStarts local redis-server masters on free loopback ports (no persistence, in a\ntemp dir) and the daemon, prints the URL, the dev API key and a curl line.\nWith --tls, everything speaks TLS (certificates made at startup, in a temp dir).\nCtrl-C stops everything it started.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("dev: unexpected argument %q", fs.Arg(0))
	}
	cfg := config.DefaultConfig()
	cfg.Listen = *listen
	cfg.APIKeys = []config.APIKey{{Name: "dev", Key: *apiKey}}
	cfg.LogFormat = *logFormat
	// A master restarted empty is quarantined for max_ttl: 10 minutes
	// instead of a day keeps dev usable when you kill and restart masters.
	cfg.MaxTTL = *maxTTL
	// A placeholder list of the right size validates the count before any
	// process is started; the real addresses replace it below.
	cfg.Masters = make([]string, *n)
	for i := range cfg.Masters {
		cfg.Masters[i] = fmt.Sprintf("127.0.0.1:%d", 1+i)
	}
	procOpts := redisproc.Options{Binary: *binary}
	var certs *devCerts
	if *useTLS {
		dir, err := os.MkdirTemp("", "redlockd-dev-tls-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if certs, err = devTLS(dir, &cfg, &procOpts); err != nil {
			return err
		}
	}
	if err := cfg.Validate(); err != nil {
		return err
	}

	servers, err := redisproc.StartN(*n, procOpts)
	if err != nil {
		return err
	}
	defer func() {
		if err := redisproc.StopAll(servers); err != nil {
			fmt.Fprintln(stderr, "redlockd dev: stopping masters:", err)
		}
	}()
	for i, s := range servers {
		cfg.Masters[i] = s.Addr()
	}
	log, err := newLogger(cfg)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		fmt.Fprintf(stderr, "redlockd dev: WARNING: listening on %s, not loopback, with a public dev API key\n", ln.Addr())
	}
	// The printed curl line must work as printed: its ttl is the daemon's
	// default (30, lowered to --max-ttl when that is smaller).
	ttl := cfg.EffectiveDefaultTTL()
	if certs != nil {
		printDevTLS(stdout, ln.Addr().String(), *apiKey, ttl, devMasters(servers), certs)
	} else {
		printDev(stdout, ln.Addr().String(), *apiKey, ttl, devMasters(servers))
	}

	// A second Ctrl-C while shutting down is ignored here; the deferred
	// StopAll still runs, so no redis-server is left behind.
	signal.Ignore(syscall.SIGHUP)
	err = runDaemon(ctx, cfg, log, ln, nil)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	_ = os.Stdout.Sync()
	return err
}

// devMasters lists the masters for the banner, one per line, each with
// its pid: what the README's kill -9 and restart-by-hand steps need.
func devMasters(servers []*redisproc.Server) string {
	var b strings.Builder
	for i, s := range servers {
		if i > 0 {
			b.WriteString("\n            ")
		}
		fmt.Fprintf(&b, "%s (pid %d)", s.Addr(), s.PID())
	}
	return b.String()
}

func printDev(stdout io.Writer, addr, apiKey string, ttl int, masters string) {
	url := "http://" + addr
	fmt.Fprintf(stdout, `redlockd dev is running.

  URL       %s
  API key   %s   (account "dev")
  masters   %s

Try:
  curl -s -X POST %s/v1/lock -H 'X-API-Key: %s' -H 'Content-Type: application/json' -d '{"action":"acquire","key":"order:pay:10086","ttl":%d}'

Dashboard %s/   Ready %s/readyz   Metrics %s/metrics
Ctrl-C stops the daemon and the masters.

`, url, apiKey, masters, url, apiKey, ttl, url, url, url)
}
