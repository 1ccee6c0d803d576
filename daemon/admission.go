package daemon

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redlockd/redlockd/daemon/limits"
)

// The account limits (quota, rate, max_locks) are package limits; a
// request deals with them through one limits.Admission (call.limits).

// admit charges the call to its account's quota and rate, or answers 429
// and reports false. It runs once the request is known to be valid, before
// the masters are asked. A limits.Release or limits.Extend call (a lock's
// release or extend) is never refused, whatever its token: as for a
// release, checking the token first would cost a quorum read; the
// idempotency actions have their own (admitIdem).
func (s *Server) admit(w http.ResponseWriter, c *call, kind limits.Call, now time.Time) bool {
	r, ok := c.limits.Admit(kind, now)
	if !ok {
		s.refuse(w, c, r)
	}
	return ok
}

// refund gives back what admit charged, for a call refused before it
// reached the masters.
func (s *Server) refund(c *call) { c.limits.Refund(time.Now()) }

// refuse answers 429 for a limit, with Retry-After in whole seconds
// (rounded up, at least 1).
func (s *Server) refuse(w http.ResponseWriter, c *call, r limits.Refusal) {
	if r.Reason == limits.SetAboveMaxLocks {
		// No limit was hit: the request can never pass (400, no
		// Retry-After; not counted as a refusal).
		s.fail(w, c, http.StatusBadRequest, resBadRequest, codeBadRequest, r.Msg)
		return
	}
	c.limits.Refused(r)
	res, code := resQuotaExhausted, codeQuotaExhausted
	switch r.Reason {
	case limits.RateLimited:
		res, code = resRateLimited, codeRateLimited
	case limits.TooManyLocks:
		res, code = resTooManyLocks, codeTooManyLocks
	}
	secs := max(int64((r.RetryAfter+time.Second-1)/time.Second), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	s.fail(w, c, http.StatusTooManyRequests, res, code, r.Msg)
}

// quotaMsg is an answer's msg with the seed API's quota note when the
// account's quota is low (limits.Admission.QuotaNote). A msg the action
// already has (a held lock, a wrong token) is kept as it is.
func quotaMsg(msg string, c *call) string {
	if msg != "" {
		return msg
	}
	return c.limits.QuotaNote()
}

func (s *Server) newLimiter(o *Options) error {
	interval := cmp.Or(o.LimitsSyncInterval, limits.DefaultSyncInterval)
	if interval < 0 {
		return fmt.Errorf("daemon: Options.LimitsSyncInterval: %v is negative", interval)
	}
	keys := *s.keys.Load()
	if err := checkLimits(keys, o.LimitStore); err != nil {
		return err
	}
	s.limitStore = o.LimitStore
	s.limits = limits.NewLimiter(s.log.Named("limits"), o.LimitStore, s.prefix, interval, s.metrics.limits)
	if lg, ok := s.locker.(interface{ LockGroup(string) int }); ok && o.LimitStore != nil && o.LimitStore.Groups() > 1 {
		// With master groups, a lock is counted in its group's held set
		// (limits.NewGroupStore); idempotency leases, outside the lock
		// keys' space, live in the first group with the records.
		lockKeys := s.prefix + lockSpace
		s.limits.PlaceBy(func(key string) int {
			if !strings.HasPrefix(key, lockKeys) {
				return 0
			}
			return lg.LockGroup(key)
		})
	}
	s.limits.SetAccounts(limitAccounts(keys))
	return nil
}

// limitAccounts are keys' accounts and limits, in keys' order.
func limitAccounts(keys []APIKey) []limits.Account {
	out := make([]limits.Account, len(keys))
	for i, k := range keys {
		out[i] = limits.Account{Name: k.Account, Limits: k.Limits}
	}
	return out
}

// checkLimits checks the accounts' limits; any limit needs a store.
func checkLimits(keys []APIKey, store *limits.Store) error {
	for i, k := range keys {
		l := k.Limits
		switch {
		case l.QuotaCalls < 0 || l.Rate < 0 || math.IsNaN(l.Rate) || l.Burst < 0 || l.MaxLocks < 0:
			return fmt.Errorf("daemon: Options.APIKeys[%d] (%s).Limits: negative", i, k.Account)
		case (l.QuotaCalls > 0) != (l.QuotaWindow >= time.Millisecond):
			return fmt.Errorf("daemon: Options.APIKeys[%d] (%s).Limits: QuotaCalls %d and QuotaWindow %v: set both (the window at least 1ms) or neither", i, k.Account, l.QuotaCalls, l.QuotaWindow)
		case l.Rate > 0 && l.Burst < 1:
			return fmt.Errorf("daemon: Options.APIKeys[%d] (%s).Limits.Burst: %d, need at least 1 with a rate", i, k.Account, l.Burst)
		case l.Any() && store == nil:
			return fmt.Errorf("daemon: Options.LimitStore: required, since account %s has limits", k.Account)
		}
	}
	return nil
}
