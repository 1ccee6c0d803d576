package redlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/guardswitch"
	"github.com/redlockd/redlockd/internal/redisproc"
)

// silentLoss is one way a master loses a lock it voted for while every
// check of its own state (marker, lease horizon, fencing counter, INFO
// statistics, run_id) still reads as before: the master cannot show the
// loss, so only the other masters can (granted.go).
type silentLoss struct {
	name string
	// before runs after the lock was granted on masters 0–2 and before it
	// is extended: it takes the copy the loss goes back to.
	before func(t *testing.T, f *lossFixture)
	// lose makes the victim (master 2) lose the extend, or the lock.
	lose func(t *testing.T, f *lossFixture)
	// peer: a second Client of the deployment catches the victim's
	// fencing counter up after the loss (spreadFence), and the first
	// Client is the contender.
	peer bool
	// peerGrant: the second Client grants a lock on another key with the
	// victim's vote after the loss; its fence write-back raises the
	// victim's counter past the lost lock's fence.
	peerGrant bool
	// probeSees: a health probe of the victim after the loss would see it
	// (a replication ID changed): the contender comes before the next one.
	probeSees bool
}

// lossFixture is five redis-server masters of its own (DEBUG allowed, the
// victim durable when the loss needs it), a Client, and direct connections.
type lossFixture struct {
	servers []*redisproc.Server
	rdbs    []*redis.Client
	c       *Client
	opts    []Option
	spare   *redisproc.Server // a sixth server, for REPLICAOF
	saved   string            // a copy of the victim's append-only directory
}

const victim = 2

func newLossFixture(t *testing.T, durable bool, opts ...Option) *lossFixture {
	t.Helper()
	args := []string{"--enable-debug-command", "yes", "--repl-diskless-sync-delay", "0"}
	srvs, err := redisproc.StartN(5, redisproc.Options{ExtraArgs: args})
	require.NoError(t, err)
	t.Cleanup(func() { _ = redisproc.StopAll(srvs) })
	if durable {
		require.NoError(t, srvs[victim].Stop())
		srvs[victim], err = redisproc.Start(redisproc.Options{ExtraArgs: append(args, "--appendonly", "yes", "--appendfsync", "always")})
		require.NoError(t, err)
	}
	f := &lossFixture{servers: srvs}
	mo := make([]*redis.Options, len(srvs))
	for i, s := range srvs {
		mo[i] = &redis.Options{Addr: s.Addr()}
		r := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: 5 * time.Second})
		t.Cleanup(func() { r.Close() })
		f.rdbs = append(f.rdbs, r)
	}
	// One health round an hour: what a vote sees is all that counts, as
	// for an acquire that comes between two probes.
	f.opts = append([]Option{WithPerMasterTimeout(500 * time.Millisecond), WithHealthInterval(time.Hour)}, opts...)
	f.c, err = New(mo, f.opts...)
	require.NoError(t, err)
	t.Cleanup(func() { f.c.Close() })
	return f
}

// other returns another Client of the same masters (another daemon).
func (f *lossFixture) other(t *testing.T) *Client {
	t.Helper()
	mo := make([]*redis.Options, len(f.servers))
	for i, s := range f.servers {
		mo[i] = &redis.Options{Addr: s.Addr()}
	}
	c, err := New(mo, f.opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// grantOnThree acquires key for ttl with masters 3 and 4 held by a
// contender's votes (no fence record: a lost race), then frees them, so
// the lock lives on masters 0–2 only.
func (f *lossFixture) grantOnThree(t *testing.T, c *Client, key string, ttl time.Duration, opts ...AcquireOption) *Lock {
	t.Helper()
	return f.grantOn(t, c, key, ttl, []int{3, 4}, opts...)
}

// grantOn is grantOnThree with the masters that refuse given: blocked.
func (f *lossFixture) grantOn(t *testing.T, c *Client, key string, ttl time.Duration, blocked []int, opts ...AcquireOption) *Lock {
	t.Helper()
	ctx := context.Background()
	for _, i := range blocked {
		require.NoError(t, f.rdbs[i].Set(ctx, key, "contender", time.Minute).Err())
	}
	l, err := c.Acquire(ctx, key, ttl, opts...)
	require.NoError(t, err)
	// Without the granted-lock check the grant is decided at the third
	// vote, with the SETs to masters 3 and 4 possibly still on their way:
	// deleting the blockers first let a late SET land there (L on four
	// masters, and the negative control refused; seen in CI).
	settle(t, c, key)
	for _, i := range blocked {
		require.NoError(t, f.rdbs[i].Del(ctx, key).Err())
	}
	for i := range f.rdbs {
		if !slices.Contains(blocked, i) {
			require.Equal(t, l.Token(), f.rdbs[i].Get(ctx, key).Val(), "master %d holds the lock", i)
		}
	}
	return l
}

func (f *lossFixture) do(t *testing.T, i int, args ...any) {
	t.Helper()
	require.NoError(t, f.rdbs[i].Do(context.Background(), args...).Err(), "%v on master %d", args, i)
}

func silentLosses() []silentLoss {
	ctx := context.Background()
	return []silentLoss{
		{
			name:   "extend rolled back by DEBUG RELOAD NOSAVE of an older dump",
			before: func(t *testing.T, f *lossFixture) { f.do(t, victim, "SAVE") },
			lose:   func(t *testing.T, f *lossFixture) { f.do(t, victim, "DEBUG", "RELOAD", "NOSAVE") },
		},
		{
			name: "extend rolled back by SWAPDB with a copied database",
			before: func(t *testing.T, f *lossFixture) {
				r := f.rdbs[victim]
				keys, err := r.Keys(ctx, "*").Result()
				require.NoError(t, err)
				for _, k := range keys {
					require.NoError(t, r.Copy(ctx, k, k, 1, true).Err())
				}
			},
			lose: func(t *testing.T, f *lossFixture) { f.do(t, victim, "SWAPDB", 0, 1) },
		},
		{
			name:      "extend rolled back by REPLICAOF a server holding the older copy",
			probeSees: true,
			before: func(t *testing.T, f *lossFixture) {
				spare, err := redisproc.Start(redisproc.Options{ExtraArgs: []string{"--repl-diskless-sync-delay", "0"}})
				require.NoError(t, err)
				t.Cleanup(func() { _ = spare.Stop() })
				f.spare = spare
				s := redis.NewClient(&redis.Options{Addr: spare.Addr()})
				defer s.Close()
				host, port := splitAddr(t, f.servers[victim].Addr())
				require.NoError(t, s.ReplicaOf(ctx, host, port).Err())
				waitInSync(t, s)
				require.NoError(t, s.ReplicaOf(ctx, "NO", "ONE").Err())
			},
			lose: func(t *testing.T, f *lossFixture) {
				r := f.rdbs[victim]
				host, port := splitAddr(t, f.spare.Addr())
				require.NoError(t, r.ReplicaOf(ctx, host, port).Err())
				waitInSync(t, r)
				require.NoError(t, r.ReplicaOf(ctx, "NO", "ONE").Err())
			},
		},
		{
			name: "extend rolled back by a durable restart from an older append-only file",
			before: func(t *testing.T, f *lossFixture) {
				f.saved = t.TempDir()
				copyDir(t, aofDir(t, f.servers[victim]), f.saved)
			},
			lose: func(t *testing.T, f *lossFixture) {
				s := f.servers[victim]
				dir := aofDir(t, s)
				require.NoError(t, s.Kill())
				require.NoError(t, os.RemoveAll(dir))
				copyDir(t, f.saved, dir)
				require.NoError(t, s.RestartKeepingData())
			},
		},
		{
			name: "lock evicted, then CONFIG RESETSTAT and traffic refill the statistics",
			lose: func(t *testing.T, f *lossFixture) {
				r := f.rdbs[victim]
				f.do(t, victim, "CONFIG", "SET", "maxmemory-policy", "volatile-ttl")
				f.do(t, victim, "CONFIG", "SET", "maxmemory", "1mb")
				_ = r.Set(ctx, "ballast", strings.Repeat("x", 2<<20), 0).Err() // evicts every key with a TTL, then OOM
				_ = r.Del(ctx, "ballast").Err()
				f.do(t, victim, "CONFIG", "SET", "maxmemory", "0")
				f.do(t, victim, "CONFIG", "SET", "maxmemory-policy", "noeviction")
				f.do(t, victim, "CONFIG", "RESETSTAT")
				for range 6 {
					_, err := r.Pipelined(ctx, func(p redis.Pipeliner) error {
						for range 5000 {
							p.Ping(ctx)
						}
						return nil
					})
					require.NoError(t, err)
				}
			},
		},
		{
			name:      "rollback hidden by another daemon's grant of another key",
			peer:      true,
			peerGrant: true,
			before:    func(t *testing.T, f *lossFixture) { f.do(t, victim, "SAVE") },
			lose:      func(t *testing.T, f *lossFixture) { f.do(t, victim, "DEBUG", "RELOAD", "NOSAVE") },
		},
		{
			name:   "rollback hidden by another daemon's fencing-counter catch-up",
			peer:   true,
			before: func(t *testing.T, f *lossFixture) { f.do(t, victim, "SAVE") },
			lose:   func(t *testing.T, f *lossFixture) { f.do(t, victim, "DEBUG", "RELOAD", "NOSAVE") },
		},
	}
}

// TestNoSecondHolderAfterASilentLoss: a lock L on exactly three masters
// (a lost race left the other two free), a longer lock on another key
// holding every lease horizon up. The victim loses L's extend (or L) in a
// way its own state does not show; a contender then has the victim and
// the two free masters. The masters that kept L answer that a granted lock
// holds the key, and the contender is refused. Negative control: with the
// granted-lock check off the contender is granted L while it stands.
func TestNoSecondHolderAfterASilentLoss(t *testing.T) {
	for _, tc := range silentLosses() {
		t.Run(tc.name, func(t *testing.T) {
			for _, control := range []bool{false, true} {
				name := "protected"
				if control {
					name = "negative control: granted-lock check off"
				}
				t.Run(name, func(t *testing.T) {
					var opts []Option
					if control {
						opts = append(opts, withGuardOff(guardswitch.GrantedLock))
					}
					durable := strings.Contains(tc.name, "durable")
					f := newLossFixture(t, durable, opts...)
					second, first, err := runSilentLoss(t, f, tc)
					if control {
						require.NoError(t, err, "negative control: the contender is granted the lock")
						assert.True(t, time.Now().Before(first.ValidUntil()), "while the first lock is valid")
						return
					}
					require.Nil(t, second, "no second holder while the first lock is valid")
					require.ErrorIs(t, err, ErrLockHeld, "refused as held, not as masters failing")
				})
			}
		})
	}
}

// runSilentLoss plays tc on f and returns the contender's lock (nil when
// refused) and the first holder's.
func runSilentLoss(t *testing.T, f *lossFixture, tc silentLoss) (second, first *Lock, err error) {
	t.Helper()
	ctx := context.Background()
	holder := f.c
	var peer *Client
	if tc.peer {
		peer = f.other(t) // it read the victim's counter before L existed
	}
	_, err = holder.Acquire(ctx, "long:"+t.Name(), 300*time.Second) // holds every horizon
	require.NoError(t, err)
	key := "L:" + t.Name()
	ttl := 1500 * time.Millisecond
	if tc.peer {
		tc.before(t, f) // the older copy has no L at all
		ttl = 30 * time.Second
	}
	first = f.grantOnThree(t, holder, key, ttl)
	if !tc.peer && tc.before != nil {
		tc.before(t, f)
	}
	if !tc.peer {
		// The lost race's keys still hold masters 3 and 4 while L is
		// extended: an extend sets L again on a counting master that
		// answers it absent (restoreCopies), and L would be on all five.
		for _, i := range []int{3, 4} {
			require.NoError(t, f.rdbs[i].Set(ctx, key, "contender", time.Minute).Err())
		}
		require.NoError(t, first.Extend(ctx, 30*time.Second))
		for _, i := range []int{3, 4} {
			require.NoError(t, f.rdbs[i].Del(ctx, key).Err())
		}
	}
	// A vote counts only with a reading of the master's clock at most 2s
	// old, and this Client probes once an hour: read the clocks now.
	holder.probeAll()
	tc.lose(t, f)
	switch {
	case tc.peerGrant:
		l := f.grantOnThree(t, peer, "other:"+t.Name(), time.Second) // the victim votes
		require.Eventually(t, func() bool {
			n, _ := f.rdbs[victim].Get(ctx, peer.opts.fenceKey).Int64()
			return n >= l.Fence()
		}, 5*time.Second, 5*time.Millisecond, "the other daemon's write-back reached the victim")
		require.Greater(t, l.Fence(), first.Fence())
	case peer != nil:
		peer.probeAll()
		peer.afterProbes() // copies the highest counter back onto the victim
	}
	r := f.rdbs[victim]
	require.Eventually(t, func() bool { return r.Exists(ctx, key).Val() == 0 }, 5*time.Second, 10*time.Millisecond, "the victim lost L")
	if !tc.probeSees {
		holder.probeAll() // sees nothing: the loss left the victim's own state as it was
	}
	require.Equal(t, first.Token(), f.rdbs[0].Get(ctx, key).Val(), "master 0 still holds L")
	require.True(t, time.Now().Before(first.ValidUntil()), "L is still valid")

	second, err = holder.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
	// On a loaded machine a probe's clock reading can be too imprecise to
	// count (ErrMasterClockUnknown): the product failing closed, which
	// says nothing about the check. Read the clocks again and retry, a
	// few times, only then.
	for try := 0; try < 5 && errors.Is(err, ErrMasterClockUnknown) && !errors.Is(err, ErrLockHeld); try++ {
		t.Logf("clock readings did not count, reading again: %v", err)
		if !tc.probeSees {
			holder.probeAll()
		}
		second, err = holder.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
	}
	if errors.Is(err, ErrLockHeld) {
		var oe *OutcomeError
		require.ErrorAs(t, err, &oe)
		assert.Greater(t, oe.RetryAfter, 20*time.Second, "retry when the granted lock ends")
		if holder.grantedCheck() {
			assert.Equal(t, int64(1), holder.GrantRefusals())
		} else {
			t.Logf("refused with the check off: %v; losses %v; victim: %+v", err, holder.DataLosses(), holder.Masters()[victim])
		}
		for i := range 5 {
			v := f.rdbs[i].Get(ctx, key).Val()
			assert.True(t, v == "" || v == first.Token(), "master %d: the refused acquire left no key behind (%q)", i, v)
		}
	}
	return second, first, err
}

func splitAddr(t *testing.T, addr string) (string, string) {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	require.Positive(t, i)
	return addr[:i], addr[i+1:]
}

// waitInSync waits until r, a replica, has loaded its master's data.
func waitInSync(t *testing.T, r *redis.Client) {
	t.Helper()
	require.Eventually(t, func() bool {
		info := r.Info(context.Background(), "replication").Val()
		return strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_sync_in_progress:0")
	}, 10*time.Second, 10*time.Millisecond)
}

// aofDir is the server's append-only directory.
func aofDir(t *testing.T, s *redisproc.Server) string {
	t.Helper()
	r := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer r.Close()
	ctx := context.Background()
	dir, err := r.ConfigGet(ctx, "dir").Result()
	require.NoError(t, err)
	name, err := r.ConfigGet(ctx, "appenddirname").Result()
	require.NoError(t, err)
	return filepath.Join(dir["dir"], name["appenddirname"])
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(to, 0o755))
	entries, err := os.ReadDir(from)
	require.NoError(t, err)
	require.NotEmpty(t, entries, "nothing in %s", from)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(to, e.Name()), b, 0o644))
	}
}

// TestExtraVotes: with one extra vote (4 of 5), a lock whose key two
// masters lose silently (an operator's DEL of the key: nothing in Redis
// tells it from an expiry) keeps a contender out even with the
// granted-lock check off; the price is that two masters down stop
// locking. Negative control: a plain quorum with the check off grants the
// key again. The check alone (k = 0) covers the same loss.
func TestExtraVotes(t *testing.T) {
	ctx := context.Background()
	_, err := New(masterOptions(), WithExtraVotes(3))
	require.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "extra votes: 3 given, at most 2 with 5 masters")
	_, err = New(masterOptions(), WithExtraVotes(-1))
	require.ErrorIs(t, err, ErrInvalid)

	for _, tc := range []struct {
		name    string
		opts    []Option
		granted bool
	}{
		{"one extra vote, check off", []Option{WithExtraVotes(1), withGuardOff(guardswitch.GrantedLock)}, false},
		{"granted-lock check alone", nil, false},
		{"negative control: quorum, check off", []Option{withGuardOff(guardswitch.GrantedLock)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, tc.opts...)
			rdbs := direct(t)
			key := newKey(t)
			require.NoError(t, rdbs[4].Set(ctx, key, "contender", time.Minute).Err())
			first, err := c.Acquire(ctx, key, 30*time.Second)
			require.NoError(t, err)
			// With the check off the grant came at the quorum-th vote:
			// master 4's refusal may still be on its way, and the DEL
			// below must not let that SET NX in (CI, a loaded machine).
			settle(t, c, key)
			require.NoError(t, rdbs[4].Del(ctx, key).Err())
			for _, i := range []int{2, 3} { // two silent losses
				require.NoError(t, rdbs[i].Del(ctx, key).Err())
			}
			second, err := c.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
			if tc.granted {
				require.NoError(t, err, "negative control: a second holder")
				assert.True(t, time.Now().Before(first.ValidUntil()))
				return
			}
			require.Nil(t, second)
			require.ErrorIs(t, err, ErrNotObtained)
			assert.Len(t, holders(t, rdbs, key, first.Token()), 2, "the refused acquire left no key of its own")
		})
	}

	t.Run("two masters down stop a client with one extra vote", func(t *testing.T) {
		c := newClient(t, WithExtraVotes(1))
		require.Equal(t, 4, c.VotesNeeded())
		require.Eventually(t, c.QuorumAvailable, 5*time.Second, 10*time.Millisecond)
		withMasters(t, "kill", 3, 4)
		_, err := c.Acquire(ctx, newKey(t), 5*time.Second, WithRetry(NoRetry()))
		require.ErrorIs(t, err, ErrQuorumUnavailable)
		assert.False(t, c.QuorumAvailable(), "three counting masters are a quorum, not the four votes needed")
		var oe *OutcomeError
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, 4, oe.Quorum, "the error says how many votes it needed")
	})
}

// TestMissedReleasesAreSentAgain: a release whose call to a master failed
// (its connection broke while the master kept its data: a partition) is
// kept, and the health loop sends it again once the master answers; the
// key is then free, where the granted-lock check would otherwise refuse it
// until its TTL ended there. One past its end is dropped unsent.
func TestMissedReleasesAreSentAgain(t *testing.T) {
	ctx := context.Background()
	c, rdbs, l := heldOnEveryMaster(t)
	key := l.Key()
	for _, m := range c.masters {
		m.releaseLater(key, l.Token()) // as if every master had missed it
	}
	stale := newKey(t)
	c.masters[0].releaseLater(stale, "token")
	u := &c.masters[0].unreleased
	u.mu.Lock()
	u.m[[2]string{stale, "token"}] = c.sinceEpoch() - 1 // its key has expired
	u.mu.Unlock()

	_, err := c.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrLockHeld, "the lock still stands on every master")
	c.probeAll()
	c.afterProbes()
	assert.Empty(t, holders(t, rdbs, key, l.Token()), "the kept releases were sent")
	for _, m := range c.masters {
		assert.Empty(t, m.unreleased.m, "master %d: nothing left to send", m.idx)
	}
	_, err = c.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
	require.NoError(t, err, "the key is free again")
}

// TestMissedReleasesAreSentInOnePipeline: a master that missed a thousand
// releases (a partition during a burst) gets them all in the next probe
// round in one pipeline, after one SCRIPT LOAD: the probe mutex is not held
// for a thousand round trips. Before, each was one round trip (the hook
// counted 1,000 commands and no pipeline).
func TestMissedReleasesAreSentInOnePipeline(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, WithHealthInterval(time.Hour))
	rdb := direct(t)[0]
	m := c.masters[0]
	prefix := newKey(t)
	const n = retryBatch
	pipe := rdb.Pipeline()
	for i := range n {
		key := prefix + ":" + strconv.Itoa(i)
		pipe.Set(ctx, key, "token-"+strconv.Itoa(i), time.Minute)
		pipe.Set(ctx, c.fenceRecordKey(key), "7 token-"+strconv.Itoa(i), time.Minute)
		m.releaseLater(key, "token-"+strconv.Itoa(i))
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	hook := &roundTrips{}
	m.probe.AddHook(hook)

	c.retryReleases(m)
	assert.Empty(t, m.unreleased.m, "every release was answered")
	assert.Equal(t, 1, hook.pipelines, "one pipeline")
	assert.LessOrEqual(t, hook.commands, 1, "besides it, only the SCRIPT LOAD")
	left, err := rdb.Keys(ctx, prefix+":*").Result()
	require.NoError(t, err)
	assert.Empty(t, left, "every key was released")
	left, err = rdb.Keys(ctx, c.fenceRecordKey(prefix)+":*").Result()
	require.NoError(t, err)
	assert.Empty(t, left, "with its fence record")
}

// roundTrips counts the commands and pipelines a go-redis client sends.
type roundTrips struct{ commands, pipelines int }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.commands++; return next(ctx, cmd) }
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.pipelines++; return next(ctx, cmds) }
}

// TestGrantedLockSeenOnAMasterThatLostItsBookkeeping: L on masters 0–2;
// masters 0 and 2 lose their marker (they stop voting: a data loss) while
// keeping L, and master 1 loses L's key. The acquire script's intact check
// refuses 0 and 2's votes, but their answers still report the granted
// lock, and the contender (1, 3 and 4 vote yes) is refused. Found by an
// adversarial review: the report came after the intact check, and a second
// holder was granted. Negative control: the check off grants it.
func TestGrantedLockSeenOnAMasterThatLostItsBookkeeping(t *testing.T) {
	for _, control := range []bool{false, true} {
		t.Run(map[bool]string{false: "protected", true: "negative control: granted-lock check off"}[control], func(t *testing.T) {
			ctx := context.Background()
			var opts []Option
			if control {
				opts = append(opts, withGuardOff(guardswitch.GrantedLock))
			}
			c := newClient(t, append(opts, WithHealthInterval(time.Hour))...)
			rdbs := direct(t)
			key := newKey(t)
			first := placeOn(t, c, key, 30*time.Second, 0, 1, 2)
			for _, i := range []int{0, 2} {
				require.NoError(t, rdbs[i].Del(ctx, c.opts.markerKey).Err())
			}
			require.NoError(t, rdbs[1].Del(ctx, key, c.fenceRecordKey(key)).Err())
			second, err := c.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
			if control {
				require.NoError(t, err, "negative control: a second holder")
				assert.True(t, time.Now().Before(first.ValidUntil()))
				_ = second.Release(ctx)
				return
			}
			require.ErrorIs(t, err, ErrLockHeld)
			assert.ErrorIs(t, err, ErrMasterDataLost, "masters 0 and 2 are found to have lost their data too")
		})
	}
}

// TestReleaseRefusedByAMasterIsSentAgain: a master answers the release
// with an error (an ACL that refuses scripts for a moment); the release
// still succeeds on the others, and the master keeps the lock's key and
// record. The release is kept and sent again at the next probe round once
// the master accepts it. Found by an adversarial review: the release
// returned at a quorum's answers and never read the error, and the key was
// refused for the rest of its TTL; Release now reads every master's answer.
func TestReleaseRefusedByAMasterIsSentAgain(t *testing.T) {
	ctx := context.Background()
	c, rdbs, l := heldOnEveryMaster(t)
	key := l.Key()
	require.NoError(t, rdbs[4].Do(ctx, "ACL", "SETUSER", "default", "-evalsha", "-eval").Err())
	restored := false
	restore := func() {
		if !restored {
			restored = true
			require.NoError(t, rdbs[4].Do(ctx, "ACL", "SETUSER", "default", "+@all").Err())
		}
	}
	t.Cleanup(restore)
	require.NoError(t, l.Release(ctx))
	// Release returns once every master answered: master 4's refusal is
	// kept, and the others' deletes have landed.
	u := &c.masters[4].unreleased
	u.mu.Lock()
	kept := len(u.m)
	u.mu.Unlock()
	require.Equal(t, 1, kept, "master 4's refused release is kept")
	restore()
	require.Equal(t, []int{4}, holders(t, rdbs, key, l.Token()), "master 4 refused the release; the others applied it")
	_, err := c.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrLockHeld, "master 4 shows the released lock as granted")
	c.probeAll()
	c.afterProbes()
	assert.Empty(t, holders(t, rdbs, key, l.Token()), "the release was sent again")
	_, err = c.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
	require.NoError(t, err, "the key is free")
}

// heldOnEveryMaster returns a Client that probes once an hour, direct
// connections, and a 30s lock of a new key held, with its fence record, on
// every master: the acquire writes the record to the quorum that voted
// first, and an extend to every master it extends.
func heldOnEveryMaster(t *testing.T) (*Client, []*redis.Client, *Lock) {
	t.Helper()
	ctx := context.Background()
	c := newClient(t, WithHealthInterval(time.Hour))
	key := newKey(t)
	l, err := c.Acquire(ctx, key, 30*time.Second)
	require.NoError(t, err)
	settle(t, c, key)
	require.NoError(t, l.Extend(ctx, 30*time.Second))
	settle(t, c, key)
	rdbs := direct(t)
	require.Len(t, holders(t, rdbs, c.fenceRecordKey(key), strconv.FormatInt(l.Fence(), 10)+" "+l.Token()), 5)
	return c, rdbs, l
}

// TestGrantedLockOnAMasterMarkedDown: found by an adversarial pass. A
// lock L is granted on masters 0–2 only (a lost race left 3 and 4 free).
// Master 2 is marked down by this Client — it was paused or restarted and
// has answered again, but the next probe has not seen it yet (an hour
// here) — and masters 0 and 1 lose L silently (two faults). The contender
// has the votes of 0, 1, 3 and 4; only master 2 holds L and its fence
// record. The acquire votes are sent to a master marked down too
// (call.hearDown): it answers with the granted lock and the contender is
// refused. Before, the vote to a master marked down failed at once
// (ErrMasterDown) and a second holder was granted while L stood: for a
// plain lock, a semaphore's slot, and a single key of a multi-key lock
// (negative control, checked by hand: without hearDown each subtest is
// granted). The master is still marked down afterwards: the refusal came
// from its vote, not from a probe.
func TestGrantedLockOnAMasterMarkedDown(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// hold takes the first lock on every master and returns its keys;
		// contend tries the second one.
		hold    func(c *Client, key string) []string
		contend func(c *Client, key string) error
	}{{
		name: "plain lock",
		hold: func(c *Client, key string) []string {
			_, err := c.Acquire(ctx, key, 30*time.Second)
			require.NoError(t, err)
			return []string{key}
		},
		contend: func(c *Client, key string) error {
			_, err := c.Acquire(ctx, key, 10*time.Second, WithRetry(NoRetry()))
			return err
		},
	}, {
		name: "semaphore slot",
		hold: func(c *Client, key string) []string {
			p, err := c.AcquirePermit(ctx, key, 1, 30*time.Second)
			require.NoError(t, err)
			return []string{PermitKey(key, p.Slot)}
		},
		contend: func(c *Client, key string) error {
			_, err := c.AcquirePermit(ctx, key, 1, 10*time.Second, WithRetry(NoRetry()))
			return err
		},
	}, {
		name: "one key of a multi-key lock",
		hold: func(c *Client, key string) []string {
			_, err := c.AcquireMulti(ctx, []string{key, key + ":b"}, 30*time.Second)
			require.NoError(t, err)
			return []string{key, key + ":b"}
		},
		contend: func(c *Client, key string) error {
			_, err := c.Acquire(ctx, key, 10*time.Second, WithRetry(NoRetry()))
			return err
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, WithHealthInterval(time.Hour))
			rdbs := direct(t)
			key := newKey(t)
			// A contender's votes hold masters 3 and 4: the first lock is
			// granted, and its fence record written, on masters 0–2 only.
			blocked := []string{key, PermitKey(key, 0)}
			for _, i := range []int{3, 4} {
				for _, k := range blocked {
					require.NoError(t, rdbs[i].Set(ctx, k, "contender", time.Minute).Err())
				}
			}
			keys := tc.hold(c, key)
			settle(t, c, keys...)
			for _, i := range []int{3, 4} {
				require.NoError(t, rdbs[i].Del(ctx, blocked...).Err())
			}
			for _, k := range keys {
				for i := range 3 {
					require.NotEmpty(t, rdbs[i].Get(ctx, c.fenceRecordKey(k)).Val(), "master %d has %s's fence record", i, k)
				}
			}
			lose := func(masters ...int) {
				for _, i := range masters {
					for _, k := range keys {
						require.NoError(t, rdbs[i].Del(ctx, k, c.fenceRecordKey(k)).Err())
					}
				}
			}
			c.probeAll() // fresh clock readings for the votes
			c.masters[2].setDown(errors.New("marked down by the test: the master answers"))
			lose(0, 1)
			err := tc.contend(c, key)
			require.ErrorIs(t, err, ErrLockHeld, "master 2, marked down but answering, holds the granted lock")
			assert.False(t, c.masters[2].up.Load(), "still marked down: its vote was heard anyway")
		})
	}
}

// TestGrantedLockOnAMasterRestartedWhileRefused: the same as
// TestGrantedLockOnAMasterMarkedDown, with the mark earned: L on masters
// 0–2, the victim (durable) killed, acquires of other keys meanwhile (their
// votes to it are refused), then it restarts with its data, L and L's
// record. Masters 0 and 1 lose L; the contender is refused on the victim's
// answer. Before, go-redis's dial circuit breaker, open after a few
// refused dials, answered every dial for up to a second after the restart
// with the old refusal, and the contender was granted (negative control,
// checked by hand: the lanes' dialer without refusedAsConn).
func TestGrantedLockOnAMasterRestartedWhileRefused(t *testing.T) {
	ctx := context.Background()
	f := newLossFixture(t, true)
	key := "L:" + t.Name()
	l := f.grantOnThree(t, f.c, key, 30*time.Second)
	require.NoError(t, f.servers[victim].Kill())
	for i := range 20 {
		if o, err := f.c.Acquire(ctx, fmt.Sprintf("traffic:%s:%d", t.Name(), i), time.Second, WithRetry(NoRetry())); err == nil {
			require.NoError(t, o.Release(ctx))
		}
	}
	require.False(t, f.c.masters[victim].up.Load(), "the refused dials marked the victim down")
	require.NoError(t, f.servers[victim].RestartKeepingData("--appendonly", "yes"))
	require.Equal(t, l.Token(), f.rdbs[victim].Get(ctx, key).Val(), "the victim kept L")
	for _, i := range []int{0, 1} {
		require.NoError(t, f.rdbs[i].Del(ctx, key, f.c.fenceRecordKey(key)).Err())
	}
	_, err := f.c.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrLockHeld, "the restarted victim answers with the granted lock")
}

// TestMarkedDownVoteIsReportedDown: the vote of a master marked down that
// answers (sent for the granted-lock check) is reported as
// ErrMasterDown, what the master's state is, not as quarantined.
func TestMarkedDownVoteIsReportedDown(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, WithHealthInterval(time.Hour))
	rdbs := direct(t)
	key := newKey(t)
	for i := range 3 {
		require.NoError(t, rdbs[i].Set(ctx, key, "contender", time.Minute).Err())
	}
	c.probeAll()
	c.masters[3].setDown(errors.New("marked down by the test: the master answers"))
	_, err := c.Acquire(ctx, key, 10*time.Second, WithRetry(NoRetry()))
	var oe *OutcomeError
	require.ErrorAs(t, err, &oe)
	require.Len(t, oe.Failures, 1, "%v", err)
	var me *MasterError
	require.ErrorAs(t, oe.Failures[0], &me)
	assert.Equal(t, 3, me.Index)
	assert.ErrorIs(t, me, ErrMasterDown)
	assert.NotErrorIs(t, me, ErrMasterQuarantined)
	assert.Empty(t, rdbs[3].Get(ctx, key).Val(), "its vote was cleaned up")
}

// TestRecordOnEveryMasterHoldingTheLock: a lock L granted with four votes
// (a stale key held the fifth master) stores its fence record on every
// master its vote reached, the late voters too, not only on the quorum
// whose votes came first. Then L's key and record are deleted on two
// masters (N − quorum), the fifth master is freed, and one master left
// with L's record is paused: a contender has three votes, and the one
// master left that answers holds L. Before, the write-back went to the
// first quorum of voters alone and that master could hold L's key bare: it
// answered "held" without the record, the paused one did not answer in
// time, and the contender was granted L while it stood (a black-box pass:
// two masters' lock keys deleted every 0.3 s under load, two holders in 2
// of 5 runs). It must see the record there and be refused.
func TestRecordOnEveryMasterHoldingTheLock(t *testing.T) {
	f := newLossFixture(t, false)
	ctx := context.Background()
	c := f.c
	_, err := c.Acquire(ctx, "long:"+t.Name(), 300*time.Second) // holds every horizon
	require.NoError(t, err)
	key := "L:" + t.Name()
	require.NoError(t, f.rdbs[4].Set(ctx, key, "stale", time.Minute).Err())
	first, err := c.Acquire(ctx, key, 30*time.Second, WithRetry(NoRetry()))
	require.NoError(t, err)
	record := c.fenceRecordKey(key)
	var holders, withRecord, bare []int
	require.Eventually(t, func() bool {
		holders, withRecord, bare = nil, nil, nil
		for i := range 4 {
			if f.rdbs[i].Get(ctx, key).Val() != first.Token() {
				continue
			}
			holders = append(holders, i)
			if strings.HasSuffix(f.rdbs[i].Get(ctx, record).Val(), " "+first.Token()) {
				withRecord = append(withRecord, i)
			} else {
				bare = append(bare, i)
			}
		}
		return len(holders) == 4 && len(withRecord) >= c.quorum
	}, 5*time.Second, 10*time.Millisecond, "L's votes on masters 0-3, its record on a quorum of them")
	assert.Empty(t, bare, "every master L's vote reached holds its record")
	// paused keeps L's record; left answers, bare when one is; the other
	// two lose L's key and record.
	left := holders[3]
	if len(bare) > 0 {
		left = bare[0]
	}
	paused := -1
	var lose []int
	for _, i := range holders {
		switch {
		case i == left:
		case paused < 0 && slices.Contains(withRecord, i):
			paused = i
		default:
			lose = append(lose, i)
		}
	}
	require.Len(t, lose, 2)
	for _, i := range lose {
		require.NoError(t, f.rdbs[i].Del(ctx, key, record).Err())
	}
	require.NoError(t, f.rdbs[4].Del(ctx, key).Err())
	c.probeAll() // the clocks read now: the votes count
	require.NoError(t, f.servers[paused].Pause())
	t.Cleanup(func() { _ = f.servers[paused].Resume() })

	second, err := c.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
	require.True(t, time.Now().Before(first.ValidUntil()), "L is still valid")
	require.Nil(t, second, "no second holder while L is valid (master %d holds L, %d is paused, %v lost it)", left, paused, lose)
	require.ErrorIs(t, err, ErrLockHeld, "refused as held: master %d shows L's record", left)
}
