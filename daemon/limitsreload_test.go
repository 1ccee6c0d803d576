package daemon

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/redisproc"

	"github.com/redlockd/redlockd/daemon/limits"
)

// A reload changes an account's limits, never what was counted against
// them: the calls in the quota window, the rate bucket and the held locks
// stay, whatever limit changes, and when the account is removed and added
// back.

// reloadAcme applies acme's limits lim by a reload (SetAPIKeys, as
// POST /admin/reload and SIGHUP do); without lim, acme is removed.
func reloadAcme(t *testing.T, d *limitDaemon, lim ...limits.Limits) {
	t.Helper()
	require.NoError(t, setAcme(d, lim...))
}

func setAcme(d *limitDaemon, lim ...limits.Limits) error {
	keys := []APIKey{{Account: "globex", Hash: sha256.Sum256([]byte(testKeyGlobex))}}
	if len(lim) > 0 {
		keys = append(keys, APIKey{Account: "acme", Hash: sha256.Sum256([]byte(testKeyAcme)), Limits: lim[0]})
	}
	_, err := d.srv.SetAPIKeys(keys)
	return err
}

// The quota spent in a window stays spent when a reload raises it, lowers
// it, changes another limit, or removes the account and adds it back: the
// account gets what the new quota leaves, never a fresh allowance. The
// sync interval is long, so that what is tested is this daemon's own
// count, not what the masters hand back at the next round.
func TestReloadKeepsQuotaCount(t *testing.T) {
	servers := limitMasters(t)
	awayFromWindowEnd(t, time.Hour)
	lim := limits.Limits{QuotaCalls: 10, QuotaWindow: time.Hour, MaxLocks: 100}
	d := startLimitDaemon(t, servers, lim, time.Hour)
	admitted := 0
	spend := func(want int) {
		t.Helper()
		for {
			r := d.lock(t, statusBody("q"))
			if r.Status == http.StatusTooManyRequests {
				require.Equal(t, "quota_exhausted", r.code(), r.Raw)
				break
			}
			require.Equal(t, http.StatusOK, r.Status, r.Raw)
			admitted++
			require.LessOrEqual(t, admitted, want, "admitted beyond the quota in force")
		}
		require.Equal(t, want, admitted, "calls admitted in the window")
	}
	spend(10)

	lim.QuotaCalls = 11 // up by one: one more call
	reloadAcme(t, d, lim)
	spend(11)
	lim.QuotaCalls = 5 // down: nothing more
	reloadAcme(t, d, lim)
	spend(11)
	lim.QuotaCalls = 12
	reloadAcme(t, d, lim)
	spend(12)

	// Any other limit: rate, burst, max_locks.
	lim.Rate, lim.Burst = 1000, 1000
	reloadAcme(t, d, lim)
	spend(12)
	lim.MaxLocks = 7
	reloadAcme(t, d, lim)
	spend(12)
	// A longer window holds the calls of the window in progress.
	lim.QuotaCalls, lim.QuotaWindow = 13, 24*time.Hour
	awayFromWindowEnd(t, lim.QuotaWindow)
	reloadAcme(t, d, lim)
	spend(13)
	lim.QuotaCalls, lim.QuotaWindow = 14, time.Hour
	reloadAcme(t, d, lim)
	spend(14)

	// Removed, then added back with a higher quota.
	reloadAcme(t, d)
	r := d.lock(t, statusBody("q"))
	require.Equal(t, http.StatusUnauthorized, r.Status, r.Raw)
	lim.QuotaCalls = 15
	reloadAcme(t, d, lim)
	spend(15)

	// The masters hold what was admitted, once synced.
	d.stop()
	assert.EqualValues(t, 15, quotaCounted(t, servers[:]), "calls on the masters")
}

// A reload that changes the quota window's length carries the calls of
// the window in progress into the new window's bucket on the masters,
// other daemons' calls included (here those of the process before a
// restart): a daemon started after it, a replica or this one restarted,
// goes on from them. Found by a black-box pass: only the reloading
// daemon's own calls went to the new bucket, and 30 calls made before an
// earlier restart were handed out again after the next one.
func TestReloadCarriesOtherDaemonsCallsIntoANewWindow(t *testing.T) {
	servers := limitMasters(t)
	lim := limits.Limits{QuotaCalls: 20, QuotaWindow: time.Hour}
	awayFromWindowEnd(t, lim.QuotaWindow)
	awayFromWindowEnd(t, 2*time.Hour)
	// An interval far longer than the test: only the first and the last
	// round of each daemon run.
	a := startLimitDaemon(t, servers, lim, 10*time.Second)
	for i := range 6 {
		okRemain(t, a.lock(t, statusBody(fmt.Sprintf("a%d", i))), int64(19-i))
	}
	a.stop()

	b := startLimitDaemon(t, servers, lim, 10*time.Second)
	okRemain(t, b.lock(t, statusBody("b0")), 13)
	lim.QuotaWindow = 2 * time.Hour
	reloadAcme(t, b, lim)
	okRemain(t, b.lock(t, statusBody("b1")), 12)
	b.stop()

	c := startLimitDaemon(t, servers, lim, 10*time.Second)
	okRemain(t, c.lock(t, statusBody("c0")), 11)
}

// A quota a reload removed and a later reload sets again with another
// per keeps the calls counted before the removal in the window in
// progress, as with the same per (operations.md: "those before the quota
// was removed"); calls made with no quota are not counted. With another
// per they were dropped, as a window gone by.
func TestQuotaSetAgainWithAnotherPerKeepsItsCalls(t *testing.T) {
	servers := limitMasters(t)
	lim := limits.Limits{QuotaCalls: 10, QuotaWindow: time.Hour, MaxLocks: 100}
	awayFromWindowEnd(t, lim.QuotaWindow)
	// A per whose window starts elsewhere than the hour's now: where the
	// two start together (the first hour of a 2 h window), a window's
	// start does not tell them apart, and the check would pass without
	// the fix.
	per := time.Duration(0)
	for _, p := range []time.Duration{2 * time.Hour, 3 * time.Hour, 5 * time.Hour, 7 * time.Hour} {
		if now := time.Now(); windowStart(now, p) != windowStart(now, time.Hour) {
			per = p
			break
		}
	}
	require.NotZero(t, per, "a per of 2, 3, 5 or 7 hours whose window starts before this hour")
	awayFromWindowEnd(t, per)
	d := startLimitDaemon(t, servers, lim, time.Hour)
	for i := range 4 {
		okRemain(t, d.lock(t, statusBody(fmt.Sprintf("q%d", i))), int64(9-i))
	}
	lim.QuotaCalls, lim.QuotaWindow = 0, 0 // no quota; max_locks keeps the account's state
	reloadAcme(t, d, lim)
	okRemain(t, d.lock(t, statusBody("free")), -1)
	lim.QuotaCalls, lim.QuotaWindow = 10, per
	reloadAcme(t, d, lim)
	okRemain(t, d.lock(t, statusBody("again")), 5)
}

// Two live daemons that both reload to a new window length each carry
// the other's calls under the other's id, and each its own under its own:
// the fields are max-merged, so a daemon started afterwards counts every
// call once, not twice.
func TestReloadOfTwoDaemonsCountsEachCallOnce(t *testing.T) {
	servers := limitMasters(t)
	lim := limits.Limits{QuotaCalls: 20, QuotaWindow: time.Hour}
	awayFromWindowEnd(t, lim.QuotaWindow)
	awayFromWindowEnd(t, 2*time.Hour)
	x := startLimitDaemon(t, servers, lim, limitsInterval)
	y := startLimitDaemon(t, servers, lim, limitsInterval)
	for i := range 3 {
		require.Equal(t, http.StatusOK, x.lock(t, statusBody(fmt.Sprintf("x%d", i))).Status)
		require.Equal(t, http.StatusOK, y.lock(t, statusBody(fmt.Sprintf("y%d", i))).Status)
	}
	// Each has read the other's calls before it reloads.
	for _, d := range []*limitDaemon{x, y} {
		require.Eventually(t, func() bool {
			return strings.Contains(scrape(t, d), `redlockd_quota_remaining{account="acme"} 14`+"\n")
		}, 10*time.Second, 10*time.Millisecond)
	}
	lim.QuotaWindow = 2 * time.Hour
	reloadAcme(t, x, lim)
	reloadAcme(t, y, lim)
	okRemain(t, x.lock(t, statusBody("x3")), 13)
	x.stop()
	y.stop()

	z := startLimitDaemon(t, servers, lim, 10*time.Second)
	okRemain(t, z.lock(t, statusBody("z0")), 12)
}

// A rate bucket is not refilled by a reload: with a rate so low that it
// does not refill during the test, the burst spent stays spent when the
// rate and burst go up or down, another limit changes, or the account is
// removed and added back.
func TestReloadKeepsRateBucket(t *testing.T) {
	servers := limitMasters(t)
	lim := limits.Limits{Rate: 0.001, Burst: 3}
	d := startLimitDaemon(t, servers, lim, time.Hour)
	for range 3 {
		okRemain(t, d.lock(t, statusBody("r")), -1)
	}
	r := d.lock(t, statusBody("r"))
	require.Equal(t, http.StatusTooManyRequests, r.Status, r.Raw)
	assert.Equal(t, "rate_limited", r.code())

	for _, next := range []limits.Limits{
		{Rate: 0.002, Burst: 6},
		{Rate: 0.002, Burst: 6, MaxLocks: 5},
		{Rate: 0.002, Burst: 6, QuotaCalls: 100, QuotaWindow: time.Hour},
		{Rate: 0.0005, Burst: 2}, // down
		{Rate: 0.002, Burst: 6},  // and up again
	} {
		reloadAcme(t, d, next)
		r = d.lock(t, statusBody("r"))
		require.Equal(t, http.StatusTooManyRequests, r.Status, "%+v: %s", next, r.Raw)
		assert.Equal(t, "rate_limited", r.code())
	}
	reloadAcme(t, d)
	reloadAcme(t, d, limits.Limits{Rate: 0.002, Burst: 6})
	r = d.lock(t, statusBody("r"))
	require.Equal(t, http.StatusTooManyRequests, r.Status, "removed and added back: %s", r.Raw)
}

// max_locks holds on one daemon through a reload: a burst of concurrent
// acquires right after a reload that changed a limit is refused past the
// cap, counting the locks granted before the reload and not synced yet.
func TestReloadMaxLocksBurst(t *testing.T) {
	servers := limitMasters(t)
	lim := limits.Limits{MaxLocks: 21}
	d := startLimitDaemon(t, servers, lim, time.Hour)
	for i := range 20 {
		r := d.lock(t, fmt.Sprintf(`{"key":"pre%d","ttl":60}`, i))
		okRemain(t, r, -1)
		require.Equal(t, true, r.data(t)["acquired"], r.Raw)
	}
	held := int64(20)
	burst := func(name string, cap int64) {
		t.Helper()
		var granted atomic.Int64
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, raw, err := postLock(d.client, d.URL, testKeyAcme, fmt.Sprintf(`{"key":"%s%d","ttl":60}`, name, i))
				if !assert.NoError(t, err) {
					return
				}
				switch st {
				case http.StatusOK:
					granted.Add(1)
				case http.StatusTooManyRequests:
					assert.Contains(t, raw, "too_many_locks")
				default:
					t.Errorf("acquire: %d %s", st, raw)
				}
			}()
		}
		wg.Wait()
		held += granted.Load()
		assert.LessOrEqual(t, held, cap, "locks held after the burst %s", name)
	}

	lim.MaxLocks = 22 // one more slot
	reloadAcme(t, d, lim)
	burst("b1-", 22)
	lim.MaxLocks, lim.QuotaCalls, lim.QuotaWindow = 22, 1000, time.Hour
	reloadAcme(t, d, lim)
	burst("b2-", 22)
	reloadAcme(t, d)
	reloadAcme(t, d, lim)
	burst("b3-", 22)
}

// postLock posts one lock action; safe in any goroutine.
func postLock(c *http.Client, url, apiKey, body string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/v1/lock", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("X-API-Key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// heldOnMasters is, per master, acme's held-set count (its locks not
// ended) and its lock keys.
func heldOnMasters(t *testing.T, servers []*redisproc.Server) (held, keys []int64) {
	t.Helper()
	ctx := context.Background()
	for _, s := range servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		now := time.Now().UnixMilli()
		n, err := c.ZCount(ctx, heldKey(testPrefix, "acme"), strconv.FormatInt(now, 10), "+inf").Result()
		require.NoError(t, err)
		ks, err := c.Keys(ctx, testPrefix+"lock:4:acme:*").Result()
		_ = c.Close()
		require.NoError(t, err)
		held, keys = append(held, n), append(keys, int64(len(ks)))
	}
	return held, keys
}

// A reload storm under load, on two daemons: 64 clients acquire (and
// never release) and ask for status through both while both reload
// again and again, changing every limit and now and then removing the
// account. Neither the quota nor max_locks is passed by more than the
// documented overshoot bound (docs/api.md) for two daemons, and once everything has
// settled the held set on every master counts exactly the lock keys
// there.
func TestReloadStormKeepsLimits(t *testing.T) {
	servers := limitMasters(t)
	awayFromWindowEnd(t, time.Hour)
	limA := limits.Limits{QuotaCalls: 600, QuotaWindow: time.Hour, Rate: 400, Burst: 40, MaxLocks: 150}
	limB := limits.Limits{QuotaCalls: 601, QuotaWindow: time.Hour, Rate: 401, Burst: 41, MaxLocks: 151}
	daemons := []*limitDaemon{
		startLimitDaemon(t, servers, limA, limitsInterval),
		startLimitDaemon(t, servers, limA, limitsInterval),
	}

	// 503s are counted like any call that reached the masters.
	var admitted, refused, unavailable atomic.Int64
	stop := make(chan struct{})
	var clients sync.WaitGroup
	for c := range 64 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			d := daemons[c%2]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf(`{"key":"c%d-%d","ttl":120}`, c, i)
				if i%3 == 2 {
					body = statusBody(fmt.Sprintf("c%d-%d", c, i-1))
				}
				st, raw, err := postLock(d.client, d.URL, testKeyAcme, body)
				if !assert.NoError(t, err) {
					return
				}
				switch st {
				case http.StatusOK:
					admitted.Add(1)
				case http.StatusServiceUnavailable:
					unavailable.Add(1)
				case http.StatusTooManyRequests, http.StatusUnauthorized:
					refused.Add(1)
				default:
					t.Errorf("%d %s", st, raw)
					return
				}
			}
		}()
	}
	// Each daemon reloads 300 times, while the clients go on.
	var reloads sync.WaitGroup
	for di, d := range daemons {
		reloads.Add(1)
		go func() {
			defer reloads.Done()
			for i := range 300 {
				lim := [][]limits.Limits{{limA}, {limB}, {limA}, {limB}, nil}[(i+di)%5]
				assert.NoError(t, setAcme(d, lim...))
				if i%10 == 0 {
					// Let calls through between reloads.
					_, _, _ = postLock(d.client, d.URL, testKeyGlobex, statusBody("pace"))
				}
			}
		}()
	}
	reloads.Wait()
	close(stop)
	clients.Wait()
	for _, d := range daemons {
		reloadAcme(t, d, limA)
	}
	calls := admitted.Load() + unavailable.Load()

	// Bound: (n − 1) × (burst + rate × L) for n = 2, with L = 1 s for a
	// sync interval plus a round trip on a loaded machine.
	bound := int64(limB.Burst) + int64(math.Ceil(limB.Rate))
	t.Logf("admitted %d calls (%d answered 503; quota %d, bound %d), %d refused", calls, unavailable.Load(), limB.QuotaCalls, bound, refused.Load())
	assert.LessOrEqual(t, calls, limB.QuotaCalls+bound, "calls admitted")

	// Settled: every daemon has synced what it granted.
	var held, keys []int64
	require.Eventually(t, func() bool {
		held, keys = heldOnMasters(t, servers)
		return assert.ObjectsAreEqual(held, keys)
	}, 10*time.Second, 20*time.Millisecond, "the held sets count the lock keys: held %v, keys %v", &held, &keys)
	_, keys = heldOnMasters(t, servers)
	for i, n := range keys {
		assert.LessOrEqual(t, n, int64(limB.MaxLocks)+bound, "locks on master %d", i)
	}
	for _, d := range daemons {
		require.Eventually(t, func() bool { return *d.stats(t).LocksHeld == keys[0] }, 5*time.Second, 10*time.Millisecond,
			"locks_held is what the masters hold")
	}
}

// heldKey is the key of account's held-lock set on the masters, as
// package limits lays it out (limits/store.go).
func heldKey(prefix, account string) string { return prefix + "held:" + encPart(account) }
