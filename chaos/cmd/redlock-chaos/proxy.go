package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redlockd/redlockd/chaos"
)

// listenFlags is the repeatable --listen flag.
type listenFlags []string

func (l *listenFlags) String() string { return strings.Join(*l, ",") }

func (l *listenFlags) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// proxyCmd is `redlock-chaos proxy`: a chaos.Proxy per --listen
// address in front of one upstream, with an HTTP control API for faults.
// The drill overlay docker/chaos.compose.yml runs one per Redis master,
// between the daemons and the masters, so that `redlock-chaos drill --target
// compose` can slow, blackhole and reset the daemons' connections.
func proxyCmd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	upstream := fs.String("upstream", "", "host:port to forward to, e.g. redis1:6379; resolved anew for every connection (a replaced container has a new address)")
	var listens listenFlags
	fs.Var(&listens, "listen", "address to accept clients on, e.g. :6379; repeat for one listener per client (each can be faulted alone)")
	control := fs.String("control", "", "address of the HTTP control API, e.g. :7000; it has no authentication: never publish it")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `Usage: redlock-chaos proxy --upstream HOST:PORT --listen ADDR [--listen ADDR ...] --control ADDR

A TCP proxy for fault drills (package chaos): every connection accepted on a
--listen address is forwarded to --upstream, through faults switched over the
control API (one proxy per listener, numbered from 0 in flag order):

  GET  /state                     every listener's faults and open connections
  POST /latency?d=150ms           delay every chunk, both directions (d=0: none)
  POST /blackhole?on=true|false   deliver nothing; connections hang
  POST /reject?on=true|false      reset open connections and every new one
  POST /reset                     reset open connections once
  POST /heal                      lift every fault
  (each POST takes listener=N to change one listener only)

docker/chaos.compose.yml runs one in front of each Redis master; the control
API must only be reachable on the drill's own network.

Flags:`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkProxyFlags(fs, *upstream, listens, *control); err != nil {
		return err
	}

	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, time.Now().UTC().Format(time.RFC3339Nano)+" "+format+"\n", args...)
	}
	var proxies []*chaos.Proxy
	defer func() {
		for _, p := range proxies {
			_ = p.Close()
		}
	}()
	up := *upstream
	for _, l := range listens {
		p, err := chaos.ListenProxy(l, func() (string, error) { return up, nil })
		if err != nil {
			return fmt.Errorf("proxy: --listen %s: %w", l, err)
		}
		proxies = append(proxies, p)
	}
	ln, err := net.Listen("tcp", *control)
	if err != nil {
		return fmt.Errorf("proxy: --control %s: %w", *control, err)
	}
	srv := &http.Server{
		Handler:           chaos.ProxyControlHandler(up, proxies, logf),
		ReadHeaderTimeout: 5 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	names := make([]string, len(proxies))
	for i, p := range proxies {
		names[i] = fmt.Sprintf("%d=%s", i, p.Addr())
	}
	logf("proxy: listeners %s → %s; control API on %s", strings.Join(names, " "), up, ln.Addr())
	select {
	case err := <-served:
		return fmt.Errorf("proxy: control API: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("proxy: shutdown: %w", err)
	}
	logf("proxy: stopped")
	return nil
}

// checkProxyFlags reports every bad flag at once, each naming itself.
func checkProxyFlags(fs *flag.FlagSet, upstream string, listens []string, control string) error {
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if upstream == "" {
		errs = append(errs, errors.New("--upstream is required: the host:port to forward to, e.g. redis1:6379"))
	} else if err := checkHostPort(upstream, true); err != nil {
		errs = append(errs, fmt.Errorf("--upstream %q: %w", upstream, err))
	}
	if len(listens) == 0 {
		errs = append(errs, errors.New("--listen is required: the address to accept clients on, e.g. :6379 (repeat it for one listener per client)"))
	}
	seen := map[string]string{}
	for _, l := range listens {
		if err := checkHostPort(l, false); err != nil {
			errs = append(errs, fmt.Errorf("--listen %q: %w", l, err))
			continue
		}
		_, port, _ := net.SplitHostPort(l)
		if port == "0" {
			continue // any free port (tests): never the same twice
		}
		if prev, ok := seen[port]; ok {
			errs = append(errs, fmt.Errorf("--listen %q: port %s is already taken by %s", l, port, prev))
			continue
		}
		seen[port] = fmt.Sprintf("--listen %q", l)
	}
	if control == "" {
		errs = append(errs, errors.New("--control is required: the address of the HTTP control API, e.g. :7000"))
	} else if err := checkHostPort(control, false); err != nil {
		errs = append(errs, fmt.Errorf("--control %q: %w", control, err))
	} else if _, port, _ := net.SplitHostPort(control); seen[port] != "" {
		errs = append(errs, fmt.Errorf("--control %q: port %s is already taken by %s", control, port, seen[port]))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	return nil
}

// checkHostPort checks a host:port: a dial address needs a host and a
// port from 1 to 65535; a listen address may leave the host out (every
// interface), and port 0 picks a free port (the log line and GET /state
// say which).
func checkHostPort(addr string, dial bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port (a listen address may leave the host out, as in :6379)")
	}
	if dial && host == "" {
		return errors.New("the host is missing (want host:port, e.g. redis1:6379)")
	}
	lowest := 0
	if dial {
		lowest = 1
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < lowest || n > 65535 {
		return fmt.Errorf("port %q: want a number from %d to 65535", port, lowest)
	}
	return nil
}
