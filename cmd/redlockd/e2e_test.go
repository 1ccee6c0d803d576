package main

// End-to-end tests: the real binary's wiring (config → redlock → daemon)
// serving real HTTP on loopback over five real redis-server masters.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlockd/redlockd/internal/testmasters"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/redlockd/redlockd/config"
	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/redlockd/redlockd/internal/testdaemon"
)

var (
	servers   []*redisproc.Server
	binary    string // the redlockd binary built for this test run
	prefixSeq atomic.Int64
)

const (
	keyA = "tenant-a-key-0123456789abcdef"
	keyB = "tenant-b-key-0123456789abcdef"
)

func TestMain(m *testing.M) {
	// The lock command's tests run the real binary as users do.
	dir, err := os.MkdirTemp("", "redlockd-e2e")
	if err == nil {
		binary, err = testdaemon.Build(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testmasters.Run(m, 5, &servers)
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemonURL starts the daemon as `redlockd serve` wires it, on a free
// loopback port, and stops it at cleanup.
func daemonURL(t *testing.T, edit ...func(*config.Config)) string {
	base, _ := startDaemon(t, edit...)
	return base
}

// startDaemon is daemonURL that also returns stop: it shuts the daemon down
// (as SIGTERM does) and returns runDaemon's error; cleanup calls it if the
// test did not.
func startDaemon(t *testing.T, edit ...func(*config.Config)) (string, func() error) {
	t.Helper()
	return startDaemonLog(t, zap.NewNop(), edit...)
}

// startDaemonLog is startDaemon with the daemon logging to log.
func startDaemonLog(t *testing.T, log *zap.Logger, edit ...func(*config.Config)) (string, func() error) {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.APIKeys = []config.APIKey{{Name: "acme", Key: keyA}, {Name: "globex", Key: keyB}}
	for _, s := range servers {
		cfg.Masters = append(cfg.Masters, s.Addr())
	}
	cfg.HealthInterval = config.Duration(50 * time.Millisecond)
	// The suite runs under -race beside other packages on two cores; a
	// healthy master must not miss a 50ms deadline and turn an example
	// into a 503. Tests about timeouts set their own.
	cfg.PerMasterTimeout = config.Duration(500 * time.Millisecond)
	// A prefix of its own per daemon: tests restart masters empty, and a
	// shared marker key would (rightly) get those quarantined by every
	// later daemon.
	cfg.KeyPrefix = fmt.Sprintf("e2e%d:", prefixSeq.Add(1))
	// Tests that are not about the drain stop at once.
	cfg.DrainDelay = 0
	for _, e := range edit {
		e(&cfg)
	}
	require.NoError(t, cfg.Validate())
	ln, err := net.Listen("tcp", cfg.Listen)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runDaemon(ctx, cfg, log, ln, nil) }()
	stop := sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("daemon did not stop within 30s")
		}
	})
	t.Cleanup(func() { assert.NoError(t, stop()) })
	base := "http://" + ln.Addr().String()
	// Ready before a test kills masters, as an operator's deployment is: a
	// brand-new deployment (no marker anywhere) waits for every master.
	require.Eventually(t, func() bool {
		resp, err := httpClient.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 10*time.Second, 10*time.Millisecond, "daemon not ready")
	return base, stop
}

type envelope struct {
	Ret         string         `json:"ret"`
	Data        map[string]any `json:"data"`
	Msg         string         `json:"msg"`
	Code        string         `json:"code"`
	RemainQuota *int           `json:"remain_quota"`
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

func post(t *testing.T, url, apiKey, body string) (int, envelope, http.Header) {
	t.Helper()
	return postWith(t, httpClient, url, apiKey, body)
}

// postWith is post with client c.
func postWith(t *testing.T, c *http.Client, url, apiKey, body string) (int, envelope, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	if apiKey != "" {
		req.Header.Set("X-API-Key", apiKey)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "application/json", strings.Split(resp.Header.Get("Content-Type"), ";")[0], "body %s", raw)
	var env envelope
	require.NoError(t, json.Unmarshal(raw, &env), "body %s", raw)
	require.NotNil(t, env.RemainQuota, "remain_quota is always present")
	return resp.StatusCode, env, resp.Header
}

func lockURL(base string) string { return base + "/v1/lock" }

// tryPost is postWith for goroutines other than the test's: it returns
// an error instead of failing the test.
func tryPost(c *http.Client, url, apiKey, body string) (envelope, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return envelope{}, err
	}
	req.Header.Set("X-API-Key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return envelope{}, err
	}
	defer resp.Body.Close()
	var env envelope
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return envelope{}, fmt.Errorf("status %d: %w", resp.StatusCode, err)
	}
	return env, nil
}

// rawKeys lists every key on every running master.
func rawKeys(t *testing.T) map[int][]string {
	t.Helper()
	out := map[int][]string{}
	for i, s := range servers {
		if !s.Running() {
			continue
		}
		r := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		keys, err := r.Keys(context.Background(), "*").Result()
		r.Close()
		require.NoError(t, err)
		out[i] = keys
	}
	return out
}

// waitOnEveryMaster waits (up to 5 s) until every running master holds
// key. An acquire answers once a quorum has voted, and its SETs to the
// other masters land just after: a test that reads what every master
// holds waits for them here.
func waitOnEveryMaster(t *testing.T, key string) {
	t.Helper()
	for _, s := range servers {
		if !s.Running() {
			continue
		}
		r := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		require.Eventually(t, func() bool { return r.Exists(context.Background(), key).Val() == 1 }, 5*time.Second, 5*time.Millisecond,
			"%s on %s", key, s.Addr())
		r.Close()
	}
}

func keysContaining(t *testing.T, part string) int {
	n := 0
	for _, keys := range rawKeys(t) {
		for _, k := range keys {
			if strings.Contains(k, part) {
				n++
			}
		}
	}
	return n
}

// TestREADMEExamples runs the curl examples of docs/api.md (the README's
// first and last among them) and the issue verbatim.
func TestREADMEExamples(t *testing.T) {
	base := daemonURL(t)
	for _, path := range []string{"/v1/lock", "/gateway/distlock"} {
		t.Run(path, func(t *testing.T) {
			url := base + path
			key := "order:pay:10086" + path
			st, env, _ := post(t, url, keyA, `{"action":"acquire","key":"`+key+`","ttl":30}`)
			require.Equal(t, 200, st)
			require.Equal(t, "ok", env.Ret)
			require.Equal(t, true, env.Data["acquired"])
			token, _ := env.Data["token"].(string)
			require.Len(t, token, 32)
			assert.EqualValues(t, 30, env.Data["ttl"])
			assert.Equal(t, key, env.Data["key"])
			assert.Greater(t, env.Data["validity_ms"], 29000.0)
			assert.LessOrEqual(t, env.Data["expire_at"], float64(time.Now().Add(30*time.Second).Unix()))
			fence, ok := env.Data["fence"].(float64)
			require.True(t, ok, "acquire returns a fencing token")
			assert.Positive(t, fence)

			st, env, _ = post(t, url, keyA, `{"action":"acquire","key":"`+key+`","ttl":30}`)
			require.Equal(t, 200, st)
			assert.Equal(t, false, env.Data["acquired"])
			assert.InDelta(t, 30, env.Data["retry_after"], 1)
			assert.NotContains(t, env.Data, "token")

			st, env, _ = post(t, url, keyA, `{"action":"status","key":"`+key+`"}`)
			require.Equal(t, 200, st)
			assert.Equal(t, true, env.Data["held"])
			assert.InDelta(t, 29, env.Data["ttl"], 1)
			assert.Contains(t, env.Data, "expire_at")
			assert.NotContains(t, env.Data, "token")

			st, env, _ = post(t, url, keyA, `{"action":"extend","key":"`+key+`","token":"`+token+`","ttl":120}`)
			require.Equal(t, 200, st)
			assert.Equal(t, true, env.Data["extended"])
			assert.EqualValues(t, 120, env.Data["ttl"])

			st, env, _ = post(t, url, keyA, `{"action":"release","key":"`+key+`","token":"`+token+`"}`)
			require.Equal(t, 200, st)
			assert.Equal(t, true, env.Data["released"])
			st, env, _ = post(t, url, keyA, `{"action":"release","key":"`+key+`","token":"`+token+`"}`)
			require.Equal(t, 200, st)
			assert.Equal(t, false, env.Data["released"])
			assert.Contains(t, env.Msg, "expired or was already released")

			// The next holder gets a greater fencing token.
			_, env, _ = post(t, url, keyA, `{"action":"acquire","key":"`+key+`","ttl":5}`)
			require.Equal(t, true, env.Data["acquired"])
			assert.Greater(t, env.Data["fence"], fence)
		})
	}
}

// TestTenantsAreIsolated: the same key under two API keys, or two
// namespaces, is a different lock, and one account can never release,
// extend or see another's lock. Keys and namespaces contain the separator.
func TestTenantsAreIsolated(t *testing.T) {
	url := lockURL(daemonURL(t))
	acquire := func(apiKey, body string) string {
		t.Helper()
		st, env, _ := post(t, url, apiKey, body)
		require.Equal(t, 200, st)
		require.Equal(t, true, env.Data["acquired"], "%s %s: %v", apiKey[:8], body, env)
		return env.Data["token"].(string)
	}
	ta := acquire(keyA, `{"key":"job:daily_report","ttl":60}`)
	tb := acquire(keyB, `{"key":"job:daily_report","ttl":60}`)
	acquire(keyA, `{"key":"b:c","namespace":"a","ttl":60}`)
	acquire(keyA, `{"key":"c","namespace":"a:b","ttl":60}`)
	acquire(keyA, `{"key":"a:b:c","ttl":60}`)

	// B cannot release, extend or see A's lock.
	_, env, _ := post(t, url, keyB, `{"action":"release","key":"job:daily_report","token":"`+ta+`"}`)
	assert.Equal(t, false, env.Data["released"])
	_, env, _ = post(t, url, keyB, `{"action":"extend","key":"job:daily_report","token":"`+ta+`","ttl":5}`)
	assert.Equal(t, false, env.Data["extended"])
	_, env, _ = post(t, url, keyA, `{"action":"status","key":"job:daily_report"}`)
	assert.Equal(t, true, env.Data["held"])
	_, env, _ = post(t, url, keyA, `{"action":"release","key":"job:daily_report","token":"`+ta+`"}`)
	assert.Equal(t, true, env.Data["released"])
	_, env, _ = post(t, url, keyB, `{"action":"status","key":"job:daily_report"}`)
	assert.Equal(t, true, env.Data["held"], "B's lock survives A's release")
	_, env, _ = post(t, url, keyB, `{"action":"release","key":"job:daily_report","token":"`+tb+`"}`)
	assert.Equal(t, true, env.Data["released"])
}

// TestBadInput sends every bad input of the issue through real HTTP. Each
// gets the envelope with ret "err", a message naming the field and limit,
// a stable code and the right status — and leaves no key behind.
func TestBadInput(t *testing.T) {
	base := daemonURL(t, func(c *config.Config) { c.MaxTTL = 3600 })
	url := lockURL(base)
	before := keysContaining(t, "lock:")
	long := strings.Repeat("k", 513)
	cases := []struct {
		name, apiKey, body string
		status             int
		code, msg          string
	}{
		{"missing key", keyA, `{"action":"acquire"}`, 400, "bad_request", "key"},
		{"empty key", keyA, `{"key":""}`, 400, "bad_request", "key"},
		{"oversized key", keyA, `{"key":"` + long + `"}`, 400, "bad_request", "512"},
		{"control char key", keyA, `{"key":"a\u0007b"}`, 400, "bad_request", "control"},
		{"unknown action", keyA, `{"key":"k","action":"steal"}`, 400, "bad_request", "action"},
		{"ttl string", keyA, `{"key":"k","ttl":"30"}`, 400, "bad_request", "ttl"},
		{"ttl float", keyA, `{"key":"k","ttl":30.5}`, 400, "bad_request", "ttl"},
		{"ttl zero", keyA, `{"key":"k","ttl":0}`, 400, "bad_request", "ttl"},
		{"ttl negative", keyA, `{"key":"k","ttl":-5}`, 400, "bad_request", "ttl"},
		{"ttl above max", keyA, `{"key":"k","ttl":3601}`, 400, "bad_request", "3600"},
		{"release without token", keyA, `{"key":"k","action":"release"}`, 400, "bad_request", "token"},
		{"extend without token", keyA, `{"key":"k","action":"extend","ttl":5}`, 400, "bad_request", "token"},
		{"malformed json", keyA, `{"key":`, 400, "bad_request", "JSON"},
		{"array body", keyA, `["key"]`, 400, "bad_request", "object"},
		{"string body", keyA, `"key"`, 400, "bad_request", "object"},
		{"unknown field", keyA, `{"key":"k","tll":30}`, 400, "bad_request", "tll"},
		{"missing api key", "", `{"key":"k"}`, 401, "unauthorized", "X-API-Key"},
		{"unknown api key", "not-a-real-key-0000000000", `{"key":"k"}`, 401, "unauthorized", "X-API-Key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, env, _ := post(t, url, tc.apiKey, tc.body)
			assert.Equal(t, tc.status, st)
			assert.Equal(t, "err", env.Ret)
			assert.Equal(t, tc.code, env.Code)
			assert.Contains(t, strings.ToLower(env.Msg), strings.ToLower(tc.msg))
		})
	}

	t.Run("body too large", func(t *testing.T) {
		st, env, _ := post(t, url, keyA, `{"key":"`+strings.Repeat("x", 20000)+`"}`)
		assert.Equal(t, 413, st)
		assert.Equal(t, "too_large", env.Code)
	})
	t.Run("api key in query", func(t *testing.T) {
		st, env, _ := post(t, url+"?api_key="+keyA, "", `{"key":"k"}`)
		assert.Equal(t, 400, st)
		assert.Contains(t, env.Msg, "X-API-Key header")
		assert.NotContains(t, env.Msg, keyA)
	})
	t.Run("wrong method", func(t *testing.T) {
		resp, err := httpClient.Get(url)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 405, resp.StatusCode)
		assert.Equal(t, "POST", resp.Header.Get("Allow"))
	})
	t.Run("not json", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("key=k"))
		req.Header.Set("X-API-Key", keyA)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := httpClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 415, resp.StatusCode)
	})
	assert.Equal(t, before, keysContaining(t, "lock:"), "bad input left a key behind")
}

// TestQuorumUnavailable: with three masters killed the daemon answers 503
// quorum_unavailable with Retry-After and /readyz turns 503. They come back
// empty: a majority lost its data, no quorum kept the fencing counter, and
// the daemon keeps failing closed ("repairing") until `redlockd
// repair-fences` (run here as the binary runs it, from the daemon's config
// file); then it serves again, with fences above the repair target.
func TestQuorumUnavailable(t *testing.T) {
	var cfg config.Config
	base := daemonURL(t, func(c *config.Config) {
		c.MaxTTL = 1 // a repaired master counts again 1s after its restart
		c.DefaultTTL = 1
		cfg = *c
	})
	url := lockURL(base)
	key := fmt.Sprintf("stock:sku_%d", time.Now().UnixNano()) // its own: -count=2 runs it again within the TTL
	acquire := `{"key":"` + key + `","ttl":1}`
	st, env, _ := post(t, url, keyA, acquire)
	require.Equal(t, 200, st, "%v", env)
	before := int64(env.Data["fence"].(float64))
	// An established deployment: every master carries the marker (and its
	// lease horizon, max TTL registry and clock bounds registry).
	require.Eventually(t, func() bool { return keysContaining(t, cfg.KeyPrefix+"marker") == 20 }, 10*time.Second, 20*time.Millisecond)
	_, _, _ = post(t, url, keyA, `{"action":"release","key":"`+key+`","token":"`+env.Data["token"].(string)+`"}`)

	for _, i := range []int{0, 1, 2} {
		require.NoError(t, servers[i].Kill())
	}
	restarted := false
	restart := func() {
		if restarted {
			return
		}
		restarted = true
		for _, i := range []int{0, 1, 2} {
			require.NoError(t, servers[i].Restart())
		}
	}
	t.Cleanup(restart)

	st, env, hdr := post(t, url, keyA, acquire)
	assert.Equal(t, 503, st)
	assert.Equal(t, "quorum_unavailable", env.Code)
	assert.NotEmpty(t, hdr.Get("Retry-After"))
	assert.Zero(t, keysContaining(t, key), "failed acquire left a key on a live master")
	readyz := func() (int, string) {
		resp, err := httpClient.Get(base + "/readyz")
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	require.Eventually(t, func() bool { st, _ := readyz(); return st == 503 }, 5*time.Second, 20*time.Millisecond)

	restart()
	require.Eventually(t, func() bool {
		_, body := readyz()
		return strings.Count(body, `"state":"repairing"`) == 3
	}, 10*time.Second, 20*time.Millisecond, "the three empty masters are seen and kept out")
	// Past their quarantine (max_ttl 1s) they still cannot count: no quorum
	// to repair their fencing counters from, so it stays closed.
	require.Eventually(t, func() bool {
		_, body := readyz()
		return strings.Count(body, `"quarantine_left_s":0`) == 5
	}, 10*time.Second, 20*time.Millisecond, "quarantines end")
	st, env, _ = post(t, url, keyA, acquire)
	assert.Equal(t, 503, st, "fail closed while the fencing counters are lost: %v", env)
	assert.Contains(t, env.Msg, "3 not counted (quarantined, repairing or waiting", "the 503 says why")
	code, body := readyz()
	assert.Equal(t, 503, code)
	assert.Equal(t, 3, strings.Count(body, `"state":"repairing"`), body)
	assert.Equal(t, 3, strings.Count(body, "run `redlockd repair-fences`"), "/readyz tells the operator what to do: %s", body)

	file := writeConfig(t, cfg)
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"repair-fences", "--config", file, "--dry-run"}, &out, &errOut), errOut.String())
	assert.Contains(t, out.String(), "dry run: nothing written")
	assert.Equal(t, 3, strings.Count(out.String(), "(none)"), "the three masters without a marker:\n%s", out.String())
	st, _, _ = post(t, url, keyA, acquire)
	assert.Equal(t, 503, st, "a dry run repairs nothing")

	out.Reset()
	require.NoError(t, run(context.Background(), []string{"repair-fences", "--config", file}, &out, &errOut), errOut.String())
	t.Logf("redlockd repair-fences:\n%s", out.String())
	assert.Contains(t, out.String(), "repaired: every answering master's fencing counter is ≥")
	var target int64
	for _, line := range strings.Split(out.String(), "\n") {
		if _, err := fmt.Sscanf(line[strings.LastIndex(line, "target ")+1:], "arget %d", &target); err == nil && strings.HasPrefix(line, "highest") {
			break
		}
	}
	// The fence before the loss may have lived only on the three lost
	// masters (a master that missed the vote gets no write-back); the
	// margin covers it.
	require.GreaterOrEqual(t, target, int64(1_000_000))
	require.Greater(t, target, before)

	// Once the quarantines have ended the placement registry still waits
	// a registration's life (2 s here) for the repaired masters: its 503s
	// say when it counts again. A black-box pass saw Retry-After count
	// down to the quarantines' end and then jump to the outage's backoff
	// ("no time is known") until the gate opened.
	var last string
	if !assert.Eventually(t, func() bool {
		_, last = readyz()
		return strings.Count(last, `"quarantine_left_s":0`) == 5 && strings.Contains(last, `"counting":5,`)
	}, 10*time.Second, 20*time.Millisecond, "the repaired masters' quarantines end") {
		t.Fatalf("/readyz: %s", last)
	}
	var fence int64
	var refusals []string
	require.Eventually(t, func() bool {
		st, env, hdr := post(t, url, keyA, acquire)
		if st == 503 {
			refusals = append(refusals, env.Msg+" (Retry-After "+hdr.Get("Retry-After")+")")
		}
		if st != 200 || env.Data["acquired"] != true {
			return false
		}
		fence = int64(env.Data["fence"].(float64))
		return true
	}, 10*time.Second, 50*time.Millisecond, "serving again once the repaired masters count for the registry")
	assert.NotEmpty(t, refusals, "the registry waits a registration's life past the quarantines")
	for _, r := range refusals {
		assert.NotContains(t, r, "no time is known", "a refusal after the quarantines says when the registry is back")
		assert.Regexp(t, `(the registry counts a quorum again in|a quorum is expected back in) [0-9.]+s`, r)
		assert.Regexp(t, `Retry-After [1-3]\)$`, r)
	}
	assert.Greater(t, fence, target, "fences continue above the repair target")
	code, _ = readyz()
	assert.Equal(t, 200, code)
}

// writeConfig writes cfg as the YAML file `redlockd serve --config` reads.
func writeConfig(t *testing.T, cfg config.Config) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "key_prefix: %q\n", cfg.KeyPrefix)
	if cfg.MaxTTL > 0 {
		fmt.Fprintf(&b, "max_ttl: %d\n", cfg.MaxTTL)
		if cfg.DefaultTTL > 0 {
			fmt.Fprintf(&b, "default_ttl: %d\n", cfg.DefaultTTL)
		}
	}
	b.WriteString("masters:\n")
	for _, m := range cfg.Masters {
		fmt.Fprintf(&b, "  - %q\n", m)
	}
	b.WriteString("api_keys:\n")
	for _, k := range cfg.APIKeys {
		fmt.Fprintf(&b, "  - name: %q\n    key: %q\n", k.Name, k.Key)
	}
	path := t.TempDir() + "/redlockd.yaml"
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	return path
}

// TestRepairFencesBadInput: every bad flag is refused before any master is
// touched, naming the flag and the limit.
func TestRepairFencesBadInput(t *testing.T) {
	file := writeConfig(t, config.Config{KeyPrefix: "bad:", Masters: []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}, APIKeys: []config.APIKey{{Name: "acme", Key: keyA}}})
	groups := t.TempDir() + "/groups.yaml"
	require.NoError(t, os.WriteFile(groups, []byte(fmt.Sprintf("key_prefix: \"bad:\"\nmaster_groups:\n  - name: g0\n    masters: [%q, %q, %q]\n  - name: g1\n    masters: [%q, %q, \"127.0.0.1:1\"]\napi_keys:\n  - name: acme\n    key: %q\n",
		servers[0].Addr(), servers[1].Addr(), servers[2].Addr(), servers[3].Addr(), servers[4].Addr(), keyA)), 0o600))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", file, "--min", "-1"}, "--min must be ≥ 0, got -1"},
		{[]string{"--config", file, "--margin", "0"}, "--margin must be ≥ 1, got 0"},
		{[]string{"--config", file, "--timeout", "0s"}, "--timeout must be > 0"},
		{[]string{"--config", file, "extra"}, `unexpected argument "extra"`},
		{[]string{"--config", "/nonexistent/redlockd.yaml"}, "/nonexistent/redlockd.yaml"},
		{[]string{"--config", file, "--margin", "x"}, `invalid value "x" for flag -margin`},
		{[]string{"--config", file, "--margin", "9223372036854775807"}, "margin must be in [0, 9006099743113215]"},
		{[]string{"--config", file, "--min", "9007199254740990"}, "min must be in [0, 9006099743113214]"},
		// A config with master_groups: one repair per group, said so
		// (before: "at least one master is required", naming nothing).
		{[]string{"--config", groups}, "the config has master_groups (g0, g1): each group keeps its own fencing counters; run repair-fences once per group"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"repair-fences"}, tc.args...), &out, &errOut)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error()+errOut.String(), tc.want, "%v", tc.args)
	}
	for _, s := range servers[:3] {
		r := redis.NewClient(&redis.Options{Addr: s.Addr()})
		n, err := r.Exists(context.Background(), "bad:fence", "bad:marker").Result()
		r.Close()
		require.NoError(t, err)
		assert.Zero(t, n, "nothing written on %s", s.Addr())
	}
}

// TestTwoMastersKilled: acquire, extend, status and release all work with
// two of five masters dead.
func TestTwoMastersKilled(t *testing.T) {
	url := lockURL(daemonURL(t))
	for _, i := range []int{1, 3} {
		require.NoError(t, servers[i].Kill())
	}
	t.Cleanup(func() {
		for _, i := range []int{1, 3} {
			require.NoError(t, servers[i].Restart())
		}
	})
	_, env, _ := post(t, url, keyA, `{"key":"msg:notify:u42","ttl":30}`)
	require.Equal(t, true, env.Data["acquired"], "%v", env)
	token := env.Data["token"].(string)
	_, env, _ = post(t, url, keyA, `{"action":"extend","key":"msg:notify:u42","token":"`+token+`","ttl":60}`)
	assert.Equal(t, true, env.Data["extended"])
	_, env, _ = post(t, url, keyA, `{"action":"status","key":"msg:notify:u42"}`)
	assert.Equal(t, true, env.Data["held"])
	_, env, _ = post(t, url, keyA, `{"action":"release","key":"msg:notify:u42","token":"`+token+`"}`)
	assert.Equal(t, true, env.Data["released"])
}

// TestConcurrentHTTPAcquireOneWinner: 64 concurrent acquires of one key
// through the API, exactly one winner.
func TestConcurrentHTTPAcquireOneWinner(t *testing.T) {
	url := lockURL(daemonURL(t, func(c *config.Config) { c.PerMasterTimeout = config.Duration(time.Second) }))
	var wg sync.WaitGroup
	var winners, losers atomic.Int32
	start := make(chan struct{})
	for range 64 {
		wg.Go(func() {
			<-start
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"key":"export:merchant_5","ttl":60}`))
			req.Header.Set("X-API-Key", keyA)
			resp, err := httpClient.Do(req)
			if !assert.NoError(t, err) {
				return
			}
			defer resp.Body.Close()
			var env envelope
			assert.NoError(t, json.NewDecoder(resp.Body).Decode(&env))
			switch env.Data["acquired"] {
			case true:
				winners.Add(1)
			case false:
				losers.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	assert.Equal(t, int32(1), winners.Load())
	assert.Equal(t, int32(63), losers.Load())
}

// TestClientDisconnectLeavesNoKey: an HTTP client that gives up during an
// acquire that cannot be decided (three masters paused) leaves no key of
// that acquire on the reachable masters.
func TestClientDisconnectLeavesNoKey(t *testing.T) {
	url := lockURL(daemonURL(t, func(c *config.Config) { c.PerMasterTimeout = config.Duration(3 * time.Second) }))
	for _, i := range []int{2, 3, 4} {
		require.NoError(t, servers[i].Pause())
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			for _, i := range []int{2, 3, 4} {
				require.NoError(t, servers[i].Resume())
			}
		}
	}
	t.Cleanup(resume)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(`{"key":"order:pay:disconnect","ttl":60}`))
	req.Header.Set("X-API-Key", keyA)
	_, err := httpClient.Do(req)
	require.Error(t, err, "the client gave up")

	// The daemon sees the disconnect, cancels the acquire, and its cleanup
	// removes the key from the reachable masters.
	require.Eventually(t, func() bool {
		n := 0
		for _, i := range []int{0, 1} {
			r := redis.NewClient(&redis.Options{Addr: servers[i].Addr()})
			keys, _ := r.Keys(context.Background(), "*order:pay:disconnect*").Result()
			r.Close()
			n += len(keys)
		}
		return n == 0
	}, 5*time.Second, 20*time.Millisecond)
	resume()
	require.Eventually(t, func() bool { return keysContaining(t, "order:pay:disconnect") == 0 }, 5*time.Second, 20*time.Millisecond)
}

func TestHealthAndMetrics(t *testing.T) {
	base := daemonURL(t)
	resp, err := httpClient.Get(base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)

	require.Eventually(t, func() bool {
		resp, err := httpClient.Get(base + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body struct {
			Masters []struct{ State string } `json:"masters"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode == 200 && len(body.Masters) == 5
	}, 5*time.Second, 20*time.Millisecond)

	post(t, lockURL(base), keyA, `{"key":"metrics:probe","ttl":5}`)
	resp, err = httpClient.Get(base + "/metrics")
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"redlockd_requests_total", "redlockd_request_duration_seconds", "redlock_master_up", "redlock_master_rtt_seconds", "redlock_quorum_available"} {
		assert.Contains(t, string(raw), name)
	}
	resp, err = httpClient.Get(base + "/")
	require.NoError(t, err)
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, string(raw), "<html")
}

// TestShutdownAnswersWaiters: SIGTERM while an acquire waits (wait_ms) for
// a held lock. The waiter gets its answer, acquired:false with
// retry_after, instead of a connection cut off by the shutdown timeout, and
// the daemon stops cleanly.
func TestShutdownAnswersWaiters(t *testing.T) {
	base, stop := startDaemon(t)
	url := lockURL(base)
	key := fmt.Sprintf("term:%d", time.Now().UnixNano())
	st, env, _ := post(t, url, keyA, `{"key":"`+key+`","ttl":30}`)
	require.Equal(t, 200, st)
	require.Equal(t, true, env.Data["acquired"])

	type answer struct {
		status int
		env    envelope
		err    error
	}
	got := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"key":"`+key+`","ttl":30,"wait_ms":25000}`))
		req.Header.Set("X-API-Key", keyA)
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpClient.Do(req)
		if err != nil {
			got <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		var e envelope
		err = json.NewDecoder(resp.Body).Decode(&e)
		got <- answer{status: resp.StatusCode, env: e, err: err}
	}()
	// Shut down only once the waiter is in: in flight, the waiter and this
	// /metrics request.
	require.Eventually(t, func() bool {
		resp, err := httpClient.Get(base + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(raw), "\nredlockd_requests_in_flight 2\n")
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, stop(), "a clean shutdown: no request cut off")
	a := <-got
	require.NoError(t, a.err, "the waiter must get an answer")
	assert.Equal(t, 200, a.status)
	assert.Equal(t, false, a.env.Data["acquired"], "%v", a.env)
	assert.NotNil(t, a.env.Data["retry_after"])
	assert.Equal(t, true, a.env.Data["wait_stopped"], "the field a client resends its wait on")
	assert.Equal(t, "lock is held by another owner; this daemon is shutting down, so the wait ended before wait_ms: retry, on another replica", a.env.Msg,
		"the answer says the wait was cut short, not only that the key is held")
}

// TestExtendNeverShortensOverHTTP: an extend with a ttl below what is left
// keeps the longer lock, and its answer says how long.
func TestExtendNeverShortensOverHTTP(t *testing.T) {
	url := lockURL(daemonURL(t))
	key := fmt.Sprintf("extend:shorter:%d", time.Now().UnixNano())
	st, env, _ := post(t, url, keyA, `{"key":"`+key+`","ttl":20}`)
	require.Equal(t, 200, st, "%v", env)
	token := env.Data["token"].(string)
	st, env, _ = post(t, url, keyA, `{"action":"extend","key":"`+key+`","token":"`+token+`","ttl":1}`)
	require.Equal(t, 200, st, "%v", env)
	assert.Equal(t, true, env.Data["extended"])
	assert.GreaterOrEqual(t, env.Data["ttl"], float64(18), "the lock keeps its 20s")
	assert.Greater(t, env.Data["validity_ms"], float64(18000))
	time.Sleep(1500 * time.Millisecond)
	st, env, _ = post(t, url, keyA, `{"key":"`+key+`","ttl":5}`)
	require.Equal(t, 200, st)
	assert.Equal(t, false, env.Data["acquired"], "still held after the shorter ttl would have ended")
}

// TestWaiterCap: with max_waiters_per_account 1, a second acquire that
// wants to wait is refused with 429 too_many_waiters while the first waits
// (shown on /readyz); the first gets the lock once it is released.
func TestWaiterCap(t *testing.T) {
	base := daemonURL(t, func(c *config.Config) { c.MaxWaitersPerAccount = 1 })
	url := lockURL(base)
	key := fmt.Sprintf("waiters:%d", time.Now().UnixNano())
	st, env, _ := post(t, url, keyA, `{"key":"`+key+`","ttl":30}`)
	require.Equal(t, 200, st, "%v", env)
	token := env.Data["token"].(string)
	got := make(chan envelope, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"key":"`+key+`","ttl":5,"wait_ms":20000}`))
		req.Header.Set("X-API-Key", keyA)
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpClient.Do(req)
		if err != nil {
			got <- envelope{Msg: err.Error()}
			return
		}
		defer resp.Body.Close()
		var e envelope
		_ = json.NewDecoder(resp.Body).Decode(&e)
		got <- e
	}()
	require.Eventually(t, func() bool {
		resp, err := httpClient.Get(base + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(raw), `"waiting":1`)
	}, 10*time.Second, 10*time.Millisecond, "the waiter shows on /readyz")
	st, env, hdr := post(t, url, keyA, `{"key":"`+key+`","ttl":5,"wait_ms":1000}`)
	assert.Equal(t, 429, st)
	assert.Equal(t, "too_many_waiters", env.Code)
	assert.Contains(t, env.Msg, "max_waiters_per_account 1")
	assert.Equal(t, "1", hdr.Get("Retry-After"))
	st, _, _ = post(t, url, keyA, `{"key":"`+key+`","ttl":5}`)
	assert.Equal(t, 200, st, "an acquire that does not wait is not capped")
	st, _, _ = post(t, url, keyA, `{"action":"release","key":"`+key+`","token":"`+token+`"}`)
	require.Equal(t, 200, st)
	e := <-got
	assert.Equal(t, true, e.Data["acquired"], "%v", e)
}
