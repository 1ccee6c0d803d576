package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Multi-key locks over several master groups.
//
// A set whose keys all live on one group is that group's multi-key lock
// (AcquireMulti). A set spread over groups is taken group by group in a
// fixed order (by group name), each group's keys with one AcquireMulti
// attempt under one token, all or nothing: a refusal in any group releases
// what the earlier groups took before the attempt returns, so nothing is
// held while waiting and overlapping sets cannot deadlock. Each group's
// part keeps the guarantees of a multi-key lock in that group, so every
// key of the set keeps a single lock's guarantee in its own group. The
// fence reported is the largest of the groups' fences, written back to a
// quorum of every group the set holds (as Moving does for a moved key), so
// that fences stay increasing per key in each group.

// groupPart is the keys of a set one group takes.
type groupPart struct {
	g    Group
	keys []string
}

// planParts splits keys over the groups groupsOf gives each (a key may be
// in two during a change of groups), ordered by group name.
func planParts(keys []string, groupsOf func(string) []Group) []groupPart {
	var parts []groupPart
	for _, k := range keys {
		for _, g := range groupsOf(k) {
			i := slices.IndexFunc(parts, func(p groupPart) bool { return p.g.Client == g.Client })
			if i < 0 {
				parts = append(parts, groupPart{g: g})
				i = len(parts) - 1
			}
			parts[i].keys = append(parts[i].keys, k)
		}
	}
	slices.SortFunc(parts, func(a, b groupPart) int { return strings.Compare(a.g.Name, b.g.Name) })
	return parts
}

// acquireParts takes every part, all or nothing, waiting as opts say.
func acquireParts(ctx context.Context, keys []string, parts []groupPart, ttl time.Duration, opts []AcquireOption) (*MovingLock, error) {
	if len(keys) == 0 || len(keys) > MaxMultiKeys {
		return nil, fmt.Errorf("%w: keys: a multi-key lock needs 1 to %d keys, got %d", ErrInvalid, MaxMultiKeys, len(keys))
	}
	if len(parts) == 1 {
		// One group: its own wait queue, woken by releases.
		p := parts[0]
		lk, err := p.g.Client.AcquireMulti(ctx, p.keys, ttl, opts...)
		if err != nil {
			return nil, groupErr(p.g.Name, err)
		}
		return &MovingLock{groups: []Group{p.g}, locks: []*Lock{lk}, fence: lk.Fence()}, nil
	}
	cfg := acquireConfig{}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	var delay []AcquireOption
	if cfg.lockDelay > 0 {
		delay = []AcquireOption{WithLockDelay(cfg.lockDelay)}
	}
	giveUp := time.Now().Add(cfg.wait)
	for {
		ml, err := attemptParts(ctx, parts, ttl, delay)
		if err == nil || !errors.Is(err, ErrLockHeld) && !errors.Is(err, ErrQuorumUnavailable) || ctx.Err() != nil {
			return ml, err
		}
		left := time.Until(giveUp)
		if left <= 0 {
			return nil, err
		}
		// No shared wait queue across groups: retry when the holder's
		// lock ends, or after a jittered poll, whichever is first.
		sleep := time.Duration(50+rand.IntN(200)) * time.Millisecond
		var oe *OutcomeError
		if errors.As(err, &oe) && oe.RetryAfter > 0 {
			sleep = min(sleep, oe.RetryAfter+time.Millisecond)
		}
		t := time.NewTimer(min(sleep, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(ErrNotObtained, ctx.Err(), err)
		case <-cfg.stop:
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// attemptParts is one attempt at every part: the first part's keys with a
// new token, the others under that token (withSameToken), then the fence
// raised to the largest in every group.
func attemptParts(ctx context.Context, parts []groupPart, ttl time.Duration, opts []AcquireOption) (*MovingLock, error) {
	ml := &MovingLock{}
	fail := func(err error) (*MovingLock, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
		defer cancel()
		for _, lk := range ml.locks {
			_ = lk.Release(rctx) // a release that fails leaves the keys to expire within ttl
		}
		return nil, err
	}
	for i, p := range parts {
		actx, popts := ctx, opts
		if i > 0 {
			// Holding the earlier parts: one attempt, not even a
			// contended attempt's retries (retryContended).
			actx, popts = withSameToken(ctx, ml.locks[0].Token()), append(slices.Clip(opts), WithRetry(NoRetry()))
		}
		lk, err := p.g.Client.AcquireMulti(actx, p.keys, ttl, popts...)
		if err != nil {
			return fail(groupErr(p.g.Name, err))
		}
		ml.groups = append(ml.groups, p.g)
		ml.locks = append(ml.locks, lk)
		ml.fence = max(ml.fence, lk.Fence())
	}
	if err := ml.raiseFences(ctx); err != nil {
		return fail(err)
	}
	if time.Until(ml.ValidUntil()) <= 0 {
		return fail(validityRanOut("set", len(ml.locks)))
	}
	return ml, nil
}

// releaseParts releases keys held by token in every part; a part that
// does not hold them is not an error unless none does.
func releaseParts(ctx context.Context, parts []groupPart, token string) (int, error) {
	n := 0
	var errs []error
	for _, p := range parts {
		k, err := p.g.Client.ReleaseMulti(ctx, p.keys, token)
		n += k
		if err != nil && !errors.Is(err, ErrNotHeld) {
			errs = append(errs, groupErr(p.g.Name, err))
		}
	}
	if n == 0 && len(errs) == 0 {
		return 0, fmt.Errorf("%w: the keys are not held by this token in any of their groups", ErrNotHeld)
	}
	return n, errors.Join(errs...)
}

// extendParts extends every part, in order; any refusal fails it. Parts
// extended before the refusal keep their new TTL: they are not released
// (the holder's validity on them has not ended, and a release would let
// another caller in within it) and cannot be shortened back (an extend
// never shortens). A set refused that way blocks those keys until the new
// TTL ends, a gap of sets over several groups (docs/api.md). The Lock
// returned is the first part's, with the earliest validity and the
// largest fence.
func extendParts(ctx context.Context, keys []string, parts []groupPart, token string, ttl time.Duration) (*Lock, error) {
	var first *Lock
	for _, p := range parts {
		lk, err := p.g.Client.ExtendMulti(ctx, p.keys, token, ttl)
		if err != nil {
			return nil, groupErr(p.g.Name, err)
		}
		if first == nil {
			first = lk
			continue
		}
		first.fence = max(first.fence, lk.Fence())
		if lk.ValidUntil().Before(first.validUntil) {
			first.validUntil = lk.ValidUntil()
		}
		first.ttl = min(first.ttl, lk.TTL())
	}
	first.key, first.keys = keys[0], slices.Clone(keys)
	if len(keys) == 1 {
		first.keys = nil
	}
	return first, nil
}

// statusParts reads every part: the set is held when every key is held
// in a group of it (during a change of groups, a set taken before it holds
// only the old groups).
func statusParts(ctx context.Context, keys []string, parts []groupPart) (MultiStatus, error) {
	out := MultiStatus{Held: true, Keys: make([]Status, len(keys))}
	for _, p := range parts {
		ms, err := p.g.Client.StatusMulti(ctx, p.keys)
		if err != nil {
			return MultiStatus{}, groupErr(p.g.Name, err)
		}
		for j, k := range p.keys {
			i := slices.Index(keys, k)
			if st := ms.Keys[j]; st.Held || !out.Keys[i].Held {
				out.Keys[i] = st
			}
		}
	}
	for i, st := range out.Keys {
		switch {
		case !st.Held:
			out.Held = false
		case i == 0 || st.Validity < out.Validity:
			out.Validity = st.Validity
		}
		out.Fence = max(out.Fence, st.Fence)
	}
	if !out.Held {
		out.Validity, out.Fence = 0, 0
	}
	return out, nil
}

// AcquireMulti takes the multi-key lock keys in their groups: in one group,
// that group's Client.AcquireMulti; spread over groups, group by group in
// the order of their names, all or nothing, under one token (the comment
// at the top of groupsmulti.go). A wait (WithWait) over several groups
// retries whole attempts when the holder's lock ends or after a jittered
// poll of 50–250 ms: there is no shared wait queue across groups. Errors
// are *GroupError.
func (g *Groups) AcquireMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...AcquireOption) (*MovingLock, error) {
	return acquireParts(ctx, keys, planParts(keys, func(k string) []Group { return []Group{g.For(k)} }), ttl, opts)
}

// ReleaseMulti releases keys held by token in their groups.
func (g *Groups) ReleaseMulti(ctx context.Context, keys []string, token string) (int, error) {
	return releaseParts(ctx, planParts(keys, func(k string) []Group { return []Group{g.For(k)} }), token)
}

// ExtendMulti extends keys held by token in their groups; any refusal fails it.
func (g *Groups) ExtendMulti(ctx context.Context, keys []string, token string, ttl time.Duration) (*Lock, error) {
	return extendParts(ctx, keys, planParts(keys, func(k string) []Group { return []Group{g.For(k)} }), token, ttl)
}

// StatusMulti reads keys in their groups: the set is held when every
// group's part of it is.
func (g *Groups) StatusMulti(ctx context.Context, keys []string) (MultiStatus, error) {
	return statusParts(ctx, keys, planParts(keys, func(k string) []Group { return []Group{g.For(k)} }))
}

// AcquireMulti takes the multi-key lock keys during a change of groups:
// every key in each of GroupsOf(key), as Groups.AcquireMulti does over
// the union of those groups.
func (m *Moving) AcquireMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...AcquireOption) (*MovingLock, error) {
	return acquireParts(ctx, keys, planParts(keys, m.GroupsOf), ttl, opts)
}

// ReleaseMulti releases keys held by token in every group of each.
func (m *Moving) ReleaseMulti(ctx context.Context, keys []string, token string) (int, error) {
	return releaseParts(ctx, planParts(keys, m.GroupsOf), token)
}

// ExtendMulti extends keys held by token in every group of each: first
// the new groups of the keys that move, then the groups of the keys that
// stay, then the moving keys' old groups. A set taken before the change
// (it holds only the old groups) is so refused, with a
// *ChangeExtendError, before any of its keys is lengthened, as
// Moving.Extend does for one key; a break-it pass saw both old copies of
// such a set lengthened when the groups were taken in the order of their
// names.
func (m *Moving) ExtendMulti(ctx context.Context, keys []string, token string, ttl time.Duration) (*Lock, error) {
	moves := func(k string) bool { return len(m.GroupsOf(k)) == 2 }
	movedNew := planParts(keys, func(k string) []Group {
		if moves(k) {
			return m.GroupsOf(k)[1:]
		}
		return nil
	})
	staying := planParts(keys, func(k string) []Group {
		if moves(k) {
			return nil
		}
		return m.GroupsOf(k)
	})
	movedOld := planParts(keys, func(k string) []Group {
		if moves(k) {
			return m.GroupsOf(k)[:1]
		}
		return nil
	})
	lk, err := extendParts(ctx, keys, slices.Concat(movedNew, staying, movedOld), token, ttl)
	var ge *GroupError
	if err != nil && len(movedNew) > 0 && errors.Is(err, ErrNotHeld) && errors.As(err, &ge) && ge.Group == movedNew[0].g.Name {
		// Refused by the first new group, before anything was extended:
		// the set may be one taken before the change.
		err = groupErr(ge.Group, &ChangeExtendError{Group: ge.Group, Err: ge.Err})
	}
	return lk, err
}

// StatusMulti reads keys in every group of each: held when every group's
// part is.
func (m *Moving) StatusMulti(ctx context.Context, keys []string) (MultiStatus, error) {
	return statusParts(ctx, keys, planParts(keys, m.GroupsOf))
}
