package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/redlockd/redlockd/redlock"

	"github.com/redlockd/redlockd/daemon/limits"
)

// Account limits on real masters: every test starts five redis-server
// masters of its own (some tests stop them) and one or two daemons (Server
// instances, each with its own redlock.Client and LimitStore, as two
// `redlockd serve` replicas have) over them.

const limitsInterval = 20 * time.Millisecond

// limitMasters starts five masters for one test.
func limitMasters(t *testing.T) []*redisproc.Server {
	t.Helper()
	servers, err := redisproc.StartN(5, redisproc.Options{})
	if err != nil {
		t.Skip("needs redis-server:", err)
	}
	t.Cleanup(func() { _ = redisproc.StopAll(servers) })
	return servers
}

// limitDaemon is one daemon over the test's masters.
type limitDaemon struct {
	URL    string
	srv    *Server
	reg    *prometheus.Registry
	client *http.Client
	stop   func()
}

// startLimitDaemon serves account acme with lim (globex: no limits) over
// servers, syncing every interval.
func startLimitDaemon(t *testing.T, servers []*redisproc.Server, lim limits.Limits, interval time.Duration) *limitDaemon {
	t.Helper()
	masters := make([]*redis.Options, len(servers))
	for i, s := range servers {
		masters[i] = &redis.Options{Addr: s.Addr()}
	}
	locker := limitsClient(t, masters)
	store, err := limits.NewStore(masters, time.Second) // as redlockd: twice the per-master timeout
	require.NoError(t, err)
	rl := NewRedlockLocker(locker)
	return serveLimits(t, rl, store, lim, interval, func() { _ = locker.Close() })
}

// limitsClient is a redlock Client over masters for the limits tests.
// What is tested is the limits, not the timeouts: a per-master timeout as
// long as the other real-daemon tests use keeps a loaded machine from
// turning answers into 503s.
func limitsClient(t *testing.T, masters []*redis.Options) *redlock.Client {
	t.Helper()
	c, err := redlock.New(masters, redlock.WithMarkerKey(testPrefix+"marker"), redlock.WithFenceKey(testPrefix+"fence"),
		redlock.WithHealthInterval(100*time.Millisecond), redlock.WithPerMasterTimeout(500*time.Millisecond))
	require.NoError(t, err)
	return c
}

// serveLimits serves account acme with lim (globex: no limits) over
// locker, with the limits' store, syncing every interval; closeLocker
// runs after the daemon and the store have stopped.
func serveLimits(t *testing.T, locker MasterLocker, store *limits.Store, lim limits.Limits, interval time.Duration, closeLocker func()) *limitDaemon {
	t.Helper()
	reg := prometheus.NewRegistry()
	srv, err := New(zap.NewNop(), &Options{
		APIKeys: []APIKey{
			{Account: "acme", Hash: sha256.Sum256([]byte(testKeyAcme)), Limits: lim},
			{Account: "globex", Hash: sha256.Sum256([]byte(testKeyGlobex))},
		},
		KeyPrefix:          testPrefix,
		MaxWait:            2 * time.Second,
		ShutdownTimeout:    5 * time.Second,
		Locker:             locker,
		Health:             locker,
		Metrics:            NewMetrics(reg),
		LimitStore:         store,
		LimitsSyncInterval: interval,
	})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	tr := &http.Transport{}
	d := &limitDaemon{URL: "http://" + ln.Addr().String(), srv: srv, reg: reg, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
	var once sync.Once
	d.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				assert.NoError(t, err, "Serve")
			case <-time.After(10 * time.Second):
				t.Error("Serve did not return")
			}
			tr.CloseIdleConnections()
			_ = store.Close()
			closeLocker()
		})
	}
	t.Cleanup(d.stop)
	// The masters count once the Client has compared their clocks.
	require.Eventually(t, func() bool {
		resp, err := d.client.Get(d.URL + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "daemon ready")
	return d
}

// lock posts one action for acme.
func (d *limitDaemon) lock(t *testing.T, body string) *response {
	t.Helper()
	return d.lockAs(t, testKeyAcme, body)
}

func (d *limitDaemon) lockAs(t *testing.T, apiKey, body string) *response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.URL+"/v1/lock", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-API-Key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var raw strings.Builder
	_, err = io.Copy(&raw, resp.Body)
	require.NoError(t, err)
	r := &response{Status: resp.StatusCode, Header: resp.Header, Raw: raw.String()}
	require.NoError(t, json.Unmarshal([]byte(r.Raw), &r.Env), r.Raw)
	require.NotNil(t, r.Env.RemainQuota, r.Raw)
	return r
}

// stats is acme's entry in GET /v1/stats.
func (d *limitDaemon) stats(t *testing.T) limits.AccountStats {
	t.Helper()
	resp, err := d.client.Get(d.URL + "/v1/stats")
	require.NoError(t, err)
	defer resp.Body.Close()
	var body struct {
		Accounts map[string]limits.AccountStats `json:"accounts"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	_, hasGlobex := body.Accounts["globex"]
	require.False(t, hasGlobex, "an account without limits is not listed")
	return body.Accounts["acme"]
}

// waitRemaining waits until d knows that acme has n calls left.
func (d *limitDaemon) waitRemaining(t *testing.T, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		st := d.stats(t)
		return st.QuotaRemaining != nil && *st.QuotaRemaining == n
	}, 5*time.Second, 5*time.Millisecond, "quota_remaining %d", n)
}

// keysOn returns the keys matching pattern on every running master.
func keysOn(t *testing.T, servers []*redisproc.Server, pattern string) []string {
	t.Helper()
	var all []string
	for _, s := range servers {
		if !s.Running() {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		keys, err := c.Keys(context.Background(), pattern).Result()
		_ = c.Close()
		require.NoError(t, err)
		for _, k := range keys {
			all = append(all, s.Addr()+" "+k)
		}
	}
	return all
}

// quotaCounted is the calls the masters' quota hashes hold for acme: per
// daemon the largest value any master has, summed.
func quotaCounted(t *testing.T, servers []*redisproc.Server) int64 {
	t.Helper()
	best := map[string]int64{}
	for _, s := range servers {
		if !s.Running() {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		keys, err := c.Keys(context.Background(), testPrefix+"quota:4:acme:*").Result()
		require.NoError(t, err)
		for _, k := range keys {
			m, err := c.HGetAll(context.Background(), k).Result()
			require.NoError(t, err)
			for id, v := range m {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err)
				best[k+" "+id] = max(best[k+" "+id], n)
			}
		}
		_ = c.Close()
	}
	var sum int64
	for _, n := range best {
		sum += n
	}
	return sum
}

// awayFromWindowEnd waits, when a window of w ends within the next 20 s,
// until the next one has begun, so that a test runs in one window.
func awayFromWindowEnd(t *testing.T, w time.Duration) {
	t.Helper()
	now := time.Now()
	end := time.UnixMilli(windowStart(now, w)).Add(w)
	if left := end.Sub(now); left < 20*time.Second {
		time.Sleep(left + 10*time.Millisecond)
	}
}

func statusBody(key string) string { return `{"action":"status","key":"` + key + `"}` }

// Two daemons on the same masters enforce one quota together: each call
// through either counts once, remain_quota says how many are left after
// it, and the call past the quota is refused by both with 429
// quota_exhausted, Retry-After until the window ends, and no key written.
func TestQuotaSharedByTwoDaemons(t *testing.T) {
	servers := limitMasters(t)
	lim := limits.Limits{QuotaCalls: 20, QuotaWindow: time.Hour}
	awayFromWindowEnd(t, lim.QuotaWindow)
	a := startLimitDaemon(t, servers, lim, limitsInterval)
	b := startLimitDaemon(t, servers, lim, limitsInterval)

	want := int64(20)
	call := func(d *limitDaemon, i int) {
		t.Helper()
		want--
		r := d.lock(t, statusBody(fmt.Sprintf("q%d", i)))
		okRemain(t, r, want)
		if want*10 < 20 {
			assert.Equal(t, "enough calls, "+strconv.FormatInt(want, 10)+" left", r.Env.Msg, "a low quota says so")
		} else {
			assert.Empty(t, r.Env.Msg)
		}
	}
	for i := range 10 {
		call(a, i)
	}
	b.waitRemaining(t, 10)
	for i := 10; i < 20; i++ {
		call(b, i)
	}
	a.waitRemaining(t, 0)

	// Globex has no quota: never counted.
	okRemain(t, a.lockAs(t, testKeyGlobex, statusBody("g")), -1)

	for _, d := range []*limitDaemon{a, b} {
		before := time.Now()
		r := d.lock(t, `{"action":"acquire","key":"refused","ttl":30}`)
		require.Equal(t, http.StatusTooManyRequests, r.Status, r.Raw)
		assert.Equal(t, "err", r.Env.Ret)
		assert.Equal(t, "quota_exhausted", r.code())
		assert.EqualValues(t, 0, *r.Env.RemainQuota)
		assert.True(t, strings.HasPrefix(r.Env.Msg, "not enough calls, 0 left"), r.Env.Msg)
		assert.Contains(t, r.Env.Msg, "20 calls per 1h")
		end := time.UnixMilli(windowStart(before, time.Hour)).Add(time.Hour)
		ra, err := strconv.ParseInt(r.Header.Get("Retry-After"), 10, 64)
		require.NoError(t, err, r.Header)
		assert.InDelta(t, end.Sub(before).Seconds(), float64(ra), 2, "Retry-After is when the window resets")
	}
	assert.Empty(t, keysOn(t, servers, testPrefix+"lock:*refused*"), "a refused acquire writes no lock key")
	require.Eventually(t, func() bool { return quotaCounted(t, servers) == 20 }, 2*time.Second, 10*time.Millisecond)
	time.Sleep(5 * limitsInterval)
	assert.EqualValues(t, 20, quotaCounted(t, servers), "refused calls are not counted")

	st := a.stats(t)
	assert.EqualValues(t, 1, st.QuotaExhausted)
	assert.EqualValues(t, 20, *st.QuotaLimit)
	assertMetric(t, a, `redlockd_quota_remaining{account="acme"} 0`)
	assertMetric(t, a, `redlockd_quota_limit{account="acme"} 20`)
	assertMetric(t, a, `redlockd_quota_exhausted_total{account="acme"} 1`)
	assertMetric(t, a, `redlockd_requests_total{action="acquire",result="quota_exhausted"} 1`)
}

// okRemain checks a 200 answer with remain_quota want.
func okRemain(t *testing.T, r *response, want int64) {
	t.Helper()
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	require.Equal(t, "ok", r.Env.Ret, r.Raw)
	assert.EqualValues(t, want, *r.Env.RemainQuota, r.Raw)
}

// assertMetric checks that d's /metrics has the line want, and shows the
// series of the same name if not.
func assertMetric(t *testing.T, d *limitDaemon, want string) {
	t.Helper()
	text := scrape(t, d)
	for line := range strings.SplitSeq(text, "\n") {
		if line == want {
			return
		}
	}
	name, _, _ := strings.Cut(want, "{")
	var same []string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, name) {
			same = append(same, line)
		}
	}
	t.Errorf("/metrics has no line %q; its %s lines:\n%s", want, name, strings.Join(same, "\n"))
}

func scrape(t *testing.T, d *limitDaemon) string {
	t.Helper()
	resp, err := d.client.Get(d.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	var b strings.Builder
	_, err = io.Copy(&b, resp.Body)
	require.NoError(t, err)
	return b.String()
}

// The quota lives on the masters: a daemon stopped and started again
// (a new process would have a new id) goes on from where the calls were,
// including the calls made since its last periodic sync: it writes them
// when it stops, and reads everyone's before it serves.
func TestQuotaSurvivesRestart(t *testing.T) {
	servers := limitMasters(t)
	lim := limits.Limits{QuotaCalls: 10, QuotaWindow: 24 * time.Hour}
	awayFromWindowEnd(t, lim.QuotaWindow)
	// An interval far longer than the test: only the first and the last
	// round run.
	a := startLimitDaemon(t, servers, lim, 10*time.Second)
	for i := range 6 {
		okRemain(t, a.lock(t, statusBody(fmt.Sprintf("r%d", i))), int64(9-i))
	}
	a.stop()
	assert.EqualValues(t, 6, quotaCounted(t, servers), "the last round wrote the calls")

	a2 := startLimitDaemon(t, servers, lim, 10*time.Second)
	okRemain(t, a2.lock(t, statusBody("after")), 3)
}

// One rate limit for two daemons: a burst spent through one leaves the
// other's bucket empty once it has synced, and the next call there is
// refused with 429 rate_limited and Retry-After in seconds, without
// reaching the masters.
func TestRateSharedByTwoDaemons(t *testing.T) {
	servers := limitMasters(t)
	lim := limits.Limits{Rate: 0.5, Burst: 8}
	a := startLimitDaemon(t, servers, lim, limitsInterval)
	b := startLimitDaemon(t, servers, lim, limitsInterval)

	for i := range 8 {
		okRemain(t, a.lock(t, statusBody(fmt.Sprintf("r%d", i))), -1)
	}
	r := a.lock(t, `{"action":"acquire","key":"rate-refused-a","ttl":30}`)
	require.Equal(t, http.StatusTooManyRequests, r.Status, r.Raw)
	assert.Equal(t, "rate_limited", r.code())

	require.Eventually(t, func() bool {
		st := b.stats(t)
		return st.RateTokens != nil && *st.RateTokens < 1
	}, 5*time.Second, 5*time.Millisecond, "b learns what a spent")
	r = b.lock(t, `{"action":"acquire","key":"rate-refused-b","ttl":30}`)
	require.Equal(t, http.StatusTooManyRequests, r.Status, r.Raw)
	assert.Equal(t, "rate_limited", r.code())
	assert.EqualValues(t, -1, *r.Env.RemainQuota, "no quota: -1")
	assert.Contains(t, r.Env.Msg, "0.5 calls per second (burst 8)")
	ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
	require.NoError(t, err)
	// Tokens refill at 0.5/s: a call needs at most 2 s per missing token.
	assert.True(t, ra >= 1 && ra <= 2, "Retry-After %d", ra)
	assert.Empty(t, keysOn(t, servers, testPrefix+"lock:*rate-refused*"), "refused acquires write no lock key")
	assertMetric(t, b, `redlockd_rate_limited_total{account="acme"} 1`)
	assert.EqualValues(t, 1, b.stats(t).RateLimited)
}

// With two of five masters stopped, the daemons still share the quota and
// the lock cap; the masters coming back empty change nothing, since every
// count is the largest a master reports.
func TestLimitsWithTwoMastersDown(t *testing.T) {
	servers := limitMasters(t)
	lim := limits.Limits{QuotaCalls: 12, QuotaWindow: time.Hour, MaxLocks: 2}
	awayFromWindowEnd(t, lim.QuotaWindow)
	a := startLimitDaemon(t, servers, lim, limitsInterval)
	b := startLimitDaemon(t, servers, lim, limitsInterval)

	okRemain(t, a.lock(t, statusBody("x")), 11)
	b.waitRemaining(t, 11)
	require.NoError(t, servers[0].Kill())
	require.NoError(t, servers[3].Kill())

	okRemain(t, a.lock(t, statusBody("y")), 10)
	okRemain(t, a.lock(t, `{"action":"acquire","key":"held1","ttl":30}`), 9)
	b.waitRemaining(t, 9)
	require.Eventually(t, func() bool { return *b.stats(t).LocksHeld == 1 }, 5*time.Second, 5*time.Millisecond)
	okRemain(t, b.lock(t, `{"action":"acquire","key":"held2","ttl":30}`), 8)
	a.waitRemaining(t, 8)
	require.Eventually(t, func() bool { return *a.stats(t).LocksHeld == 2 }, 5*time.Second, 5*time.Millisecond)
	r := a.lock(t, `{"action":"acquire","key":"held3","ttl":30}`)
	require.Equal(t, http.StatusTooManyRequests, r.Status, r.Raw)
	assert.Equal(t, "too_many_locks", r.code())

	require.NoError(t, servers[0].Restart())
	require.NoError(t, servers[3].Restart())
	time.Sleep(10 * limitsInterval)
	a.waitRemaining(t, 8)
	b.waitRemaining(t, 8)
	assert.EqualValues(t, 2, *a.stats(t).LocksHeld, "the restarted masters' empty sets do not lower the count")
}

// The cap on held locks holds across two daemons, and a slot comes back
// when a lock is released (through the other daemon) and when one expires.
func TestMaxLocksAcrossDaemons(t *testing.T) {
	servers := limitMasters(t)
	lim := limits.Limits{MaxLocks: 3}
	a := startLimitDaemon(t, servers, lim, limitsInterval)
	b := startLimitDaemon(t, servers, lim, limitsInterval)
	acquire := func(d *limitDaemon, key string, ttl int) string {
		t.Helper()
		r := d.lock(t, `{"action":"acquire","key":"`+key+`","ttl":`+strconv.Itoa(ttl)+`}`)
		okRemain(t, r, -1)
		data := r.data(t)
		require.Equal(t, true, data["acquired"], r.Raw)
		return data["token"].(string)
	}
	refused := func(d *limitDaemon, key string) {
		t.Helper()
		r := d.lock(t, `{"action":"acquire","key":"`+key+`","ttl":30}`)
		require.Equal(t, http.StatusTooManyRequests, r.Status, r.Raw)
		assert.Equal(t, "too_many_locks", r.code())
		assert.Contains(t, r.Env.Msg, "holds 3 and its limit (max_locks) is 3")
		assert.Equal(t, "1", r.Header.Get("Retry-After"))
		assert.Empty(t, keysOn(t, servers, testPrefix+"lock:*"+key+"*"), "a refused acquire writes no lock key")
	}
	waitHeld := func(d *limitDaemon, n int64) {
		t.Helper()
		require.Eventually(t, func() bool { return *d.stats(t).LocksHeld == n }, 5*time.Second, 5*time.Millisecond, "locks_held %d", n)
	}

	t1 := acquire(a, "m1", 30)
	acquire(a, "m2", 30)
	waitHeld(b, 2)
	acquire(b, "short", 1)
	waitHeld(a, 3)
	refused(a, "m4")
	refused(b, "m4")
	// Globex has no cap.
	okRemain(t, a.lockAs(t, testKeyGlobex, `{"action":"acquire","key":"g1","ttl":30}`), -1)

	// A release through the other daemon gives the slot back.
	r := b.lock(t, `{"action":"release","key":"m1","token":"`+t1+`"}`)
	okRemain(t, r, -1)
	require.Equal(t, true, r.data(t)["released"], r.Raw)
	waitHeld(a, 2)
	acquire(a, "m5", 30)
	waitHeld(b, 3)
	refused(b, "m6")

	// So does an expiry, with nobody releasing.
	time.Sleep(1100 * time.Millisecond)
	waitHeld(a, 2)
	waitHeld(b, 2)
	acquire(b, "m7", 30)
	assertMetric(t, a, `redlockd_too_many_locks_total{account="acme"} 1`)
	assertMetric(t, b, `redlockd_too_many_locks_total{account="acme"} 2`)
	assertMetric(t, a, `redlockd_max_locks{account="acme"} 3`)
}

// New refuses limits that cannot work.
func TestNewValidatesLimits(t *testing.T) {
	for _, tc := range []struct {
		lim   limits.Limits
		store bool
		want  string
	}{
		{limits.Limits{MaxLocks: 1}, false, "Options.LimitStore: required, since account acme has limits"},
		{limits.Limits{QuotaCalls: 5}, true, "QuotaCalls 5 and QuotaWindow 0s: set both"},
		{limits.Limits{Rate: 5}, true, "Limits.Burst: 0, need at least 1 with a rate"},
		{limits.Limits{MaxLocks: -1}, true, "Limits: negative"},
	} {
		o := validOptions(newFakeLocker())
		o.APIKeys[0].Limits = tc.lim
		if tc.store {
			store, err := limits.NewStore([]*redis.Options{{Addr: "127.0.0.1:1"}}, time.Second)
			require.NoError(t, err)
			o.LimitStore = store
			defer store.Close()
		}
		_, err := New(nil, o)
		require.Error(t, err, "%+v", tc.lim)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// A reload (SetAPIKeys) applies new limits at once: a quota given to an
// account that had none, and the default cap of an account added.
func TestSetAPIKeysChangesLimits(t *testing.T) {
	servers := limitMasters(t)
	awayFromWindowEnd(t, time.Hour)
	d := startLimitDaemon(t, servers, limits.Limits{}, limitsInterval)
	okRemain(t, d.lock(t, statusBody("before")), -1)

	const initechKey = "initech-key-0123456789abcdef"
	_, err := d.srv.SetAPIKeys([]APIKey{
		{Account: "acme", Hash: sha256.Sum256([]byte(testKeyAcme)), Limits: limits.Limits{QuotaCalls: 2, QuotaWindow: time.Hour}},
		{Account: "initech", Hash: sha256.Sum256([]byte(initechKey)), Limits: limits.Limits{MaxLocks: 1}},
	})
	require.NoError(t, err)
	okRemain(t, d.lock(t, statusBody("after")), 1)
	okRemain(t, d.lock(t, statusBody("after")), 0)
	r := d.lock(t, statusBody("after"))
	require.Equal(t, http.StatusTooManyRequests, r.Status, r.Raw)
	assert.Equal(t, "quota_exhausted", r.code())

	okRemain(t, d.lockAs(t, initechKey, `{"key":"i1","ttl":30}`), -1)
	r = d.lockAs(t, initechKey, `{"key":"i2","ttl":30}`)
	require.Equal(t, http.StatusTooManyRequests, r.Status, r.Raw)
	assert.Equal(t, "too_many_locks", r.code())

	// Limits that cannot work are refused, and the old keys stay.
	_, err = d.srv.SetAPIKeys([]APIKey{{Account: "acme", Hash: sha256.Sum256([]byte(testKeyAcme)), Limits: limits.Limits{Rate: 1}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Limits.Burst: 0, need at least 1 with a rate")
	r = d.lock(t, statusBody("after"))
	assert.Equal(t, "quota_exhausted", r.code(), "the refused reload changed nothing")
}

// A release and an extend are never refused for quota or rate: refusing
// a release would keep the lock, and its max_locks slot, until the TTL
// ends; refusing an extend would end a lock under work that is running
// because the account's other calls spent its calls (a liveness pass:
// `lock run` killed its command on the 429).
func TestReleaseNeverRefusedByLimits(t *testing.T) {
	servers := limitMasters(t)
	awayFromWindowEnd(t, time.Hour)
	d := startLimitDaemon(t, servers, limits.Limits{QuotaCalls: 2, QuotaWindow: time.Hour, Rate: 0.01, Burst: 2, MaxLocks: 1}, limitsInterval)
	r := d.lock(t, `{"key":"rel","ttl":30}`)
	okRemain(t, r, 1)
	token := r.data(t)["token"].(string)
	okRemain(t, d.lock(t, statusBody("rel")), 0)
	r = d.lock(t, statusBody("rel"))
	require.Equal(t, http.StatusTooManyRequests, r.Status, r.Raw)
	assert.Equal(t, "quota_exhausted", r.code())

	r = d.lock(t, `{"action":"extend","key":"rel","token":"`+token+`","ttl":60}`)
	okRemain(t, r, 0)
	assert.Equal(t, true, r.data(t)["extended"], "the held lock is extended past the quota: %s", r.Raw)
	r = d.lock(t, `{"action":"release","key":"rel","token":"`+token+`"}`)
	okRemain(t, r, 0)
	assert.Equal(t, true, r.data(t)["released"], r.Raw)
	// The release answers once every master answered it.
	require.Empty(t, keysOn(t, servers, testPrefix+"lock:*rel*"), "the release reached the masters")
	require.Eventually(t, func() bool { return *d.stats(t).LocksHeld == 0 }, 5*time.Second, 5*time.Millisecond, "the slot came back")
}

// windowStart is the start, Unix ms, of the quota window of length w that
// holds now: windows start at multiples of w since the epoch
// (limits.Limits).
func windowStart(now time.Time, w time.Duration) int64 {
	ms := now.UnixMilli()
	return ms - ms%w.Milliseconds()
}

// startGroupLimitDaemon is startLimitDaemon over master groups g0, g1, …
// (one redlock.Client per group, as `redlockd serve` with master_groups),
// with the account limits' Store over every group (limits.NewGroupStore).
func startGroupLimitDaemon(t *testing.T, groups [][]*redisproc.Server, lim limits.Limits) *limitDaemon {
	t.Helper()
	var rgroups []redlock.Group
	var storeMasters [][]*redis.Options
	for gi, servers := range groups {
		masters := make([]*redis.Options, len(servers))
		for i, s := range servers {
			masters[i] = &redis.Options{Addr: s.Addr()}
		}
		rgroups = append(rgroups, redlock.Group{Name: fmt.Sprintf("g%d", gi), Client: limitsClient(t, masters)})
		storeMasters = append(storeMasters, masters)
	}
	gl, err := NewGroupsLocker(rgroups)
	require.NoError(t, err)
	store, err := limits.NewGroupStore(storeMasters, time.Second)
	require.NoError(t, err)
	return serveLimits(t, gl, store, lim, limitsInterval, func() {
		for _, g := range rgroups {
			_ = g.Client.Close()
		}
	})
}

// TestMaxLocksAcrossGroups: with master groups, every lock counts against
// max_locks, whichever group its key is placed in, across daemons. Before,
// the account's held set lived on the first group's masters and was
// reconciled against the lock keys there, so a lock placed in another
// group left the count at the next sync: a break-it pass held six locks
// with max_locks 3.
func TestMaxLocksAcrossGroups(t *testing.T) {
	servers, err := redisproc.StartN(6, redisproc.Options{})
	if err != nil {
		t.Skip("needs redis-server:", err)
	}
	t.Cleanup(func() { _ = redisproc.StopAll(servers) })
	groups := [][]*redisproc.Server{servers[:3], servers[3:]}
	lim := limits.Limits{MaxLocks: 3}
	a := startGroupLimitDaemon(t, groups, lim)
	b := startGroupLimitDaemon(t, groups, lim)
	place, err := redlock.NewPlacement("g0", "g1")
	require.NoError(t, err)
	keysIn := func(g, n int) []string {
		var out []string
		for i := 0; len(out) < n; i++ {
			k := fmt.Sprintf("grp:%d", i)
			if place.Group(redisKey(testPrefix, "acme", "", k)) == g {
				out = append(out, k)
			}
		}
		return out
	}
	g0, g1 := keysIn(0, 2), keysIn(1, 4)
	acquire := func(d *limitDaemon, key string) string {
		t.Helper()
		r := d.lock(t, `{"action":"acquire","key":"`+key+`","ttl":30}`)
		require.Equal(t, true, r.data(t)["acquired"], r.Raw)
		return r.data(t)["token"].(string)
	}
	waitHeld := func(d *limitDaemon, n int64) {
		t.Helper()
		require.Eventually(t, func() bool { return *d.stats(t).LocksHeld == n }, 5*time.Second, 5*time.Millisecond, "locks_held %d: %+v", n, d.stats(t))
	}
	t1 := acquire(a, g1[0])
	acquire(a, g1[1])
	acquire(a, g0[0])
	// Several sync rounds later, both daemons still count the two locks
	// in g1: they are reconciled on g1's masters, not dropped on g0's.
	time.Sleep(10 * limitsInterval)
	waitHeld(a, 3)
	waitHeld(b, 3)
	for _, d := range []*limitDaemon{a, b} {
		r := d.lock(t, `{"action":"acquire","key":"`+g1[2]+`","ttl":30}`)
		require.Equal(t, http.StatusTooManyRequests, r.Status, r.Raw)
		assert.Equal(t, "too_many_locks", r.code())
	}
	// A release through the other daemon gives the slot back.
	r := b.lock(t, `{"action":"release","key":"`+g1[0]+`","token":"`+t1+`"}`)
	require.Equal(t, true, r.data(t)["released"], r.Raw)
	waitHeld(a, 2)
	acquire(a, g1[3])
	waitHeld(b, 3)
}

// TestMaxLocksWithAGroupDown: one group without a quorum does not freeze
// the others' counts. With g1 down (two of its three masters killed), an
// account's locks in g0 that expire leave its count, read from g0's
// masters, and it may lock again; before, every group's quorum was needed
// to read any count, and expired locks kept the account at max_locks until
// g1 came back (found by a review of the per-group count).
func TestMaxLocksWithAGroupDown(t *testing.T) {
	servers, err := redisproc.StartN(6, redisproc.Options{})
	if err != nil {
		t.Skip("needs redis-server:", err)
	}
	t.Cleanup(func() { _ = redisproc.StopAll(servers) })
	a := startGroupLimitDaemon(t, [][]*redisproc.Server{servers[:3], servers[3:]}, limits.Limits{MaxLocks: 3})
	place, err := redlock.NewPlacement("g0", "g1")
	require.NoError(t, err)
	var g0 []string
	for i := 0; len(g0) < 4; i++ {
		if k := fmt.Sprintf("down:%d", i); place.Group(redisKey(testPrefix, "acme", "", k)) == 0 {
			g0 = append(g0, k)
		}
	}
	for _, i := range []int{3, 4} {
		require.NoError(t, servers[i].Kill())
	}
	for _, k := range g0[:3] {
		r := a.lock(t, `{"action":"acquire","key":"`+k+`","ttl":1}`)
		require.Equal(t, true, r.data(t)["acquired"], r.Raw)
	}
	r := a.lock(t, `{"action":"acquire","key":"`+g0[3]+`","ttl":30}`)
	require.Equal(t, http.StatusTooManyRequests, r.Status, "max_locks holds: %s", r.Raw)
	// The three expire; g0's count drops although g1 has no quorum.
	require.Eventually(t, func() bool { return *a.stats(t).LocksHeld == 0 }, 10*time.Second, 20*time.Millisecond, "locks_held 0: %+v", a.stats(t))
	r = a.lock(t, `{"action":"acquire","key":"`+g0[3]+`","ttl":30}`)
	require.Equal(t, true, r.data(t)["acquired"], r.Raw)
}

// TestMaxLocksExactUnderConcurrency: one daemon, max_locks 5, 24 clients
// taking and releasing locks of their own keys as fast as they can. Each
// client notes when its grant's answer arrived and when it sends the
// release: the daemon counts the lock held over more than that span, so
// at no instant may more than 5 spans overlap. A black-box pass saw 6
// (and 7–8 with idempotency leases): a sync round that ran after a
// release's DEL on the masters and ended before the release was recorded
// left the lock out of the count, and the release was subtracted again
// (limits.accountState.uncounted). Every refusal must be too_many_locks.
func TestMaxLocksExactUnderConcurrency(t *testing.T) {
	servers := limitMasters(t)
	const maxLocks = 5
	d := startLimitDaemon(t, servers, limits.Limits{MaxLocks: maxLocks}, limitsInterval)
	type span struct{ from, to time.Time }
	var (
		mu      sync.Mutex
		spans   []span
		refused int
		errs    []string
	)
	post := func(body string) (int, map[string]any, string, error) {
		req, err := http.NewRequest(http.MethodPost, d.URL+"/v1/lock", strings.NewReader(body))
		if err != nil {
			return 0, nil, "", err
		}
		req.Header.Set("X-API-Key", testKeyAcme)
		req.Header.Set("Content-Type", "application/json")
		resp, err := d.client.Do(req)
		if err != nil {
			return 0, nil, "", err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var env struct {
			Code *string        `json:"code"`
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(raw, &env); err != nil {
			return resp.StatusCode, nil, string(raw), err
		}
		code := ""
		if env.Code != nil {
			code = *env.Code
		}
		return resp.StatusCode, env.Data, code, nil
	}
	// At least 3 s and 100 grants (a race build on a loaded machine
	// granted 70 in 3 s), at most 30 s.
	start := time.Now()
	more := func() bool {
		mu.Lock()
		granted := len(spans)
		mu.Unlock()
		since := time.Since(start)
		return since < 3*time.Second || granted <= 100 && since < 30*time.Second
	}
	var wg sync.WaitGroup
	for w := range 24 {
		wg.Go(func() {
			for n := 0; more(); n++ {
				key := fmt.Sprintf("exact:%d:%d", w, n)
				st, data, code, err := post(`{"action":"acquire","key":"` + key + `","ttl":10}`)
				if err == nil && st == http.StatusTooManyRequests && code == "too_many_locks" {
					mu.Lock()
					refused++
					mu.Unlock()
					time.Sleep(time.Millisecond) // not a busy loop on the shared cores
					continue
				}
				if err != nil || st != http.StatusOK || data["acquired"] != true {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("acquire %s: %d %s %v %v", key, st, code, data, err))
					mu.Unlock()
					continue
				}
				from := time.Now()
				time.Sleep(time.Duration(n%20) * time.Millisecond)
				to := time.Now()
				mu.Lock()
				spans = append(spans, span{from, to})
				mu.Unlock()
				st, data, code, err = post(`{"action":"release","key":"` + key + `","token":"` + data["token"].(string) + `"}`)
				if err != nil || st != http.StatusOK || data["released"] != true {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("release %s: %d %s %v %v", key, st, code, data, err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Greater(t, len(spans), 100, "locks granted")
	require.Positive(t, refused, "the cap was reached")
	type edge struct {
		at time.Time
		d  int
	}
	var edges []edge
	for _, s := range spans {
		edges = append(edges, edge{s.from, 1}, edge{s.to, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // an end before a start at the same instant
	})
	most, cur := 0, 0
	for _, e := range edges {
		cur += e.d
		most = max(most, cur)
	}
	assert.LessOrEqual(t, most, maxLocks, "locks held at once by one account (of %d granted, %d refused)", len(spans), refused)
}
