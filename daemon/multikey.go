package daemon

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/redlockd/redlockd/daemon/limits"
	"github.com/redlockd/redlockd/redlock"
)

// Multi-key locks over HTTP: a body with keys (2 to redlock.MaxMultiKeys
// distinct keys) acquires, releases, extends or reads them as one lock
// (redlock/multikey.go), with one token and one fence (strictly above
// every earlier holder's of each key). Each key counts against the
// account's max_locks. The answers are a single lock's, with data.key the
// first key and data.keys all of them.

// heldMember is the limits' member of the key rk (its full Redis key) of
// a set held by token (daemon/limits/scripts/held_sync.lua): "<token>
// <rk>", so that each key counts and is found by its name, whichever call
// changes it — a release or extend of some of the set's keys, or of one
// key alone. It was "<token> <i>", i the key's position in the call: a
// release of one key of a set took the first key's member out, and the
// other keys' members stayed until the set's TTL (a break-it pass: an
// account held 2 locks and was refused as holding 10).
func heldMember(token, rk string) string {
	if token == "" {
		return token
	}
	return token + " " + rk
}

// serveSet answers a request whose keys name a multi-key lock; rks are
// the keys' full Redis keys.
func (s *Server) serveSet(ctx context.Context, w http.ResponseWriter, c *call, req *lockRequest, rks []string) {
	d := lockData{action: req.action, key: req.key, keys: req.keys}
	switch req.action {
	case actAcquire:
		s.acquireSet(ctx, w, c, req, rks, &d)
	case actRelease:
		d.outcome = outReleased
		members := make([]string, len(rks))
		for i, rk := range rks {
			members[i] = heldMember(req.token, rk)
		}
		err := countedRelease(c, rks, members, func() error {
			_, err := s.locker.ReleaseMulti(ctx, rks, req.token)
			return err
		})
		switch {
		case err == nil:
			d.ok = true
			s.ok(w, c, resReleased, &d, "")
		case s.lockerFailed(ctx, w, c, err):
		case errors.Is(err, redlock.ErrNotHeld):
			s.ok(w, c, resNotReleased, &d, notHeldSetMsg(err))
		default:
			s.internal(w, c, err)
		}
	case actExtend:
		d.outcome = outExtended
		lease, err := s.locker.ExtendMulti(ctx, rks, req.token, time.Duration(req.ttl)*time.Second)
		if err == nil {
			for _, rk := range rks {
				c.limits.Changed(rk, heldMember(req.token, rk), limits.Extended)
			}
		}
		switch {
		case err == nil:
			d.ok, d.fence = true, lease.Fence
			setValidity(&d, c.start, time.Now(), lease.ValidUntil)
			d.ttl, d.hasTTL = extendedTTL(req.ttl, lease.TTL, d.validityMS), true
			s.ok(w, c, resExtended, &d, "")
		case s.lockerFailed(ctx, w, c, err):
		case errors.Is(err, redlock.ErrNotHeld):
			s.ok(w, c, resNotExtended, &d, notHeldSetMsg(err))
		default:
			s.internal(w, c, err)
		}
	case actStatus:
		d.outcome = outHeld
		before := time.Now()
		st, err := s.locker.StatusMulti(ctx, rks)
		if err != nil {
			if !s.lockerFailed(ctx, w, c, err) {
				s.internal(w, c, err)
			}
			return
		}
		d.ok = st.Held
		if !st.Held {
			s.ok(w, c, resNotHeld, &d, "")
			return
		}
		setValidity(&d, c.start, time.Now(), before.Add(st.Validity))
		d.fence = st.Fence
		d.ttl, d.hasTTL = max((d.validityMS+999)/1000, 1), true
		s.ok(w, c, resHeld, &d, "")
	}
}

// acquireSet is acquire for a multi-key lock: every key or none, each
// counted against max_locks.
func (s *Server) acquireSet(ctx context.Context, w http.ResponseWriter, c *call, req *lockRequest, rks []string, d *lockData) {
	d.outcome = outAcquired
	ar := AcquireRequest{Key: rks[0], Keys: rks, TTL: time.Duration(req.ttl) * time.Second, Wait: time.Duration(req.waitMS) * time.Millisecond, LockDelay: time.Duration(req.lockDelayMS) * time.Millisecond}
	leave, ok := s.admitAcquire(w, c, &ar, len(rks))
	if !ok {
		return
	}
	defer leave()
	lease, err := s.locker.Acquire(ctx, ar)
	for _, rk := range rks {
		c.limits.Done(rk, heldMember(lease.Token, rk))
	}
	if err == nil && ctx.Err() != nil {
		s.releaseAbandoned(c, rks, lease.Token, func(ctx context.Context) (int, error) {
			return s.locker.ReleaseMulti(ctx, rks, lease.Token)
		})
		err = ctx.Err()
	}
	if err == nil {
		c.token = lease.Token
		d.ok, d.token, d.fence = true, lease.Token, lease.Fence
		d.ttl, d.hasTTL = req.ttl, true
		setValidity(d, c.start, time.Now(), lease.ValidUntil)
		s.ok(w, c, resAcquired, d, "")
		return
	}
	s.acquireRefused(ctx, w, c, d, err)
}
