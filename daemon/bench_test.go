package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/redlockd/redlockd/redlock"
)

// The benchmarks of the daemon's own HTTP path. The main instrument is a
// Locker that grants everything at once (nopLocker), so that what is
// measured is the daemon: routing, auth, body reading and decoding, key
// encoding, the answer, metrics and the log check.
//
//	go test -run '^$' -bench . -benchmem ./daemon/
//
// BenchmarkHandler calls ServeHTTP with one reused request and a reused,
// minimal ResponseWriter, so B/op and allocs/op are the daemon's alone.
// BenchmarkHTTP goes over real loopback HTTP with a keep-alive client; its
// numbers include the client and net/http's server, and its floor case (a
// handler that writes a fixed answer) shows how much of that is not ours.
// BenchmarkHTTPRedis is the same with the real redlock.Client over five
// local redis-server masters (skipped without redis-server).

// nopLocker grants everything at once.
type nopLocker struct{ *fakeLocker }

func (nopLocker) Acquire(context.Context, AcquireRequest) (Lease, error) {
	return Lease{Token: goodToken, ValidUntil: time.Now().Add(29 * time.Second)}, nil
}

func (nopLocker) Release(context.Context, string, string) (int, error) { return 5, nil }

func (nopLocker) Extend(context.Context, string, string, time.Duration) (Lease, error) {
	return Lease{Token: goodToken, ValidUntil: time.Now().Add(119 * time.Second)}, nil
}

func (nopLocker) Status(context.Context, string) (redlock.Status, error) {
	return redlock.Status{Held: true, Holders: 5, Answered: 5, Validity: 10 * time.Second}, nil
}

var benchBodies = map[string]string{
	"acquire": `{"action":"acquire","key":"order:pay:10086","ttl":30}`,
	"release": `{"action":"release","key":"order:pay:10086","token":"` + goodToken + `"}`,
	"extend":  `{"action":"extend","key":"order:pay:10086","token":"` + goodToken + `","ttl":120}`,
	"status":  `{"action":"status","key":"order:pay:10086"}`,
}

// benchServer is a Server over l as `redlockd serve` builds it: a JSON
// logger at info (request lines are debug, so they are checked and
// dropped) writing nowhere, and metrics on a registry of their own.
func benchServer(b *testing.B, l MasterLocker) *Server {
	b.Helper()
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	log := zap.New(zapcore.NewCore(enc, zapcore.AddSync(io.Discard), zapcore.InfoLevel))
	o := validOptions(l)
	o.KeyPrefix = "redlock:"
	o.Metrics = NewMetrics(prometheus.NewRegistry())
	s, err := New(log, o)
	require.NoError(b, err)
	return s
}

// benchWriter is a reusable ResponseWriter that keeps the status and
// discards the body.
type benchWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *benchWriter) Header() http.Header { return w.h }
func (w *benchWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *benchWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

func (w *benchWriter) reset() {
	clear(w.h)
	w.status, w.n = 0, 0
}

// benchBody is a request body that can be rewound without allocating.
type benchBody struct{ strings.Reader }

func (*benchBody) Close() error { return nil }

// BenchmarkHandler measures ServeHTTP alone, one action per sub-benchmark.
func BenchmarkHandler(b *testing.B) {
	h := benchServer(b, nopLocker{newFakeLocker()}).Handler()
	for _, name := range []string{"acquire", "release", "extend", "status"} {
		b.Run(name, func(b *testing.B) {
			body := benchBodies[name]
			var rb benchBody
			req := httptest.NewRequest(http.MethodPost, "/v1/lock", &rb)
			req.Header.Set("X-API-Key", testKeyAcme)
			req.Header.Set("Content-Type", "application/json")
			req.ContentLength = int64(len(body))
			w := &benchWriter{h: make(http.Header)}
			b.ReportAllocs()
			for b.Loop() {
				rb.Reset(body)
				w.reset()
				h.ServeHTTP(w, req)
				if w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
		})
	}
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var rb benchBody
			req := httptest.NewRequest(http.MethodPost, "/v1/lock", &rb)
			req.Header.Set("X-API-Key", testKeyAcme)
			req.Header.Set("Content-Type", "application/json")
			w := &benchWriter{h: make(http.Header)}
			bodies := [2]string{benchBodies["acquire"], benchBodies["release"]}
			for i := 0; pb.Next(); i++ {
				body := bodies[i%2]
				rb.Reset(body)
				req.ContentLength = int64(len(body))
				w.reset()
				h.ServeHTTP(w, req)
				if w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
		})
	})
}

// serveBench serves h on a loopback port until the benchmark ends and
// returns the URL of /v1/lock and a keep-alive client.
func serveBench(b *testing.B, s *Server, h http.Handler) (string, *http.Client) {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	if s != nil {
		go func() { done <- s.Serve(ctx, ln) }()
	} else {
		srv := &http.Server{Handler: h}
		go func() { done <- srv.Serve(ln) }()
		go func() { <-ctx.Done(); _ = srv.Close() }()
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	b.Cleanup(func() {
		cancel()
		<-done
		tr.CloseIdleConnections()
	})
	return "http://" + ln.Addr().String() + "/v1/lock", &http.Client{Transport: tr}
}

// post sends one action and checks for 200.
func post(b *testing.B, c *http.Client, url, body string) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("X-API-Key", testKeyAcme)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
}

// floorAnswer is about the size of the daemon's acquire answer.
var floorAnswer = []byte(`{"ret":"ok","data":{"action":"acquire","key":"order:pay:10086","acquired":true,"token":"` + goodToken + `","ttl":30,"expire_at":1700000000,"validity_ms":29000},"msg":"","remain_quota":-1}` + "\n")

// BenchmarkHTTP measures acquire and release over loopback HTTP with a
// keep-alive client, and the floor: the same client and net/http server
// with a handler that only writes a fixed answer.
func BenchmarkHTTP(b *testing.B) {
	b.Run("floor", func(b *testing.B) {
		url, c := serveBench(b, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(floorAnswer)
		}))
		b.ReportAllocs()
		for b.Loop() {
			post(b, c, url, benchBodies["acquire"])
		}
	})
	for _, name := range []string{"acquire", "release"} {
		b.Run(name, func(b *testing.B) {
			url, c := serveBench(b, benchServer(b, nopLocker{newFakeLocker()}), nil)
			body := benchBodies[name]
			b.ReportAllocs()
			for b.Loop() {
				post(b, c, url, body)
			}
		})
	}
}

func startBenchMasters(b *testing.B) []*redisproc.Server {
	b.Helper()
	servers, err := realMasters()
	if err != nil {
		b.Skip("needs redis-server:", err)
	}
	return servers
}

// BenchmarkHTTPRedis is one acquire+release cycle over loopback HTTP with
// the real redlock.Client over five local masters, on a fresh key per
// cycle.
func BenchmarkHTTPRedis(b *testing.B) {
	servers := startBenchMasters(b)
	masters := make([]*redis.Options, len(servers))
	for i, s := range servers {
		masters[i] = &redis.Options{Addr: s.Addr()}
	}
	client, err := redlock.New(masters, redlock.WithMarkerKey("bench:marker"), redlock.WithFenceKey("bench:fence"))
	require.NoError(b, err)
	b.Cleanup(func() { _ = client.Close() })
	url, c := serveBench(b, benchServer(b, NewRedlockLocker(client)), nil)
	b.ReportAllocs()
	for b.Loop() {
		key := fmt.Sprintf("bench:%d", benchKeySeq.Add(1))
		// The token is needed for the release; decode only that.
		token := acquireToken(b, c, url, `{"action":"acquire","key":"`+key+`","ttl":30}`)
		post(b, c, url, `{"action":"release","key":"`+key+`","token":"`+token+`"}`)
	}
}

var benchKeySeq atomic.Int64

func acquireToken(b *testing.B, c *http.Client, url, body string) string {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("X-API-Key", testKeyAcme)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("acquire: status %d: %s", resp.StatusCode, raw)
	}
	_, rest, ok := strings.Cut(string(raw), `"token":"`)
	if !ok || len(rest) < tokenLen {
		b.Fatalf("acquire: no token in %s", raw)
	}
	return rest[:tokenLen]
}

// BenchmarkParse measures decoding and validating one body.
func BenchmarkParse(b *testing.B) {
	body := []byte(`{"action":"extend","key":"order:pay:10086","namespace":"payments","token":"` + goodToken + `","ttl":120}`)
	lim := &lockBounds{defaultTTL: 30, maxTTL: 86400, maxWaitMS: 30000}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := parseLockRequest(body, lim); err != nil {
			b.Fatal(err)
		}
	}
}
