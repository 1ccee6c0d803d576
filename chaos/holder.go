package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/redlock"
)

// holder is client A of an arranged row: its grant, the Op ID of its
// acquire and its client number.
type holder struct {
	g      grant
	id     int
	client int
	// placeholders: placeOnly's keys on the masters A's lock is not on,
	// still there until dropPlaceholders (nil once dropped).
	placeholders func(context.Context) error
}

// dropPlaceholders deletes placeOnly's placeholders, once. A scenario
// that extends A's lock drops them only after its last extend: an extend
// that a quorum grants sets the lock again on a counting master where the
// key is absent (redlock restoreCopies), which would put A's lock on every
// master and leave the row nothing to show.
func (h *holder) dropPlaceholders(ctx context.Context) error {
	if h.placeholders == nil {
		return nil
	}
	drop := h.placeholders
	h.placeholders = nil
	return drop(ctx)
}

// direct is a connection of its own to every master itself, past every
// proxy and view (Target.DirectAddrs), as an operator's redis-cli would
// reach them; index = master.
type direct []*redis.Client

// openDirect dials every master at the address it has now and PINGs it,
// so that a fault sent through it later takes a round trip, not a dial
// (and, on the compose target, no Docker API call).
func openDirect(ctx context.Context, d *Drill) (direct, error) {
	var out direct
	for m, addr := range d.T.DirectAddrs() {
		if addr == "" {
			out.Close()
			return nil, fmt.Errorf("chaos: master %d has no address now", m)
		}
		out = append(out, redis.NewClient(&redis.Options{
			Addr: addr, MaxRetries: -1, PoolSize: 1, DisableIdentity: true,
			DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		}))
	}
	for m, rdb := range out {
		if err := rdb.Ping(ctx).Err(); err != nil {
			out.Close()
			return nil, fmt.Errorf("chaos: master %d: %w", m, err)
		}
	}
	return out, nil
}

// Close closes every connection.
func (dm direct) Close() {
	for _, rdb := range dm {
		_ = rdb.Close()
	}
}

// placeOnly makes client A (the library client of view a) take key for
// ttl on the masters in on only, as if its SET had been lost on its way to
// the others: before A asks, every master not in on holds the key for a
// placeholder token, so it refuses A's SET and A's grant counts the votes
// of masters in on alone (its fence write-back, and so its fence records,
// go to masters in on); the placeholders stay until the caller drops them
// (holder.dropPlaceholders: at once, or after A's extends). Deleting A's own key there after the grant instead would be a
// loss of data on masters whose votes A counted (and which may hold its
// fence records), not a lost message. A writes "begin" to the Resource at
// once.
//
// A grant needs only a quorum of yes votes, so on a loaded machine A's SET
// may not have reached every master in on (a call not written within the
// per-master timeout is never sent); then A's lock would live on fewer
// masters than the row assumes, and a correct contender could rightly win
// it. placeOnly checks each master in on for A's token first and, where
// one lacks it, releases and acquires again (for up to 5s): the rows'
// verdicts rest on the placement they describe. The grant also leaves the
// SETs to the masters outside its quorum on their way: placeOnly waits for
// them (settle) before it reads the masters, so that "missing" means lost,
// and before it deletes the key, so that no late SET puts A's lock back
// on a master of off.
func placeOnly(ctx context.Context, d *Drill, dm direct, key string, ttl time.Duration, on []int) (_ holder, err error) {
	a := holder{client: d.NewClientID()}
	var off []int
	var names []string
	for m := range d.T.Masters() {
		if !slices.Contains(on, m) {
			off = append(off, m)
			names = append(names, fmt.Sprint(m))
		}
	}
	placeholder, err := redlock.RandomToken()
	if err != nil {
		return holder{}, err
	}
	lockKey := d.T.Space().LockKey(key)
	// A failed arrangement takes its placeholders away again: left for
	// their 30 s, they would outlive every TTL of the run (I4).
	defer func() {
		if err != nil {
			_ = eachMaster(context.WithoutCancel(ctx), off, func(ctx context.Context, m int) error {
				return delIfEqual.Run(ctx, dm[m], []string{lockKey}, placeholder).Err()
			})
		}
	}()
	if err := eachMaster(ctx, off, func(ctx context.Context, m int) error {
		return dm[m].Set(ctx, lockKey, placeholder, 30*time.Second).Err()
	}); err != nil {
		return holder{}, fmt.Errorf("arrangement failed: the placeholders on masters %s: %w", strings.Join(names, ","), err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		// Retrying for a while: one slow answer on a loaded machine fails
		// an attempt.
		var err error
		a.g, a.id, err = d.Acquire(ctx, d.Lib(0), a.client, key, ttl, 2*time.Second)
		if err != nil {
			return holder{}, fmt.Errorf("arrangement failed: A could not acquire %s: %w", key, err)
		}
		if err := settle(ctx, d, key, deadline); err != nil {
			return holder{}, err
		}
		missing := -1
		for _, m := range on {
			if v, err := dm[m].Get(ctx, d.T.Space().LockKey(key)).Result(); err != nil || v != a.g.token {
				missing = m
				break
			}
		}
		if missing < 0 {
			break
		}
		d.Notef("A's SET on %s did not reach master %d (slow machine): released and acquired again", key, missing)
		_ = d.Release(ctx, d.Lib(0), a.client, key, a.g, a.id)
		if time.Now().After(deadline) {
			return holder{}, fmt.Errorf("arrangement failed: A's lock on %s never reached every master of %v in 5s", key, on)
		}
	}
	d.Write(key, a.g, a.client, a.id, "begin")
	what := fmt.Sprintf("A's SET lost on its way to masters %s (a placeholder refused it there, and refused A's extends; now deleted)", strings.Join(names, ","))
	a.placeholders = func(ctx context.Context) error {
		// Not an availability fault: those masters answer and vote.
		return d.Mark(ctx, what, func(ctx context.Context) error {
			return eachMaster(ctx, off, func(ctx context.Context, m int) error {
				return delIfEqual.Run(ctx, dm[m], []string{lockKey}, placeholder).Err()
			})
		})
	}
	return a, nil
}

// delIfEqual deletes KEYS[1] if it holds ARGV[1].
var delIfEqual = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// settle returns once every master has run every command the library
// client of view 0 sent for key before the call (or dropped those it never
// sent), or fails at deadline. The barrier is that client's lane order: a
// lane carries one key's commands to its master in order, so a
// compare-and-delete for a token nobody holds, answered by every master,
// comes after them. It changes no lock and is not part of the history.
func settle(ctx context.Context, d *Drill, key string, deadline time.Time) error {
	for {
		tok, err := redlock.RandomToken()
		if err != nil {
			return err
		}
		_, err = d.Client(0).Release(ctx, d.T.Space().LockKey(key), tok)
		var oe *redlock.OutcomeError
		if errors.As(err, &oe) && errors.Is(err, redlock.ErrNotHeld) && oe.Absent+oe.Foreign == d.T.Masters() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("arrangement failed: not every master answered a release for %s in 5s: %v", key, err)
		}
		if err := d.Sleep(ctx, 2*time.Millisecond); err != nil {
			return err
		}
	}
}

// keyGone waits, at most 5s, until master m no longer holds key (its
// expiry there, after a forward clock jump or a rollback, has taken
// effect); after says what should have made it go, for the error.
func keyGone(ctx context.Context, d *Drill, dm direct, m int, key, after string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := dm[m].Exists(ctx, d.T.Space().LockKey(key)).Result()
		if err == nil && n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("arrangement failed: master %d still holds %s 5s %s: %v", m, key, after, errOr(err, "EXISTS 1"))
		}
		if err := d.Sleep(ctx, 2*time.Millisecond); err != nil {
			return err
		}
	}
}

// contendVia makes the contenders try key in turn, single attempts about
// 10ms apart, from now until A's validity has ended (plus a margin); the
// first grant makes its contender write, commit and release, and ends the
// contest. Meanwhile A, a careful holder, commits just before its validity
// ends and lets its lock expire. Whether a contender was granted while A's
// lease ran is for the checker (I1) to say. It returns the first try's
// error (nil if it was granted).
func contendVia(ctx context.Context, d *Drill, key string, ttl time.Duration, a holder, contenders ...locker) (first, err error) {
	done := make(chan error, 1)
	go func() {
		err := d.Sleep(ctx, time.Until(a.g.validUntil)-50*time.Millisecond)
		if err == nil && time.Now().Before(a.g.validUntil) {
			d.Write(key, a.g, a.client, a.id, "commit")
		}
		done <- err
	}()
	clients := make([]int, len(contenders))
	for i := range clients {
		clients[i] = d.NewClientID()
	}
	for i := 0; time.Now().Before(a.g.validUntil.Add(100 * time.Millisecond)); i++ {
		b, client := contenders[i%len(contenders)], clients[i%len(contenders)]
		g, id, aerr := d.Acquire(ctx, b, client, key, ttl, 0)
		if i == 0 {
			first = aerr
		}
		if aerr == nil {
			d.Write(key, g, client, id, "begin")
			d.Write(key, g, client, id, "commit")
			_ = d.Release(ctx, b, client, key, g, id)
			break
		}
		if err = d.Sleep(ctx, 10*time.Millisecond); err != nil {
			break
		}
	}
	return first, errors.Join(err, <-done)
}
