package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/redlockd/redlockd/redlock"
)

// plantLocks writes n locks of account in the default namespace straight
// onto every running master (each with a token of its own, as a quorum
// acquire leaves them), so that a listing has many to read.
func (d *deployment) plantLocks(t testing.TB, account string, n int, ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	for _, s := range d.servers {
		if !s.Running() {
			continue
		}
		r := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		_, err := r.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range n {
				p.Set(ctx, redisKey(d.prefix, account, "", fmt.Sprintf("planted:%d", i)), fmt.Sprintf("%032x", i), ttl)
			}
			return nil
		})
		_ = r.Close()
		require.NoError(t, err)
	}
}

// listingLoad runs listings concurrent GET /admin/locks listings of acme
// (limit 100, page after page) until status calls of globex through the
// lock API, 8 clients × calls each, are done, and returns the status
// calls' answers by HTTP status and the listings' pages by HTTP status.
// With latencies, it records every status call's latency.
func listingLoad(t *testing.T, ts *testServer, admin string, listings, calls int, latencies *[]time.Duration) (status, pages map[int]int) {
	t.Helper()
	status, pages = map[int]int{}, map[int]int{}
	var mu sync.Mutex
	stop := make(chan struct{})
	var lw sync.WaitGroup
	var refusedOK atomic.Bool
	refusedOK.Store(true)
	for range listings {
		lw.Go(func() {
			cursor := ""
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := ts.client.Get(admin + "/admin/locks?account=acme&limit=100&cursor=" + cursor)
				if !assert.NoError(t, err) {
					return
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				mu.Lock()
				pages[resp.StatusCode]++
				mu.Unlock()
				switch resp.StatusCode {
				case http.StatusOK:
					var page lockList
					if assert.NoError(t, json.Unmarshal(body, &page), string(body)) {
						cursor = page.NextCursor
					}
				case http.StatusTooManyRequests:
					var env envelope
					if !assert.NoError(t, json.Unmarshal(body, &env), string(body)) || env.Code == nil || *env.Code != "too_many_listings" ||
						resp.Header.Get("Retry-After") == "" {
						refusedOK.Store(false)
					}
				default:
					t.Errorf("listing: %d %s", resp.StatusCode, body)
					return
				}
			}
		})
	}
	var sw sync.WaitGroup
	for c := range 8 {
		sw.Go(func() {
			for i := range calls {
				start := time.Now()
				st, raw, err := postLock(ts.client, ts.URL, testKeyGlobex, statusBody(fmt.Sprintf("s%d-%d", c, i)))
				took := time.Since(start)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				status[st]++
				if latencies != nil {
					*latencies = append(*latencies, took)
				}
				mu.Unlock()
				if st != http.StatusOK {
					t.Logf("status call: %d %s", st, raw)
				}
			}
		})
	}
	sw.Wait()
	close(stop)
	lw.Wait()
	assert.True(t, refusedOK.Load(), "a listing refused is a 429 too_many_listings with Retry-After")
	return status, pages
}

// Listings cannot starve the lock path: 24 concurrent listings of an
// account holding 4,000 locks, beside status calls of another account,
// leave every status call answered (no 503 quorum_unavailable with every
// master up). Listings past the daemon's bound are refused with 429.
func TestLockListingsDoNotStarveLocks(t *testing.T) {
	d := newDeployment(t)
	ts, admin := d.adminServer(t)
	d.plantLocks(t, "acme", 4000, time.Minute)
	status, pages := listingLoad(t, ts, admin, 24, 40, nil)
	t.Logf("status calls by HTTP status %v, listing pages %v", status, pages)
	assert.Zero(t, status[http.StatusServiceUnavailable], "status calls answered 503")
	assert.Equal(t, 8*40, status[http.StatusOK], "status calls answered 200")
	assert.Positive(t, pages[http.StatusOK], "listings served")
}

// BenchmarkStatusBesideListings measures status calls through the lock
// API (8 keep-alive clients of one account, the real redlock.Client with
// its default per-master timeout, five local masters) beside 0, 4 and 24
// concurrent GET /admin/locks listings (limit 100, page after page, a 429
// honoured by waiting its Retry-After) of another account that holds
// 4,000 locks. It reports the status calls' p50 and p99 and how many were
// answered 503. Run it without -race:
//
//	go test -run '^$' -bench StatusBesideListings -benchtime 3000x ./daemon/
func BenchmarkStatusBesideListings(b *testing.B) {
	servers := startBenchMasters(b)
	const prefix = "benchlist:"
	masters := make([]*redis.Options, len(servers))
	for i, s := range servers {
		masters[i] = &redis.Options{Addr: s.Addr()}
	}
	client, err := redlock.New(masters, redlock.WithMarkerKey(prefix+"marker"), redlock.WithFenceKey(prefix+"fence"))
	require.NoError(b, err)
	b.Cleanup(func() { _ = client.Close() })
	o := validOptions(NewRedlockLocker(client))
	o.APIKeys = append(o.APIKeys, APIKey{Account: "globex", Hash: sha256.Sum256([]byte(testKeyGlobex))})
	o.KeyPrefix, o.AdminListen = prefix, "127.0.0.1:0"
	o.Metrics = NewMetrics(prometheus.NewRegistry())
	s, err := New(zap.NewNop(), o)
	require.NoError(b, err)
	url, c := serveBench(b, s, nil)
	base := strings.TrimSuffix(url, "/v1/lock")
	require.Eventually(b, func() bool { return s.AdminAddr() != "" }, 5*time.Second, time.Millisecond)
	admin := "http://" + s.AdminAddr()
	d := &deployment{prefix: prefix, servers: servers}
	d.plantLocks(b, "acme", 4000, 10*time.Minute)

	for _, listings := range []int{0, 4, 24} {
		b.Run(fmt.Sprintf("listings=%d", listings), func(b *testing.B) {
			stop := make(chan struct{})
			var lw sync.WaitGroup
			var pages [600]atomic.Int64
			for range listings {
				lw.Go(func() { listUntil(b, c, admin, stop, &pages) })
			}
			lat := make([]time.Duration, 0, b.N)
			var mu sync.Mutex
			var n503 atomic.Int64
			var next atomic.Int64
			b.ResetTimer()
			var cw sync.WaitGroup
			for range 8 {
				cw.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						start := time.Now()
						st, raw, err := postLock(c, base, testKeyGlobex, statusBody(fmt.Sprintf("s%d", i)))
						took := time.Since(start)
						if err != nil {
							b.Error(err)
							return
						}
						switch st {
						case http.StatusOK:
						case http.StatusServiceUnavailable:
							n503.Add(1)
						default:
							b.Errorf("status: %d %s", st, raw)
							return
						}
						mu.Lock()
						lat = append(lat, took)
						mu.Unlock()
					}
				})
			}
			cw.Wait()
			b.StopTimer()
			close(stop)
			lw.Wait()
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			}
			b.ReportMetric(float64(n503.Load()), "503s")
			b.ReportMetric(float64(pages[http.StatusOK].Load()), "pages")
			b.ReportMetric(float64(pages[http.StatusServiceUnavailable].Load()), "pages-503")
			b.ReportMetric(float64(pages[http.StatusTooManyRequests].Load()), "pages-429")
		})
	}
}

// listUntil pages through acme's locks again and again until stop is
// closed, waiting Retry-After when refused (429) and retrying a 503 at
// once. It counts the pages by HTTP status.
func listUntil(b *testing.B, c *http.Client, admin string, stop <-chan struct{}, pages *[600]atomic.Int64) {
	cursor := ""
	for {
		select {
		case <-stop:
			return
		default:
		}
		resp, err := c.Get(admin + "/admin/locks?account=acme&limit=100&cursor=" + cursor)
		if err != nil {
			b.Error(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		pages[resp.StatusCode].Add(1)
		switch resp.StatusCode {
		case http.StatusOK:
			var page lockList
			if err := json.Unmarshal(body, &page); err != nil {
				b.Error(err)
				return
			}
			cursor = page.NextCursor
		case http.StatusServiceUnavailable:
			// Retried at once with the same cursor: the load stays.
		case http.StatusTooManyRequests:
			secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(max(secs, 1)) * time.Second):
			}
		default:
			b.Errorf("listing: %d %s", resp.StatusCode, body)
			return
		}
	}
}
