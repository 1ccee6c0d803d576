package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/redlockd/redlockd/daemon/limits"
	"github.com/redlockd/redlockd/redlock"
)

// Messages of answered-but-negative outcomes.
const (
	msgHeld        = "lock is held by another owner"
	msgNotHeld     = "lock not held: it expired or was already released"
	msgSetNotHeld  = "lock not held: a key of the set is not held with this token (it expired, was already released, or is not one of the keys the token was granted)"
	msgDelayed     = "lock is in its lock-delay: the last holder's lock ended without a release; retry after retry_after"
	msgPermitsHeld = "every permit of the semaphore is held"
	// msgPermitsDelayed: every slot held or in its lock-delay (all of
	// them delayed too).
	msgPermitsDelayed = "every permit of the semaphore is held or in its lock-delay (a holder's lock ended without a release); retry after retry_after"
	// msgWaitStopped ends the msg of a waiting acquire answered because
	// the daemon is shutting down (Serve, step 3).
	msgWaitStopped = "; this daemon is shutting down, so the wait ended before wait_ms: retry, on another replica"
	msgContended   = "lock is contended: other attempts hold the key on some masters and none was granted (callers that split the votes release theirs at once); retry after retry_after"
	msgWrongToken  = "token does not match the current holder"
	msgQuerySecret = "API keys and tokens must not be sent in the URL query string: send the API key in the X-API-Key header and the token in the JSON body"
	msgPathSecret  = "API keys must not be sent in the URL: send the API key in the X-API-Key header"
	msgTwoAPIKeys  = "send exactly one X-API-Key header"
	// Content-Type is a singleton field (RFC 9110 section 8.3): with two,
	// a proxy that checks the first and the daemon could disagree.
	msgTwoContentTypes = "send at most one Content-Type header (application/json)"
	msgAuthLimited     = "too many requests without a valid API key from this address; retry after Retry-After with a valid key in the X-API-Key header"
	msgTwoFramings     = "a request must not have both Content-Length and Transfer-Encoding (RFC 9112 section 6.1); the connection is closed"
	msgBodyTimeout     = "body: not received within the read timeout"
)

// call is what the log line and the metrics of one action API request need.
type call struct {
	action  action
	result  result
	status  int
	account string
	// token is the request's or the granted lease's token. Only the first
	// 8 hex characters of its SHA-256 are logged, and only computed when a
	// line is written.
	token string
	err   error // for warn and error lines
	// limits is the request's admission by its account's limits, the
	// zero value when the account has none; it holds remain_quota for the
	// answer.
	limits limits.Admission
	// start is when the handler began: elapsed_ms counts from here.
	start time.Time
	// waited: an acquire with wait_ms, timed apart (Metrics.request);
	// waitEnds is when its wait_ms runs out.
	waited   bool
	waitEnds time.Time
	// keysOfOne: the request sent keys with one key (lockRequest); its
	// answer names it in keys too.
	keysOfOne bool
	// idemMaxBytes is the account's MaxIdempotencyBytes.
	idemMaxBytes int64
}

// serveLock answers POST /v1/lock and POST /gateway/distlock. Checks run in
// this order, the first failure answering (after checkURL, which refuses
// credentials in the URL for every route): method (405), more than one
// X-API-Key (400), a source with too many failed authentications (429),
// X-API-Key missing or unknown (401), Content-Type (415), body size (413), body (400); then the action,
// whose answer is 200 when the masters answered, 503 when no quorum did.
func (s *Server) serveLock(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	c := call{result: resInternal, status: http.StatusInternalServerError, start: start}
	defer func() { s.finish(r, &c, time.Since(start)) }()

	entry := s.guardRequest(w, r, &c, start)
	if entry == nil {
		return
	}
	bb, done := s.readLockBody(w, r, &c)
	defer putBody(bb)
	if done {
		return
	}
	req, a, berr := parseLockRequest(bb.Bytes(), &s.lim)
	if berr == nil {
		berr = accountLockDelay(&req, entry.LockDelay, &s.lim)
	}
	c.action = a
	if berr != nil {
		s.fail(w, &c, http.StatusBadRequest, resBadRequest, codeBadRequest, berr.msg)
		return
	}
	c.token = req.token
	kind := limits.Ordinary
	switch req.action {
	case actRelease:
		kind = limits.Release
	case actExtend:
		kind = limits.Extend
	}
	if !s.admit(w, &c, kind, start) {
		return
	}
	s.dispatch(r.Context(), w, &c, &req, entry.Account)
}

// guardRequest is the request guard of POST /v1/lock: the method, one API
// key that is known (with the per-source limit on failed
// authentications), and the Content-Type. It returns the key's entry, with
// c's account and limits set, or nil once it has answered the refusal.
func (s *Server) guardRequest(w http.ResponseWriter, r *http.Request, c *call, start time.Time) *APIKey {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.fail(w, c, http.StatusMethodNotAllowed, resMethodNotAllowed, codeMethodNotAllowed,
			"method not allowed: use POST with a JSON body")
		return nil
	}
	// Two X-API-Key headers are ambiguous credentials (a proxy adding its
	// own, a client library merging defaults): refused rather than letting
	// one win. The values are never echoed.
	apiKeys := r.Header[hdrAPIKey]
	if len(apiKeys) > 1 {
		s.fail(w, c, http.StatusBadRequest, resBadRequest, codeBadRequest, msgTwoAPIKeys)
		return nil
	}
	apiKey := ""
	if len(apiKeys) == 1 {
		apiKey = apiKeys[0]
	}
	src, srcOK, limited := s.authSourceLimited(w, r, start)
	if limited {
		s.fail(w, c, http.StatusTooManyRequests, resAuthLimited, codeTooManyAuthFailures, msgAuthLimited)
		return nil
	}
	if apiKey == "" {
		s.authMiss(src, srcOK, start)
		s.authFailed(r, authMissingKey, "")
		s.fail(w, c, http.StatusUnauthorized, resUnauthorized, codeUnauthorized,
			"missing API key: send it in the X-API-Key header")
		return nil
	}
	entry := s.apiKey(apiKey)
	if entry == nil {
		s.authMiss(src, srcOK, start)
		s.authFailed(r, authUnknownKey, apiKey)
		s.fail(w, c, http.StatusUnauthorized, resUnauthorized, codeUnauthorized,
			"unknown API key: send a valid key in the X-API-Key header")
		return nil
	}
	c.account, c.idemMaxBytes = entry.Account, entry.MaxIdempotencyBytes
	c.limits = s.limits.Admission(entry.Account, entry.Limits, start)
	if len(r.Header[hdrContentType]) > 1 {
		s.fail(w, c, http.StatusBadRequest, resBadRequest, codeBadRequest, msgTwoContentTypes)
		return nil
	}
	if ct := headerValue(r.Header, hdrContentType); ct != "" && !isJSONContentType(ct) {
		msg := `Content-Type must be application/json (with curl: -H "Content-Type: application/json")`
		if mt, params, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
			// The media type is right: a parameter is not (JSON is UTF-8,
			// RFC 8259; the value is not repeated, it may be anything).
			msg = "Content-Type: application/json takes no parameter but charset=utf-8 (JSON is UTF-8); send the body in UTF-8, without another charset"
			if _, ok := params["charset"]; !ok {
				msg = "Content-Type: application/json takes no parameter but charset=utf-8; leave the others out"
			}
		}
		s.fail(w, c, http.StatusUnsupportedMediaType, resUnsupportedMediaType, codeUnsupportedMedia, msg)
		return nil
	}
	return entry
}

// readLockBody reads the request body (up to the idempotency actions'
// larger limit when they are on) into a pooled buffer, which the caller
// returns with putBody. An idempotency action is served from here; a lock
// action's body must fit maxBody. done reports that the request has been
// answered (served, or refused: 413, 400, a body timeout).
func (s *Server) readLockBody(w http.ResponseWriter, r *http.Request, c *call) (bb *bodyBuf, done bool) {
	limit := s.maxBody
	if s.idem != nil {
		limit = max(limit, s.idem.bodyLimit)
	}
	bb, status, msg := s.readBodyUpTo(r, limit)
	if status == 0 {
		if a, ok := idemActionOf(bb.Bytes()); ok {
			if s.idem == nil {
				c.action = actIdempotency
				s.fail(w, c, http.StatusBadRequest, resBadRequest, codeBadRequest, "action: "+a.String()+": idempotency records are not enabled on this daemon")
				return bb, true
			}
			s.serveIdempotency(r.Context(), w, c, a, bb.Bytes())
			return bb, true
		}
		if int64(bb.Len()) > s.maxBody {
			status, msg = http.StatusRequestEntityTooLarge, s.msgTooLarge
		}
	}
	if status == 0 {
		return bb, false
	}
	res, code := resBadRequest, codeBadRequest
	switch {
	case status == http.StatusRequestEntityTooLarge:
		res, code = resTooLarge, codeTooLarge
	case msg == msgBodyTimeout:
		res = resTimeout
	}
	if status == http.StatusBadRequest {
		// The body did not arrive in time or could not be read: where it
		// ends is not known, so nothing after it on this connection can
		// be read as a request. The connection closes after the answer.
		w.Header()["Connection"] = hvClose
	}
	s.fail(w, c, status, res, code, msg)
	return bb, true
}

// dispatch runs an admitted lock action of account: a multi-key set's, or
// one key's (a semaphore permit's release or extend acts on its slot
// lock).
func (s *Server) dispatch(ctx context.Context, w http.ResponseWriter, c *call, req *lockRequest, account string) {
	c.keysOfOne = req.keysOfOne
	if req.keys != nil {
		rks := make([]string, len(req.keys))
		for i, k := range req.keys {
			rks[i] = redisKey(s.prefix, account, req.namespace, k)
		}
		s.serveSet(ctx, w, c, req, rks)
		return
	}
	rk := redisKey(s.prefix, account, req.namespace, req.key)
	if req.hasSlot {
		rk = redlock.PermitKey(rk, int(req.slot))
	}
	switch req.action {
	case actAcquire:
		s.acquire(ctx, w, c, req, rk)
	case actRelease:
		s.release(ctx, w, c, req, rk)
	case actExtend:
		s.extend(ctx, w, c, req, rk)
	case actStatus:
		s.status(ctx, w, c, req, rk)
	}
}

// admitAcquire admits an acquire of keys lock keys: a place among the
// account's waiters when it waits (429 too_many_waiters otherwise), and
// keys held-lock slots of max_locks (429 too_many_locks). When it
// answered the refusal itself it returns false; else leave ends the wait's
// place, once the acquire is done.
func (s *Server) admitAcquire(w http.ResponseWriter, c *call, ar *AcquireRequest, keys int) (leave func(), ok bool) {
	leave = func() {}
	if ar.Wait > 0 {
		c.waited, c.waitEnds = true, c.start.Add(ar.Wait)
		ok, why := s.waiters.enter(c.account)
		if !ok {
			s.refund(c)
			w.Header().Set("Retry-After", "1")
			s.fail(w, c, http.StatusTooManyRequests, resTooManyWaiters, codeTooManyWaiters, why)
			return nil, false
		}
		s.metrics.waiting.Inc()
		leave = func() {
			s.waiters.leave(c.account)
			s.metrics.waiting.Dec()
		}
		ar.StopWaiting = s.stopWaits
	}
	if r, ok := c.limits.Reserve(keys); !ok {
		leave()
		s.refund(c)
		s.refuse(w, c, r)
		return nil, false
	}
	return leave, true
}

func (s *Server) acquire(ctx context.Context, w http.ResponseWriter, c *call, req *lockRequest, rk string) {
	ar := AcquireRequest{Key: rk, TTL: time.Duration(req.ttl) * time.Second, Wait: time.Duration(req.waitMS) * time.Millisecond, Permits: int(req.permits), LockDelay: time.Duration(req.lockDelayMS) * time.Millisecond}
	leave, ok := s.admitAcquire(w, c, &ar, 1)
	if !ok {
		return
	}
	defer leave()
	lease, err := s.locker.Acquire(ctx, ar)
	held := rk
	if err == nil && ar.Permits > 0 {
		held = redlock.PermitKey(rk, lease.Slot)
	}
	c.limits.Done(held, lease.Token)
	d := lockData{action: actAcquire, key: req.key, outcome: outAcquired, permits: req.permits}
	if err == nil && ctx.Err() != nil {
		s.releaseAbandoned(c, []string{held}, lease.Token, func(ctx context.Context) (int, error) {
			return s.locker.Release(ctx, held, lease.Token)
		})
		err = ctx.Err()
	}
	if err == nil {
		c.token = lease.Token
		d.ok, d.token, d.fence = true, lease.Token, lease.Fence
		if ar.Permits > 0 {
			d.slot, d.hasSlot = int64(lease.Slot), true
		}
		d.ttl, d.hasTTL = req.ttl, true
		setValidity(&d, c.start, time.Now(), lease.ValidUntil)
		s.ok(w, c, resAcquired, &d, "")
		return
	}
	s.acquireRefused(ctx, w, c, &d, err)
}

// waitsStopped reports whether the waits were ended by a shutdown.
func (s *Server) waitsStopped() bool { return stopped(s.stopWaits) }

// releaseAbandoned releases a lock granted to a caller that went away
// while it was being granted (a timeout, a cancelled wait, a client
// killed): its answer, the only place the token is, cannot reach anyone,
// so the lock would only block its key for its whole TTL. The release
// runs on a context of its own (abandonedReleaseTimeout). A grant whose
// caller leaves after this check, as the answer is written, is not seen
// here and ends with its TTL.
func (s *Server) releaseAbandoned(c *call, keys []string, token string, release func(context.Context) (int, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonedReleaseTimeout)
	defer cancel()
	members := make([]string, len(keys))
	for i, k := range keys {
		members[i] = token // a single-key lock's, or a permit's
		if len(keys) > 1 {
			members[i] = heldMember(token, k)
		}
	}
	err := countedRelease(c, keys, members, func() error {
		_, err := release(ctx)
		return err
	})
	s.log.Info("lock granted to a caller that went away: released", zap.Strings("keys", keys), zap.Error(err))
}

// abandonedReleaseTimeout bounds the release of a lock whose caller went
// away (releaseAbandoned).
const abandonedReleaseTimeout = 5 * time.Second

// acquireRefused answers an acquire that err refused: held (with
// retry_after), or the failure's own answer.
func (s *Server) acquireRefused(ctx context.Context, w http.ResponseWriter, c *call, d *lockData, err error) {
	if s.lockerFailed(ctx, w, c, err) {
		return
	}
	if errors.Is(err, redlock.ErrLockHeld) {
		var oe *redlock.OutcomeError
		ra := time.Duration(0)
		if errors.As(err, &oe) && !oe.Contended {
			// Contended: the contenders' keys go within a round trip,
			// but for a client that died; retry_after is the minimum.
			ra = oe.RetryAfter
		}
		d.retryAfter = max(int64((ra+time.Second-1)/time.Second), 1)
		// The same hint as a header, for HTTP clients and proxies that
		// honour Retry-After on any answer.
		w.Header().Set("Retry-After", strconv.FormatInt(d.retryAfter, 10))
		msg := msgHeld
		if d.permits > 0 {
			msg = msgPermitsHeld
		}
		switch {
		case oe == nil:
		case oe.Delayed > 0 && d.permits > 0:
			// Some slots held and the others delayed, or every slot
			// delayed: a semaphore's refusal names its permits either
			// way (docs/api.md).
			msg = msgPermitsDelayed
		case oe.Delayed > 0 && oe.Delayed == oe.Refused:
			msg = msgDelayed
		case oe.Contended:
			msg = msgContended
		}
		if c.waited && s.waitsStopped() && time.Now().Before(c.waitEnds) {
			msg += msgWaitStopped
			d.waitStopped = true
		}
		s.ok(w, c, resNotAcquired, d, msg)
		return
	}
	s.internal(w, c, err)
}

func (s *Server) release(ctx context.Context, w http.ResponseWriter, c *call, req *lockRequest, rk string) {
	err := countedRelease(c, []string{rk}, []string{req.token}, func() error {
		_, err := s.locker.Release(ctx, rk, req.token)
		return err
	})
	d := lockData{action: actRelease, key: req.key, outcome: outReleased}
	if err == nil {
		d.ok = true
		s.ok(w, c, resReleased, &d, "")
		return
	}
	if s.lockerFailed(ctx, w, c, err) {
		return
	}
	if errors.Is(err, redlock.ErrNotHeld) {
		s.ok(w, c, resNotReleased, &d, notHeldSlotMsg(req, err))
		return
	}
	s.internal(w, c, err)
}

// releaseChange is what a release that ended with err does to its
// account's held-lock count: Released, NotHeld, or nothing (ok false) when
// the masters did not answer.
// countedRelease runs release and records it for the account's max_locks
// (limits.Admission): each of keys, in the account's held set as
// members[i], is marked as being released first (Releasing), so that a
// sync round that ends before the release is recorded does not count it
// out twice; then the release is recorded (Changed) when its error says
// what became of the lock (releaseChange), and the mark is ended
// (ReleaseEnded) when it does not.
func countedRelease(c *call, keys, members []string, release func() error) error {
	for i, k := range keys {
		c.limits.Releasing(k, members[i])
	}
	err := release()
	ch, ok := releaseChange(err)
	for i, k := range keys {
		if ok {
			c.limits.Changed(k, members[i], ch)
		} else {
			c.limits.ReleaseEnded(k, members[i])
		}
	}
	return err
}

func releaseChange(err error) (ch limits.Change, ok bool) {
	switch {
	case err == nil:
		return limits.Released, true
	case errors.Is(err, redlock.ErrNotHeld):
		return limits.NotHeld, true
	}
	return 0, false
}

func (s *Server) extend(ctx context.Context, w http.ResponseWriter, c *call, req *lockRequest, rk string) {
	lease, err := s.locker.Extend(ctx, rk, req.token, time.Duration(req.ttl)*time.Second)
	d := lockData{action: actExtend, key: req.key, outcome: outExtended}
	if err == nil {
		c.limits.Changed(rk, req.token, limits.Extended)
		d.ok, d.fence = true, lease.Fence
		setValidity(&d, c.start, time.Now(), lease.ValidUntil)
		// An extend never shortens: with a ttl below what was left, the
		// lock keeps the longer time, and ttl says so (extendedTTL).
		d.ttl, d.hasTTL = extendedTTL(req.ttl, lease.TTL, d.validityMS), true
		s.ok(w, c, resExtended, &d, "")
		return
	}
	if s.lockerFailed(ctx, w, c, err) {
		return
	}
	if errors.Is(err, redlock.ErrNotHeld) {
		s.ok(w, c, resNotExtended, &d, notHeldSlotMsg(req, err))
		return
	}
	s.internal(w, c, err)
}

// extendedTTL is an extend answer's ttl in seconds: how long the lock now
// lasts — the ttl asked for, or less when a lock-delay capped the extend
// at max_ttl minus the delay (granted, the Locker's Lease.TTL; 0 when it
// does not tell), or the validity in seconds rounded up when more (an
// extend never shortens a lock; rounded up as status rounds its ttl, so
// ttl is never below the time that was left: 3,507 ms left said 3).
func extendedTTL(asked int64, granted time.Duration, validityMS int64) int64 {
	if granted > 0 {
		asked = min(asked, int64(granted/time.Second))
	}
	return max(asked, (validityMS+999)/1000)
}

func (s *Server) status(ctx context.Context, w http.ResponseWriter, c *call, req *lockRequest, rk string) {
	// Validity counts from the end of the read and the read started after
	// before, so before+Validity is never later than the truth.
	before := time.Now()
	if req.permits > 0 {
		s.semaphoreStatus(ctx, w, c, req, rk, before)
		return
	}
	st, err := s.locker.Status(ctx, rk)
	if err != nil {
		if !s.lockerFailed(ctx, w, c, err) {
			s.internal(w, c, err)
		}
		return
	}
	d := lockData{action: actStatus, key: req.key, outcome: outHeld, ok: st.Held}
	if !st.Held {
		s.ok(w, c, resNotHeld, &d, "")
		return
	}
	setValidity(&d, c.start, time.Now(), before.Add(st.Validity))
	// The holder's fence, stored with its lock (redlock/fence.go), never
	// its token; absent (0) while the masters read do not have it yet.
	d.fence = st.Fence
	// Whole seconds rounded up, and at least 1: a held lock never shows
	// ttl 0. validity_ms and expire_at stay exact and conservative.
	d.ttl, d.hasTTL = max((d.validityMS+999)/1000, 1), true
	s.ok(w, c, resHeld, &d, "")
}

// semaphoreStatus answers a status with permits: held when every permit
// is taken (an acquire would be refused), taken, and next_free_ms, the
// shortest validity among the holders (no permit is sure to free before
// it), counted from the read's start.
func (s *Server) semaphoreStatus(ctx context.Context, w http.ResponseWriter, c *call, req *lockRequest, rk string, before time.Time) {
	st, err := s.locker.SemaphoreStatus(ctx, rk, int(req.permits))
	if err != nil {
		if !s.lockerFailed(ctx, w, c, err) {
			s.internal(w, c, err)
		}
		return
	}
	d := lockData{action: actStatus, key: req.key, outcome: outHeld, ok: st.Taken >= st.Permits,
		permits: req.permits, taken: int64(st.Taken), hasTaken: true}
	if st.Taken > 0 {
		d.nextFreeMS, d.hasNextFree = max(time.Until(before.Add(st.NextFree)), 0).Milliseconds(), true
	}
	res := resNotHeld
	if d.ok {
		res = resHeld
	}
	s.ok(w, c, res, &d, "")
}

// setValidity fills validity_ms and expire_at (floor of now + validity, in
// Unix seconds: never later than the truth) from the end of validity, and,
// when start (the handler's start) is not zero, elapsed_ms: whole
// milliseconds (rounded down) from start to now. elapsed_ms covers all the
// request spent in the daemon — a wait_ms wait, retries, the votes — so a
// client that counts validity_ms from the moment it sent the request plus
// elapsed_ms gets an end of validity never later than the truth (the
// handler began after the send) and earlier by at most the request's
// transit time; counting from the send alone charges the wait against the
// validity.
func setValidity(d *lockData, start, now, validUntil time.Time) {
	v := max(validUntil.Sub(now), 0)
	d.validityMS, d.hasVal = v.Milliseconds(), true
	d.expireAt, d.hasExpire = now.Add(v).Unix(), true
	if !start.IsZero() {
		d.elapsedMS, d.hasElapsed = max(now.Sub(start), 0).Milliseconds(), true
	}
}

// notHeldMsg says why release or extend found the token not holding the
// lock: another token holds it on some master, or it is gone everywhere.
func notHeldMsg(err error) string {
	var oe *redlock.OutcomeError
	if errors.As(err, &oe) && oe.Foreign > 0 {
		return msgWrongToken
	}
	var ce *redlock.ChangeExtendError
	if errors.As(err, &ce) && ce.Previous {
		return "lock not held in its previous master group: a lock taken through a daemon on the new master groups cannot be extended through a daemon in the moving phase (extend it through a daemon on the new groups; the new group's copy now ends with the TTL asked); otherwise it expired or was already released"
	}
	if errors.As(err, &ce) {
		return "lock not held in its new master group: a lock taken before the change of master groups cannot be extended during the change and ends with its TTL (acquire it again); otherwise it expired or was already released"
	}
	return msgNotHeld
}

// notHeldSlotMsg is notHeldMsg for a request that may name a semaphore
// permit's slot: a slot the token does not hold may be the wrong slot, not
// an ended permit (a black-box pass took "it expired or was already
// released" for a permit it still held, under slot 0, released as slot 1).
func notHeldSlotMsg(req *lockRequest, err error) string {
	msg := notHeldMsg(err)
	if req.hasSlot && msg == msgNotHeld {
		return "permit not held at slot " + strconv.FormatInt(req.slot, 10) + ": it expired or was already released, or this token holds another slot (send the slot its acquire answered)"
	}
	return msg
}

// notHeldSetMsg is notHeldMsg for a multi-key request: one key the token
// does not hold fails the whole set.
func notHeldSetMsg(err error) string {
	if msg := notHeldMsg(err); msg != msgNotHeld {
		return msg
	}
	return msgSetNotHeld
}

// lockerFailed answers the Locker errors common to every action: the
// client went away, or no quorum of masters answered. It reports whether
// it answered.
func (s *Server) lockerFailed(ctx context.Context, w http.ResponseWriter, c *call, err error) bool {
	var te *redlock.TTLError
	switch {
	case errors.As(err, &te):
		// A ttl the drift allowance eats whole (a large drift_factor, or
		// clock readings grown old): bad input, not a fault of the daemon.
		c.err = err
		s.fail(w, c, http.StatusBadRequest, resBadRequest, codeBadRequest, fmt.Sprintf(
			"ttl: %d leaves no validity after the clock-drift allowance of %d ms (drift_factor × ttl + the clock allowance); the minimum ttl is now %d",
			int64(te.TTL/time.Second), te.Allowance.Milliseconds(), int64((te.Min+time.Second-1)/time.Second)))
		return true
	case ctx.Err() != nil:
		c.err = err
		s.fail(w, c, statusClientClosed, resCancelled, codeCancelled, "request cancelled")
		return true
	case errors.Is(err, redlock.ErrQuorumUnavailable):
		c.err = err
		msg, retry := s.quorumAnswer(err, time.Now())
		w.Header().Set("Retry-After", strconv.FormatInt(int64((retry+time.Second-1)/time.Second), 10))
		s.fail(w, c, http.StatusServiceUnavailable, resQuorumUnavailable, codeQuorum, msg)
		return true
	}
	return false
}

// maxRetryAfter caps the Retry-After of a 503 during a known outage.
const maxRetryAfter = 5 * time.Minute

// maxBackoff caps the Retry-After of a 503 during an outage of unknown end.
const maxBackoff = 30 * time.Second

// outage remembers since when every action has failed for want of a
// quorum, so that the Retry-After of a 503 backs off as the outage lasts:
// half the outage so far, from 1 s to maxBackoff. Any action the masters
// answer ends it.
type outage struct{ since atomic.Int64 } // Unix nanoseconds; 0 = none

// backoff starts the outage if none is running and returns the hint.
func (o *outage) backoff(now time.Time) time.Duration {
	since := o.since.Load()
	if since == 0 {
		o.since.CompareAndSwap(0, now.UnixNano())
		return time.Second
	}
	return min(max((now.Sub(time.Unix(0, since))/2).Truncate(time.Second), time.Second), maxBackoff)
}

// end ends the outage; cheap when there is none.
func (o *outage) end() {
	if o.since.Load() != 0 {
		o.since.Store(0)
	}
}

func (s *Server) internal(w http.ResponseWriter, c *call, err error) {
	c.err = err
	s.fail(w, c, http.StatusInternalServerError, resInternal, codeInternal, "internal error; it has been logged")
}

func (s *Server) ok(w http.ResponseWriter, c *call, res result, d *lockData, msg string) {
	s.outage.end()
	c.result, c.status = res, http.StatusOK
	if c.keysOfOne && d.keys == nil {
		d.keys = []string{d.key}
	}
	writeData(w, d, quotaMsg(msg, c), c.limits.Remain())
}

func (s *Server) fail(w http.ResponseWriter, c *call, status int, res result, code, msg string) {
	c.result, c.status = res, status
	writeErrorQuota(w, status, code, msg, c.limits.Remain())
}

// finish records the request's metrics and logs it: every request at
// debug, 503 and cancelled ones at warn with the cause, 500 at error. A log
// line carries the account and at most an 8-character hash prefix of the
// token, never a key or a token.
func (s *Server) finish(r *http.Request, c *call, d time.Duration) {
	s.metrics.request(c.action, c.result, d, c.waited)
	lvl := zapcore.DebugLevel
	switch c.result {
	case resInternal:
		lvl = zapcore.ErrorLevel
	case resQuorumUnavailable:
		lvl = zapcore.WarnLevel
	}
	ce := s.log.Check(lvl, "request")
	if ce == nil {
		return
	}
	fields := make([]zap.Field, 0, 9)
	fields = append(fields,
		zap.String("path", r.URL.Path),
		zap.String("action", c.action.String()),
		zap.String("result", c.result.String()),
		zap.Int("status", c.status),
		zap.Duration("duration", d),
		zap.String("remote", r.RemoteAddr),
	)
	if c.account != "" {
		fields = append(fields, zap.String("account", c.account))
	}
	if c.token != "" {
		fields = append(fields, zap.String("token_sha256", tokenHashPrefix(c.token)))
	}
	if c.err != nil {
		fields = append(fields, zap.Error(c.err))
	}
	ce.Write(fields...)
}

// account returns the account whose key hashes like key. Every configured
// hash is compared, in constant time, whatever matches.
func (s *Server) account(key string) (string, bool) {
	k := s.apiKey(key)
	if k == nil {
		return "", false
	}
	return k.Account, true
}

// apiKey returns the configured entry of key (by hash, in constant time),
// nil when there is none. The entry is read-only: SetAPIKeys replaces the
// whole list.
func (s *Server) apiKey(key string) *APIKey {
	h := sha256.Sum256([]byte(key))
	keys := *s.keys.Load()
	found := -1
	for i := range keys {
		if subtle.ConstantTimeCompare(h[:], keys[i].Hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil
	}
	return &keys[found]
}

// isAPIKey reports whether v is a configured API key (by hash, in
// constant time). The empty string never is.
func (s *Server) isAPIKey(v string) bool {
	if v == "" {
		return false
	}
	_, ok := s.account(v)
	return ok
}

// secretName reports whether a query parameter name (unescaped, or raw
// when it does not unescape) looks like a credential: it contains "key" or
// "token", in any case (api_key, apikey, key, X-API-Key, access_token, …).
func secretName(name string) bool {
	name = strings.ToLower(name)
	return strings.Contains(name, "key") || strings.Contains(name, "token")
}

func cutAny(s, seps string) (before, after string, found bool) {
	if i := strings.IndexAny(s, seps); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// isJSONContentType accepts application/json, with an optional charset
// that must be UTF-8 (JSON is UTF-8, RFC 8259 §8.1).
func isJSONContentType(ct string) bool {
	if strings.EqualFold(ct, "application/json") {
		return true
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return false
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return false
		}
	}
	return true
}

// Canonical header names, looked up in the map directly: Header.Get would
// canonicalize them on every call (and "X-API-Key" is not canonical, so
// that would also allocate).
const (
	hdrAPIKey      = "X-Api-Key"
	hdrContentType = "Content-Type"
)

// headerValue is h.Get(key) for a key already in canonical form.
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// bodyBuf is a pooled request body buffer with the reader that limits it.
type bodyBuf struct {
	bytes.Buffer
	lim io.LimitedReader
}

var bodyPool = sync.Pool{New: func() any { return new(bodyBuf) }}

// putBody returns bb to the pool; nil is allowed.
func putBody(bb *bodyBuf) {
	if bb == nil || bb.Cap() > 64<<10 {
		return
	}
	bb.Reset()
	bb.lim = io.LimitedReader{}
	bodyPool.Put(bb)
}

// readBodyUpTo reads at most limit bytes (maxBody, or the idempotency
// actions' larger limit) into a pooled buffer, which the caller returns
// with putBody. status is 0 on success, else the HTTP status (413 or 400)
// with msg; bb is nil when nothing was read.
func (s *Server) readBodyUpTo(r *http.Request, limit int64) (bb *bodyBuf, status int, msg string) {
	tooLarge := s.msgTooLarge
	if limit != s.maxBody {
		tooLarge = "body: larger than the limit of " + strconv.FormatInt(limit, 10) + " bytes (for idempotency actions; " + strconv.FormatInt(s.maxBody, 10) + " for the others)"
	}
	if r.ContentLength > limit {
		return nil, http.StatusRequestEntityTooLarge, tooLarge
	}
	bb = bodyPool.Get().(*bodyBuf)
	bb.Reset()
	// One byte more than allowed tells a body at the limit from a larger
	// one (as http.MaxBytesReader does, without its allocation).
	bb.lim = io.LimitedReader{R: r.Body, N: limit + 1}
	_, err := bb.ReadFrom(&bb.lim)
	bb.lim.R = nil
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return bb, http.StatusBadRequest, msgBodyTimeout
	case err != nil:
		return bb, http.StatusBadRequest, "body: could not be read"
	case int64(bb.Len()) > limit:
		return bb, http.StatusRequestEntityTooLarge, tooLarge
	}
	return bb, 0, ""
}

// tokenHashPrefix is what a log line may carry of a token: the first 8 hex
// characters of its SHA-256.
func tokenHashPrefix(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:4])
}
