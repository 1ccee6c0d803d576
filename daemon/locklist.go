package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/redlockd/redlockd/internal/keyenc"
	"github.com/redlockd/redlockd/redlock"
)

// Bounds of GET /admin/locks.
const (
	// DefaultListLimit is the page size of a listing without limit.
	DefaultListLimit = 50
	// MaxListLimit is the largest limit a listing accepts.
	MaxListLimit = redlock.MaxListCount
	// MaxListings bounds the listings one daemon runs at once, and
	// MaxAccountListings those of one account; one more is refused with
	// 429 too_many_listings. Each listing has at most 8 status reads per
	// master in flight (redlock.List), so the masters hold at most
	// MaxListings × 8 of this daemon's listing reads at a time, whatever
	// the number of operators and scripts listing.
	MaxListings        = 2
	MaxAccountListings = 1
)

// listGate counts the listings running in this daemon, in all and per
// account.
type listGate struct {
	mu        sync.Mutex
	total     int
	byAccount map[string]int
}

// listings is "1 listing" or "n listings".
func listings(n int) string {
	if n == 1 {
		return "1 listing"
	}
	return strconv.Itoa(n) + " listings"
}

// enter takes a slot for a listing of account, or says why there is none.
func (g *listGate) enter(account string) (ok bool, why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.total >= MaxListings:
		return false, "too many listings: this daemon runs at most " + listings(MaxListings) + " (GET /admin/locks, GET /admin/idempotency) at once; retry after 1 s (Retry-After)"
	case g.byAccount[account] >= MaxAccountListings:
		return false, "too many listings: this daemon runs at most " + listings(MaxAccountListings) + " (GET /admin/locks, GET /admin/idempotency) at once per account; retry after 1 s (Retry-After)"
	}
	if g.byAccount == nil {
		g.byAccount = map[string]int{}
	}
	g.total++
	g.byAccount[account]++
	return true, ""
}

// leave gives account's slot back.
func (g *listGate) leave(account string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.total--
	if g.byAccount[account]--; g.byAccount[account] == 0 {
		delete(g.byAccount, account)
	}
}

// listedLock is one lock in the answer of GET /admin/locks. The holder's
// token is never shown.
type listedLock struct {
	Namespace  string `json:"namespace"`
	Key        string `json:"key"`
	TTL        int64  `json:"ttl"`
	ExpireAt   int64  `json:"expire_at"`
	ValidityMS int64  `json:"validity_ms"`
	Fence      int64  `json:"fence,omitempty"`
	// Slot: a semaphore's permit (key is the semaphore's), its slot, as
	// the acquire answered it; absent for a lock.
	Slot *int `json:"slot,omitempty"`
}

// lockList is the answer of GET /admin/locks.
type lockList struct {
	Account string `json:"account"`
	// Removed is true for an account a reload removed: its locks stay
	// until their TTL ends, and its clients' releases get 401.
	Removed    bool         `json:"removed,omitempty"`
	Namespace  *string      `json:"namespace,omitempty"`
	Locks      []listedLock `json:"locks"`
	NextCursor string       `json:"next_cursor"`
}

// serveLockList answers GET /admin/locks?account=A[&namespace=N][&cursor=C][&limit=L]:
// one page of the locks held for account A (in namespace N only when
// namespace is given, "" being the default namespace), each with its
// namespace, key, remaining TTL (whole seconds rounded up, as status),
// expire_at, validity_ms and fence. next_cursor continues the listing; ""
// when it is complete. limit is 1 to MaxListLimit, default
// DefaultListLimit; a page may hold fewer locks, even none, while the
// listing goes on.
//
// Cost per page: one SCAN step (MATCH on the account's key prefix, COUNT
// limit) on one master and one pipelined status read of what it returned
// on every master (redlock.Client.List, which says what a listing
// guarantees while locks come and go). Bad parameters are answered 400
// naming the parameter; no quorum 503.
func (s *Server) serveLockList(w http.ResponseWriter, r *http.Request) {
	q, ok := s.parseListQuery(w, r, MaxListLimit)
	if !ok {
		return
	}
	account := q.account
	prefix := q.prefix(s.prefix + lockSpace)
	ans := lockList{Account: account, Removed: q.removed, Namespace: q.namespace, Locks: []listedLock{}}
	limit := q.limit
	if ok, why := s.listings.enter(account); !ok {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, codeTooManyListings, why)
		return
	}
	defer s.listings.leave(account)
	before := time.Now()
	page, err := s.locker.List(r.Context(), prefix, q.cursor, limit)
	switch {
	case err == nil:
	case errors.Is(err, redlock.ErrInvalid):
		writeError(w, http.StatusBadRequest, codeBadRequest, invalidArgument(err))
		return
	case r.Context().Err() != nil:
		writeError(w, statusClientClosed, codeCancelled, "request cancelled")
		return
	case errors.Is(err, redlock.ErrQuorumUnavailable):
		s.log.Warn("lock listing: no quorum", zap.Error(err))
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, codeQuorum, "cannot list the locks: "+s.listQuorumMessage(err)+"; retry with the same cursor")
		return
	default:
		s.log.Error("lock listing", zap.Error(err))
		writeError(w, http.StatusInternalServerError, codeInternal, "internal error; it has been logged")
		return
	}
	now := time.Now()
	for _, l := range page.Locks {
		// A semaphore's permit is a lock on one of its slot keys
		// ("<key>#permit:<slot>", redlock.PermitKey): listed under the
		// semaphore's key, with its slot.
		// A lock key is decoded first: a plain lock may be named like a
		// slot key ("a#permit:1" encodes its length in front of it).
		var slot *int
		acct, ns, key, err := decodeRedisKey(s.prefix, l.Key)
		if name, n, ok := redlock.ParsePermitKey(l.Key); err != nil && ok {
			acct, ns, key, err = decodeRedisKey(s.prefix, name)
			slot = &n
		}
		if err != nil || acct != account {
			continue // not a lock key: List matched the prefix only
		}
		var d lockData
		setValidity(&d, time.Time{}, now, before.Add(l.Validity))
		ans.Locks = append(ans.Locks, listedLock{
			Namespace: ns, Key: key,
			TTL:        max((d.validityMS+999)/1000, 1),
			ExpireAt:   d.expireAt,
			ValidityMS: d.validityMS,
			Fence:      l.Fence,
			Slot:       slot,
		})
	}
	ans.NextCursor = page.Cursor
	writeJSONValue(w, http.StatusOK, &ans)
}

// checkQueryText applies checkText's rules to a query parameter.
func checkQueryText(field, s string, minBytes, maxBytes int) string {
	v := jsonValue{kind: kString, str: s, notText: !utf8.ValidString(s)}
	if err := checkText(field, &v, minBytes, maxBytes); err != nil {
		return err.msg
	}
	return ""
}

// hasAccount reports whether account is configured (now: a reload may have
// changed the accounts).
func (s *Server) hasAccount(account string) bool {
	for _, k := range *s.keys.Load() {
		if k.Account == account {
			return true
		}
	}
	return false
}

// wasRemoved reports whether a reload removed account since this daemon
// started (and none added it back).
func (s *Server) wasRemoved(account string) bool {
	p := s.removed.Load()
	return p != nil && (*p)[account]
}

// encPart is writePart's encoding of one part of a lock key.
func encPart(s string) string {
	var b strings.Builder
	keyenc.WritePart(&b, s)
	return b.String()
}

// listQuorumMessage is quorumMessage over the masters of the group that
// failed the listing (all masters with one group).
func (s *Server) listQuorumMessage(err error) string {
	if name, h, ok := groupOf(s.health, err); ok {
		return "master group " + name + ": " + quorumMessage(err, h.Masters())
	}
	return quorumMessage(err, s.health.Masters())
}

// listQuery is a listing's parameters (GET /admin/locks and
// /admin/idempotency): account (configured, or removed by a reload since
// this daemon started), namespace (nil: every namespace), cursor and limit.
type listQuery struct {
	account   string
	removed   bool
	namespace *string
	cursor    string
	limit     int
}

// parseListQuery reads a listing's query string (account, namespace,
// cursor, limit 1 to maxLimit, each at most once). On a bad parameter it
// answers 400 naming it and returns false.
func (s *Server) parseListQuery(w http.ResponseWriter, r *http.Request, maxLimit int) (listQuery, bool) {
	bad := func(msg string) (listQuery, bool) {
		writeError(w, http.StatusBadRequest, codeBadRequest, msg)
		return listQuery{}, false
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return bad("query string: not valid URL encoding")
	}
	for name, vs := range q {
		switch name {
		case "account", "namespace", "cursor", "limit":
			if len(vs) > 1 {
				return bad(name + ": given more than once")
			}
		default:
			return bad("unknown parameter " + quoteCut(name, 32) + "; the parameters are account, namespace, cursor, limit")
		}
	}
	lq := listQuery{account: q.Get("account"), cursor: q.Get("cursor"), limit: DefaultListLimit}
	if msg := checkQueryText("account", lq.account, 1, MaxAccountBytes); msg != "" {
		return bad(msg)
	}
	lq.removed = s.wasRemoved(lq.account)
	if !lq.removed && !s.hasAccount(lq.account) {
		return bad("account: " + quoteCut(lq.account, 64) + " is not a configured account, nor one a reload removed since this daemon started")
	}
	if vs, ok := q["namespace"]; ok {
		ns := vs[0]
		if msg := checkQueryText("namespace", ns, 0, maxNamespaceBytes); msg != "" {
			return bad(msg)
		}
		lq.namespace = &ns
	}
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > maxLimit {
			return bad(fmt.Sprintf("limit: must be an integer from 1 to %d, got %s", maxLimit, quoteCut(v[0], 32)))
		}
		lq.limit = n
	}
	return lq, true
}

// prefix is the listing's key prefix under base: the account's, and the
// namespace's when one was given.
func (q listQuery) prefix(base string) string {
	p := base + encPart(q.account) + ":"
	if q.namespace != nil {
		p += encPart(*q.namespace) + ":"
	}
	return p
}

// invalidArgument is the part of a redlock ErrInvalid's message that names
// the argument ("cursor: …"): what follows "redlock: invalid argument: ",
// and, with master groups, the group's name before that.
func invalidArgument(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, redlock.ErrInvalid.Error()+": "); i >= 0 {
		return msg[i+len(redlock.ErrInvalid.Error()+": "):]
	}
	return msg
}
