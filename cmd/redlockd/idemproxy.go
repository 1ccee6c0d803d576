package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/redlockd/redlockd/client"
)

const idemProxyUsage = `Usage: redlockd idempotency-proxy --upstream URL [--url DAEMON] [--listen ADDR] [--require "[METHOD] /path/prefix"]… [--namespace-header NAME] [--lease SECONDS] [--retention SECONDS]

An HTTP gateway in front of any service that makes its POST and PATCH
requests idempotent, with no change to the service. For a request with an
Idempotency-Key header it begins an idempotency record on the redlockd
daemon, forwards the request with the attempt's fencing token in the
Idempotency-Fence header (and Idempotency-Takeover: true when an earlier
attempt's lease ended without an answer), stores the upstream's answer
(status, the replayed headers, body up to 64 KiB) and replays it to every
retry with Idempotent-Replayed: true. While an attempt runs, a retry gets
409 with Retry-After; the same key with another method, target or body
gets 422. The upstream's answer is stored even when the client went away
before it came. An upstream answer of 5xx (or none: 502) is not stored
and the attempt is left to its lease: a retry after the lease runs the
upstream again with Idempotency-Takeover: true, so the upstream must look
for the earlier attempt's work first (by the key, or the fence it saw). Other requests pass through; Idempotency-Fence and
Idempotency-Takeover sent by clients are removed.

--require names the routes on which a POST or PATCH without
Idempotency-Key is refused with 400 (METHOD is POST or PATCH; without it,
both). Keys are scoped by the API key's account and, with
--namespace-header, by that request header's value (for example the
authenticated user's id set by an earlier proxy; a keyed request without
it, or with it more than once, is refused with 400): without the flag,
every client of the gateway shares one key space. Without --retention the
daemon's default applies (24 hours, capped at its idempotency_max_retention).

The daemon and API key come from --url and REDLOCKD_URL, and REDLOCKD_API_KEY
(an environment variable: a flag shows in ps). Flags:
`

// defaultIdemRetention is the daemon's default retention of a record, in
// seconds (idem_begin without retention; capped at the daemon's
// idempotency_max_retention).
const defaultIdemRetention = 24 * 60 * 60

// idemProxySettings are the gateway's flags, checked.
type idemProxySettings struct {
	upstream  *url.URL
	daemon    string
	apiKey    string
	listen    string
	require   []proxyRoute
	nsHeader  string
	lease     time.Duration
	retention time.Duration
}

// proxyRoute is a --require route: method "" means POST and PATCH.
type proxyRoute struct{ method, prefix string }

// matches compares whole path segments of the cleaned path (path.Clean:
// "//orders" and "/x/../orders" are "/orders"), so that "/orders" covers
// "/orders" and "/orders/42" but not "/ordersX", and no spelling of a
// required path slips past.
func (r proxyRoute) matches(req *http.Request) bool {
	if r.method != "" && r.method != strings.ToUpper(req.Method) {
		return false
	}
	p := path.Clean("/" + req.URL.Path)
	prefix := strings.TrimSuffix(r.prefix, "/")
	return prefix == "" || p == prefix || strings.HasPrefix(p, prefix+"/")
}

type routeList []proxyRoute

func (l *routeList) String() string { return fmt.Sprint(*l) }

func (l *routeList) Set(v string) error {
	method, prefix, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok {
		method, prefix = "", method
	}
	prefix = strings.TrimSpace(prefix)
	method = strings.ToUpper(method)
	if method != "" && method != http.MethodPost && method != http.MethodPatch {
		return fmt.Errorf("method %q: only POST and PATCH carry Idempotency-Key here", method)
	}
	if !strings.HasPrefix(prefix, "/") {
		return fmt.Errorf("path prefix %q must start with /", prefix)
	}
	prefix = path.Clean(prefix)
	*l = append(*l, proxyRoute{method: method, prefix: prefix})
	return nil
}

func parseIdemProxyArgs(args []string, stderr io.Writer) (idemProxySettings, error) {
	fs := flag.NewFlagSet("idempotency-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, idemProxyUsage)
		fs.PrintDefaults()
	}
	var s idemProxySettings
	var upstream string
	var routes routeList
	var leaseS, retentionS int64
	fs.StringVar(&upstream, "upstream", "", "base `URL` of the service behind the gateway, e.g. http://127.0.0.1:8080 (required)")
	fs.StringVar(&s.daemon, "url", os.Getenv("REDLOCKD_URL"), "redlockd base URL (default $REDLOCKD_URL)")
	fs.StringVar(&s.listen, "listen", "127.0.0.1:7080", "`address` to listen on")
	fs.Var(&routes, "require", "`route` \"[POST|PATCH] /prefix\" whose POST/PATCH requests must carry Idempotency-Key (repeatable)")
	fs.StringVar(&s.nsHeader, "namespace-header", "", "request header `name` whose value scopes the keys (e.g. X-User-Id)")
	fs.Int64Var(&leaseS, "lease", 30, "processing lease in `seconds`: an attempt that takes longer is extended while the upstream works")
	fs.Int64Var(&retentionS, "retention", 0, "how long answers are kept, in `seconds` (at least twice --lease, at most 604800, 7 days; default: the daemon's, 86400 capped at its idempotency_max_retention)")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	retentionSet := false
	fs.Visit(func(f *flag.Flag) { retentionSet = retentionSet || f.Name == "retention" })
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	u, err := url.Parse(upstream)
	switch {
	case upstream == "":
		return s, errors.New("--upstream: required, the base URL of the service behind the gateway")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return s, fmt.Errorf("--upstream %q: must be an absolute http or https URL", upstream)
	case s.daemon == "":
		return s, errors.New("--url or REDLOCKD_URL: required (e.g. http://127.0.0.1:7070)")
	case leaseS < 1 || leaseS > 86400:
		return s, fmt.Errorf("--lease: %d is outside 1 to 86400 seconds", leaseS)
	case retentionSet && (retentionS < 2*leaseS || retentionS > 604800):
		return s, fmt.Errorf("--retention: %d is outside twice --lease (%d) to 604800 seconds: the record must outlive the lease so that a retry after it is a take-over", retentionS, 2*leaseS)
	case !retentionSet && 2*leaseS > defaultIdemRetention:
		return s, fmt.Errorf("--lease: %d is above half the default retention (%d seconds): give --retention, at least twice --lease", leaseS, defaultIdemRetention)
	}
	s.apiKey = os.Getenv("REDLOCKD_API_KEY")
	if s.apiKey == "" {
		return s, errors.New("REDLOCKD_API_KEY: required, the API key of the account whose records the gateway keeps")
	}
	s.upstream, s.require = u, routes
	s.lease, s.retention = time.Duration(leaseS)*time.Second, time.Duration(retentionS)*time.Second
	return s, nil
}

// newIdemProxy is the gateway's handler: the client's Idempotency-Key
// middleware in front of a reverse proxy to the upstream.
func newIdemProxy(s idemProxySettings, c *client.Client) http.Handler {
	rp := httputil.NewSingleHostReverseProxy(s.upstream)
	o := client.MiddlewareOptions{
		Require: func(r *http.Request) bool {
			for _, rt := range s.require {
				if rt.matches(r) {
					return true
				}
			}
			return false
		},
		Options: []client.IdemOption{client.WithLease(s.lease)},
		// Cancelling the upstream call when the lease is lost would not
		// undo the upstream's work, only lose its answer (an empty 502,
		// then a take-over): the call goes on, and its answer is stored
		// if no take-over began, and passed on either way.
		RunPastLostLease: true,
		// An upstream 5xx, or the proxy's own 502, says nothing about
		// what the upstream did: never a blind re-run (AbortOn5xx false).
		OnError: func(op, key string, err error) {
			switch {
			case op == "complete-without-body":
				log.Printf("idempotency-proxy: the answer of key %q is above the daemon's answer limit: stored without its body, so its replays carry Idempotent-Body-Omitted: %v", key, err)
			case op == "lease" || op == "answer-sent-before-store":
				// The answer is still stored as usual: said by the
				// "complete" line below if it is not. The op is named,
				// as docs/idempotency.md quotes it for alerts on the log.
				log.Printf("idempotency-proxy: key %q (%s): %v", key, op, err)
			case op == "begin":
				log.Printf("idempotency-proxy: begin of key %q refused for this gateway's own reason (its API key, its account's limits, its settings, or redlockd unreachable); the request was not forwarded: %v", key, err)
			case op == "answer-cut-off":
				log.Printf("idempotency-proxy: key %q: %v; a retry after the lease is a take-over", key, err)
			case op == "complete" && errors.Is(err, client.ErrNotOwner):
				log.Printf("idempotency-proxy: complete of key %q refused: another attempt took the key over (after this one's lease was lost), and its answer is the record's; this answer went to this client only: %v", key, err)
			default:
				log.Printf("idempotency-proxy: %s of key %q failed, the answer is not stored; a retry after the lease is a take-over: %v", op, key, err)
			}
		},
	}
	o.NamespaceHeader = s.nsHeader
	if s.retention > 0 {
		o.Options = append(o.Options, client.WithRetention(s.retention))
	}
	mw := client.Middleware(c, o, rp)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only the gateway says which attempt a request is.
		r.Header.Del(client.HeaderIdempotencyFence)
		r.Header.Del(client.HeaderIdempotencyTakeover)
		// The upstream's Content-Type or none: a nil value stops net/http
		// from sniffing one for a body written without it, which the
		// gateway then passed on (a black-box pass: an upstream 500
		// without one reached the client as text/plain). The proxy adds
		// the upstream's value to it; the gateway's own answers set theirs.
		w.Header()["Content-Type"] = nil
		mw.ServeHTTP(w, r)
	})
}

// idempotencyProxy runs the gateway until ctx ends, then shuts it down,
// letting requests in flight finish for up to 10 s.
func idempotencyProxy(ctx context.Context, args []string, stderr io.Writer) error {
	s, err := parseIdemProxyArgs(args, stderr)
	if err != nil {
		return err
	}
	c, err := client.New(s.daemon, s.apiKey, client.WithRetry(client.RetryPolicy{Attempts: 3, MaxDelay: 2 * time.Second}))
	if err != nil {
		return fmt.Errorf("--url: %w", err)
	}
	ln, err := net.Listen("tcp", s.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	srv := &http.Server{Handler: newIdemProxy(s, c), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "idempotency-proxy: listening on http://%s, upstream %s, records on %s\n", ln.Addr(), s.upstream, s.daemon)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
