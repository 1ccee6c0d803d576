package daemon

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Defaults of the failed-authentication limit (Options.AuthFailure*).
const (
	DefaultAuthFailuresPerMinute = 60
	DefaultAuthFailureBurst      = 20
	DefaultAuthFailureSources    = 10000
)

// authLimiter limits failed authentications per source: a token bucket
// per source address (IPv4 address, or IPv6 /64, which one host usually
// owns whole), refilled at perSecond up to burst. Every request without a
// valid API key takes a token; a source whose bucket is empty is refused
// (429) before its key is even looked at, until a token is back. A valid
// key costs nothing, so clients that authenticate are never limited by
// their own requests.
//
// At most max sources are remembered; a new one then evicts the one that
// failed least recently, so the limiter's memory is bounded whatever the
// number of sources (an attacker with more addresses than max gets fresh
// buckets, not more memory).
type authLimiter struct {
	perSecond, burst float64
	max              int

	mu   sync.Mutex
	srcs map[netip.Prefix]*list.Element // of *authBucket
	lru  list.List                      // front: failed most recently
}

type authBucket struct {
	src    netip.Prefix
	tokens float64
	at     time.Time // when tokens was computed
}

func newAuthLimiter(perMinute, burst, max int) *authLimiter {
	return &authLimiter{
		perSecond: float64(perMinute) / 60,
		burst:     float64(burst),
		max:       max,
		srcs:      make(map[netip.Prefix]*list.Element),
	}
}

// authSource is the source a failed authentication is counted against:
// the client's IPv4 address or IPv6 /64, from the connection (never from
// a header a client can write). ok is false when remoteAddr is not an
// IP:port (then nothing is counted).
func authSource(remoteAddr string) (netip.Prefix, bool) {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return netip.Prefix{}, false
	}
	a := ap.Addr().Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, err := a.Prefix(bits)
	return p, err == nil
}

// refill brings b's tokens to now.
func (l *authLimiter) refill(b *authBucket, now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(l.burst, b.tokens+d.Seconds()*l.perSecond)
	}
	b.at = now
}

// blocked reports whether src has no failure left, and if so how long
// until it has one.
func (l *authLimiter) blocked(src netip.Prefix, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.srcs[src]
	if !ok {
		return 0, false
	}
	b := e.Value.(*authBucket)
	l.refill(b, now)
	if b.tokens >= 1 {
		return 0, false
	}
	return time.Duration((1 - b.tokens) / l.perSecond * float64(time.Second)), true
}

// failed takes a token from src's bucket (a new source starts full).
func (l *authLimiter) failed(src netip.Prefix, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.srcs[src]
	if !ok {
		if len(l.srcs) >= l.max {
			old := l.lru.Back()
			delete(l.srcs, old.Value.(*authBucket).src)
			l.lru.Remove(old)
		}
		e = l.lru.PushFront(&authBucket{src: src, tokens: l.burst, at: now})
		l.srcs[src] = e
	} else {
		l.lru.MoveToFront(e)
	}
	b := e.Value.(*authBucket)
	l.refill(b, now)
	b.tokens = max(b.tokens-1, 0)
}

// sources returns how many sources are remembered.
func (l *authLimiter) sources() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.srcs)
}

// authFailure is why a request was refused at authentication: the label
// of redlockd_auth_failures_total.
type authFailure uint8

const (
	authMissingKey    authFailure = iota // no X-API-Key (401)
	authUnknownKey                       // an X-API-Key no account has (401)
	authSourceLimited                    // refused unread: its source failed too often (429)
	authAdminToken                       // an admin request without the admin token (401)
	numAuthFailures
)

var authFailureNames = [numAuthFailures]string{"missing_key", "unknown_key", "source_limited", "admin_token"}

func (f authFailure) String() string { return authFailureNames[f] }

// authLogsPerSecond is how many failed-authentication lines are logged
// per second at most; the others are only counted
// (redlockd_auth_failures_total).
const authLogsPerSecond = 5

// authFailed counts a request refused at authentication and logs it,
// sampled (authLogsPerSecond): the source address, the reason and, for
// an unknown key, the first 8 hex characters of its SHA-256 — never the
// key. It costs no call to the masters.
func (s *Server) authFailed(r *http.Request, why authFailure, key string) {
	s.metrics.authFailures[why].Inc()
	ce := s.authLog.Check(zap.WarnLevel, "authentication failed")
	if ce == nil {
		return
	}
	fields := []zap.Field{zap.String("remote", r.RemoteAddr), zap.Stringer("reason", why)}
	if key != "" {
		h := sha256.Sum256([]byte(key))
		fields = append(fields, zap.String("key_sha256", hex.EncodeToString(h[:4])))
	}
	ce.Write(fields...)
}

// authSourceLimited is the failed-authentication check both listeners run
// before looking at a credential: r's source (ok false when RemoteAddr has
// none) and whether it is out of tokens — then the refusal is counted and
// Retry-After set, and the caller answers 429.
func (s *Server) authSourceLimited(w http.ResponseWriter, r *http.Request, now time.Time) (src netip.Prefix, ok, limited bool) {
	src, ok = authSource(r.RemoteAddr)
	if !ok {
		return src, false, false
	}
	wait, blocked := s.authLim.blocked(src, now)
	if !blocked {
		return src, true, false
	}
	s.authFailed(r, authSourceLimited, "")
	w.Header().Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
	return src, true, true
}

// authMiss takes a token from the source's bucket for a failed
// authentication (a no-op without a source).
func (s *Server) authMiss(src netip.Prefix, ok bool, now time.Time) {
	if ok {
		s.authLim.failed(src, now)
	}
}
