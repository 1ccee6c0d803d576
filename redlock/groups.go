package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Group is one named group of independent masters and the Client over
// them. Each group is a Redlock deployment of its own: its own quorum,
// health, quarantine, lease horizons, fencing counters and clock judgement.
type Group struct {
	Name   string
	Client *Client
}

// Groups spreads keys over several master groups: every key lives on the
// one group its Placement gives, and every call for the key goes to that
// group's Client. A lock, its fences, its release and its extends all
// stay in one group, so each key keeps every guarantee of a single
// Client — mutual exclusion within the group's failure bounds, fences
// strictly increasing per key — for as long as the set of groups (and so
// the key's group) does not change. Changing the set moves keys between
// groups; a moved key's old group knows nothing of locks its new group
// grants, which is why the change is a procedure of its own (see
// docs/operations.md) and not a new Groups.
//
// One group's failure (no quorum, quarantines) affects only the keys
// placed on it. Groups is safe for concurrent use.
type Groups struct {
	groups []Group
	place  *Placement
}

// GroupError wraps the error of a call that one group answered, naming the
// group; it unwraps to the Client's error, so errors.Is and errors.As work
// as with a single Client.
type GroupError struct {
	Group string
	Err   error
}

func (e *GroupError) Error() string { return "group " + e.Group + ": " + e.Err.Error() }
func (e *GroupError) Unwrap() error { return e.Err }

// NewGroups routes keys over groups (at least one; names as NewPlacement
// takes them; every Client non-nil and distinct). The Clients stay
// usable on their own; Close closes them all. Errors match ErrInvalid.
func NewGroups(groups ...Group) (*Groups, error) {
	names := make([]string, len(groups))
	for i, g := range groups {
		if g.Client == nil {
			return nil, fmt.Errorf("%w: group %d (%q) has no Client", ErrInvalid, i, g.Name)
		}
		for j := range i {
			if groups[j].Client == g.Client {
				return nil, fmt.Errorf("%w: groups %d and %d share one Client", ErrInvalid, j, i)
			}
		}
		names[i] = g.Name
	}
	p, err := NewPlacement(names...)
	if err != nil {
		return nil, err
	}
	return &Groups{groups: append([]Group(nil), groups...), place: p}, nil
}

// Placement is the Placement the keys are routed by.
func (g *Groups) Placement() *Placement { return g.place }

// Groups is the groups in the order given to NewGroups.
func (g *Groups) Groups() []Group { return append([]Group(nil), g.groups...) }

// For is the group key is placed on.
func (g *Groups) For(key string) Group { return g.groups[g.place.Group(key)] }

func groupErr(name string, err error) error {
	if err == nil {
		return nil
	}
	return &GroupError{Group: name, Err: err}
}

// Acquire is Client.Acquire on key's group. Errors are *GroupError.
func (g *Groups) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	grp := g.For(key)
	lk, err := grp.Client.Acquire(ctx, key, ttl, opts...)
	return lk, groupErr(grp.Name, err)
}

// Release is Client.Release on key's group. Errors are *GroupError.
func (g *Groups) Release(ctx context.Context, key, token string) (int, error) {
	grp := g.For(key)
	n, err := grp.Client.Release(ctx, key, token)
	return n, groupErr(grp.Name, err)
}

// Extend is Client.Extend on key's group. Errors are *GroupError.
func (g *Groups) Extend(ctx context.Context, key, token string, ttl time.Duration) (*Lock, error) {
	grp := g.For(key)
	lk, err := grp.Client.Extend(ctx, key, token, ttl)
	return lk, groupErr(grp.Name, err)
}

// Status is Client.Status on key's group. Errors are *GroupError.
func (g *Groups) Status(ctx context.Context, key string) (Status, error) {
	grp := g.For(key)
	st, err := grp.Client.Status(ctx, key)
	return st, groupErr(grp.Name, err)
}

// Close closes every group's Client and returns their errors joined.
func (g *Groups) Close() error {
	var errs []error
	for _, grp := range g.groups {
		errs = append(errs, groupErr(grp.Name, grp.Client.Close()))
	}
	return errors.Join(errs...)
}
