package daemon

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// route is one endpoint: a ServeMux pattern with its method ("GET
// /v1/stats") and its handler.
type route struct {
	pattern string
	handler http.HandlerFunc
	// methods lists the route's methods in 404 messages when the pattern
	// has none (the handler then answers every method itself).
	methods string
	// publicWithoutAdmin: without an admin listener (Options.AdminListen
	// empty) the route is served on the public listener, as it always
	// was. Routes without it exist only on an admin listener.
	publicWithoutAdmin bool
}

// publicRoutes are served on the public listener, and never move: the lock
// API and what load balancers and clients read.
func (s *Server) publicRoutes() []route {
	return []route{
		// Method-less: serveLock checks for a credential in the query
		// before the method, and counts a wrong method in its metrics.
		{pattern: "/v1/lock", handler: s.serveLock, methods: http.MethodPost},
		{pattern: "/gateway/distlock", handler: s.serveLock, methods: http.MethodPost},
		{pattern: "GET /healthz", handler: s.serveHealthz},
		{pattern: "GET /readyz", handler: s.serveReadyz},
		{pattern: "GET /openapi.yaml", handler: serveOpenAPI},
	}
}

// adminRoutes are the operator endpoints. With Options.AdminListen they
// are served on the admin listener only (behind Options.AdminToken when it
// is set), beside GET /healthz and GET /readyz (which the dashboard
// reads); the public listener no longer has them. Without it, the routes
// marked publicWithoutAdmin stay on the public listener and the others are
// not served at all: an endpoint that changes state or reveals more than
// the dashboard does is never public.
func (s *Server) adminRoutes(gatherer prometheus.Gatherer) []route {
	metrics := promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{
		ErrorLog: zap.NewStdLog(s.log.Named("metrics")),
	})
	return []route{
		{pattern: "GET /{$}", handler: serveDashboard, publicWithoutAdmin: true},
		{pattern: "GET /dashboard.js", handler: serveDashboardJS, publicWithoutAdmin: true},
		{pattern: "GET /metrics", handler: metrics.ServeHTTP, publicWithoutAdmin: true},
		{pattern: "GET /v1/stats", handler: s.serveStats, publicWithoutAdmin: true},
		{pattern: "GET /v1/history", handler: s.serveHistory, publicWithoutAdmin: true},
		{pattern: "POST /admin/reload", handler: s.serveReload},
		{pattern: "GET /admin/locks", handler: s.serveLockList},
		{pattern: "GET /admin/idempotency", handler: s.serveIdemList},
	}
}

// mux builds one listener's ServeMux from its routes. A wrong method on a
// known path is a JSON 405 naming the allowed one; every other path is a
// JSON 404 listing what this listener serves.
func (s *Server) mux(routes []route) *http.ServeMux {
	mux := http.NewServeMux()
	allowed := map[string][]string{} // path → methods
	var paths []string
	var list []string
	for _, r := range routes {
		mux.HandleFunc(r.pattern, r.handler)
		method, path, ok := strings.Cut(r.pattern, " ")
		if !ok {
			list = append(list, r.methods+" "+r.pattern)
			continue
		}
		if _, seen := allowed[path]; !seen {
			paths = append(paths, path)
		}
		allowed[path] = append(allowed[path], method)
	}
	for _, p := range paths {
		methods := allowed[p]
		mux.HandleFunc(p, methodNotAllowed(methods))
		name := strings.TrimSuffix(p, "{$}")
		for _, m := range methods {
			if name == "/" {
				list = append(list, m+" / (dashboard)")
			} else {
				list = append(list, m+" "+name)
			}
		}
	}
	msg := "; the endpoints are " + strings.Join(list[:len(list)-1], ", ") + " and " + list[len(list)-1]
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { s.serveNotFound(w, r, msg) })
	return mux
}

// methodNotAllowed answers a method a path does not serve: 405 with Allow,
// as ServeMux would, in the JSON envelope with code method_not_allowed. A
// GET route also serves HEAD.
func methodNotAllowed(methods []string) http.HandlerFunc {
	allow := slices.Clone(methods)
	if slices.Contains(allow, http.MethodGet) {
		allow = append(allow, http.MethodHead)
	}
	hv := strings.Join(allow, ", ")
	use := strings.Join(methods, " or ")
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", hv)
		writeError(w, http.StatusMethodNotAllowed, codeMethodNotAllowed, "method "+quoteCut(r.Method, 16)+" not allowed on "+quoteCut(r.URL.Path, 64)+": use "+use)
	}
}

// Answers of the admin listener's authentication.
const (
	msgTwoAuthorizations = "send exactly one Authorization header"
	msgAdminAuthLimited  = "too many requests without a valid admin token from this address; retry after Retry-After with the admin token in the Authorization header (Bearer <token>, or as the password of basic authentication)"
)

// adminAuth requires the admin token on every request, as a bearer token
// or as the password of basic authentication (so that a browser can open
// the dashboard: it asks once and sends it with the page's own requests).
// Tokens are compared by SHA-256 in constant time. The scheme name is
// matched case-insensitively (RFC 9110 §11.1). Failures count against the
// source's failed-authentication bucket like bad API keys do, and a
// source out of tokens gets 429 before its token is looked at. The token
// is the one in force when the request arrives (see SetAdminToken);
// without one, requests pass.
func (s *Server) adminAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := s.adminToken.Load()
		if want == nil {
			next.ServeHTTP(w, r)
			return
		}
		// Two Authorization headers are ambiguous credentials, refused
		// as two X-API-Key headers are on the lock API. Never echoed.
		if len(r.Header["Authorization"]) > 1 {
			writeError(w, http.StatusBadRequest, codeBadRequest, msgTwoAuthorizations)
			return
		}
		now := time.Now()
		src, srcOK, limited := s.authSourceLimited(w, r, now)
		if limited {
			writeError(w, http.StatusTooManyRequests, codeTooManyAuthFailures, msgAdminAuthLimited)
			return
		}
		got := ""
		if _, pw, ok := r.BasicAuth(); ok {
			got = pw
		} else if scheme, v, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
			got = strings.TrimSpace(v)
		}
		h := sha256.Sum256([]byte(got))
		if got == "" || subtle.ConstantTimeCompare(h[:], want[:]) != 1 {
			s.authMiss(src, srcOK, now)
			s.authFailed(r, authAdminToken, "")
			w.Header().Set("WWW-Authenticate", `Basic realm="redlockd admin", charset="UTF-8"`)
			writeError(w, http.StatusUnauthorized, codeUnauthorized, "admin endpoints need the admin token: send Authorization: Bearer <token>")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ReloadResult is what a reload changed; the daemon's log line and the
// answer of POST /admin/reload show it. It never holds a key.
type ReloadResult struct {
	// Accounts is the number of accounts after the reload; Added and
	// Removed name the accounts that appeared and disappeared. An account
	// whose key changed is in neither: KeysChanged names it.
	Accounts    int      `json:"accounts"`
	Added       []string `json:"added"`
	Removed     []string `json:"removed"`
	KeysChanged []string `json:"keys_changed"`
	// Certificates is true when the listener's TLS certificate (and client
	// CA) were read again.
	Certificates bool `json:"certificates"`
	// AdminTokenChanged is true when the admin listener's token was
	// replaced (or set where there was none).
	AdminTokenChanged bool `json:"admin_token_changed"`
	// Ignored names the changed settings that take effect only at a
	// restart.
	Ignored []string `json:"ignored"`
}

// SetAPIKeys replaces the accounts at once: a request whose key was
// checked before keeps running, the next request with a removed key is
// refused and one with a new key is served. keys must pass the checks of
// New (at least one, accounts and keys unique); otherwise nothing changes.
// The result names the accounts added, removed and re-keyed; Certificates
// and Ignored are left for the caller.
func (s *Server) SetAPIKeys(keys []APIKey) (ReloadResult, error) {
	keys = slices.Clone(keys)
	if err := checkAPIKeys(keys); err != nil {
		return ReloadResult{}, err
	}
	if err := checkLimits(keys, s.limitStore); err != nil {
		return ReloadResult{}, err
	}
	s.keysMu.Lock()
	defer s.keysMu.Unlock()
	old := map[string][32]byte{}
	for _, k := range *s.keys.Load() {
		old[k.Account] = k.Hash
	}
	res := ReloadResult{Accounts: len(keys), Added: []string{}, Removed: []string{}, KeysChanged: []string{}, Ignored: []string{}}
	for _, k := range keys {
		h, ok := old[k.Account]
		switch {
		case !ok:
			res.Added = append(res.Added, k.Account)
		case h != k.Hash:
			res.KeysChanged = append(res.KeysChanged, k.Account)
		}
		delete(old, k.Account)
	}
	for a := range old {
		res.Removed = append(res.Removed, a)
	}
	slices.Sort(res.Removed)
	removed := map[string]bool{}
	if p := s.removed.Load(); p != nil {
		maps.Copy(removed, *p)
	}
	for _, a := range res.Removed {
		removed[a] = true
	}
	for _, k := range keys {
		delete(removed, k.Account)
	}
	s.removed.Store(&removed)
	// The limits first: a request with a new key finds its account's
	// limits in force.
	s.limits.SetAccounts(limitAccounts(keys))
	s.keys.Store(&keys)
	return res, nil
}

// SetAdminToken replaces the admin token (Options.AdminToken): the next
// admin request must carry the new one, and one that carries the old token
// gets 401; a request already admitted finishes. Only the token's SHA-256
// is kept, and requests compare it in constant time without a lock.
//
// An empty token is refused while a token is in force: it would open the
// admin listener to anyone who reaches it, which a reload must not do
// behind the operator's back (start without a token for that). A token
// where there was none is accepted; it needs an admin listener
// (Options.AdminListen), as in New. On error nothing changes.
func (s *Server) SetAdminToken(token string) error {
	if token == "" {
		if s.adminToken.Load() != nil {
			return errors.New("daemon: SetAdminToken: an empty token would leave the admin listener unauthenticated; restart without Options.AdminToken for that")
		}
		return nil
	}
	if s.adminListen == "" {
		return errors.New("daemon: SetAdminToken: needs Options.AdminListen")
	}
	h := sha256.Sum256([]byte(token))
	s.adminToken.Store(&h)
	return nil
}

// reloadTimeout bounds one POST /admin/reload.
const reloadTimeout = 10 * time.Second

// serveReload answers POST /admin/reload: it runs Options.Reload (which
// reads the config file again and applies what may change without a
// restart) and answers 200 with what changed, or 400 with why the new
// config was refused (the old one stays), or 404 when there is no Reload.
func (s *Server) serveReload(w http.ResponseWriter, r *http.Request) {
	if s.reload == nil {
		writeError(w, http.StatusNotFound, codeNotFound, "reload is not available: this daemon was not started from a config")
		return
	}
	if msg := reloadArgs(r); msg != "" {
		writeError(w, http.StatusBadRequest, codeBadRequest, msg+"; POST /admin/reload takes no parameters and no body: it reads the daemon's config file again (nothing was reloaded)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), reloadTimeout)
	defer cancel()
	res, err := s.reload(ctx)
	if err != nil {
		var re *ReloadError
		if errors.As(err, &re) {
			writeError(w, http.StatusBadRequest, codeBadRequest, "reload refused, nothing changed: "+err.Error())
			return
		}
		s.log.Error("reload failed", zap.Error(err))
		writeError(w, http.StatusInternalServerError, codeInternal, "reload failed: "+err.Error())
		return
	}
	writeJSONValue(w, http.StatusOK, struct {
		Ret  string       `json:"ret"`
		Data ReloadResult `json:"data"`
		Msg  string       `json:"msg"`
	}{"ok", res, "reloaded"})
}

// reloadArgs says what a reload request carries that it must not: a
// query parameter (a file=… or dry_run=… the daemon would silently
// ignore) or a body with anything in it (a configuration sent to be
// applied). An empty body, or one that is only an empty JSON object or
// null with white space (what HTTP libraries send for a POST of "no
// data"), is no argument. "" when it carries none.
func reloadArgs(r *http.Request) string {
	if r.URL.RawQuery != "" {
		name, _, _ := strings.Cut(r.URL.RawQuery, "=")
		name, _, _ = strings.Cut(name, "&")
		return "unknown parameter " + quoteCut(name, 32)
	}
	b, _ := io.ReadAll(io.LimitReader(r.Body, maxEmptyBody+1))
	switch strings.Join(strings.Fields(string(b)), "") {
	case "", "{}", "null":
		if len(b) <= maxEmptyBody {
			return ""
		}
	}
	return "a body was sent"
}

// maxEmptyBody bounds what reloadArgs reads of a body it takes for empty.
const maxEmptyBody = 64

// ReloadError is a reload refused because the new configuration is bad;
// the old one stays in force. Its message names the problem (never a
// secret).
type ReloadError struct{ Err error }

func (e *ReloadError) Error() string { return e.Err.Error() }
func (e *ReloadError) Unwrap() error { return e.Err }
