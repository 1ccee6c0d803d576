package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"

	"github.com/redlockd/redlockd/redlock"
)

// okData checks a 200 {"ret":"ok"} answer and returns its data.
func okData(t *testing.T, r *response) map[string]any {
	t.Helper()
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	require.Equal(t, "ok", r.Env.Ret, r.Raw)
	require.Nil(t, r.Env.Code, "no code on ok: %s", r.Raw)
	require.NotNil(t, r.Env.RemainQuota)
	assert.Equal(t, RemainQuota, *r.Env.RemainQuota)
	return r.data(t)
}

func num(t *testing.T, d map[string]any, field string) int64 {
	t.Helper()
	v, ok := d[field].(float64)
	require.True(t, ok, "data.%s missing or not a number in %v", field, d)
	return int64(v)
}

// The curl examples, verbatim bodies, in order.
func TestActionsFlow(t *testing.T) {
	ts := newTestServer(t, newFakeLocker())

	// acquire → acquired:true and a token
	before := time.Now()
	r := ts.lock(t, testKeyAcme, `{"action":"acquire","key":"order:pay:10086","ttl":30}`)
	d := okData(t, r)
	assert.Equal(t, "acquire", d["action"])
	assert.Equal(t, "order:pay:10086", d["key"], "data.key is the caller's key, not the Redis key")
	assert.Equal(t, true, d["acquired"])
	token, _ := d["token"].(string)
	assert.True(t, isToken(token), "token %q", token)
	assert.EqualValues(t, 30, num(t, d, "ttl"))
	validity := num(t, d, "validity_ms")
	assert.InDelta(t, 29700, validity, 300)
	assert.LessOrEqual(t, num(t, d, "expire_at"), before.Add(30*time.Second).Unix())
	assert.GreaterOrEqual(t, num(t, d, "expire_at"), before.Unix()+28)
	assert.NotContains(t, d, "fence", "no fencing yet: the field is absent, not faked")
	assert.NotContains(t, d, "retry_after")
	assert.Equal(t, "", r.Env.Msg)

	// the same again → acquired:false, retry_after = the holder's remaining seconds
	r = ts.lock(t, testKeyAcme, `{"action":"acquire","key":"order:pay:10086","ttl":30}`)
	d = okData(t, r)
	assert.Equal(t, false, d["acquired"])
	assert.Equal(t, msgHeld, r.Env.Msg)
	ra := num(t, d, "retry_after")
	assert.True(t, ra >= 29 && ra <= 30, "retry_after %d", ra)
	assert.Equal(t, strconv.FormatInt(ra, 10), r.Header.Get("Retry-After"), "the same hint as a header")
	assert.NotContains(t, d, "token")

	// status → held, ttl, expire_at, never the token
	r = ts.lock(t, testKeyAcme, `{"action":"status","key":"order:pay:10086"}`)
	d = okData(t, r)
	assert.Equal(t, true, d["held"])
	assert.True(t, num(t, d, "ttl") >= 29 && num(t, d, "ttl") <= 30, "ttl %v", d["ttl"])
	assert.LessOrEqual(t, num(t, d, "expire_at"), before.Add(30*time.Second).Unix())
	assert.NotContains(t, d, "token")
	assert.NotContains(t, r.Raw, token)

	// extend with a wrong token, then the right one
	r = ts.lock(t, testKeyAcme, `{"action":"extend","key":"order:pay:10086","token":"`+goodToken+`","ttl":120}`)
	d = okData(t, r)
	assert.Equal(t, false, d["extended"])
	assert.Equal(t, msgWrongToken, r.Env.Msg)
	r = ts.lock(t, testKeyAcme, `{"action":"extend","key":"order:pay:10086","token":"`+token+`","ttl":120}`)
	d = okData(t, r)
	assert.Equal(t, true, d["extended"])
	assert.EqualValues(t, 120, num(t, d, "ttl"))
	assert.InDelta(t, 118800, num(t, d, "validity_ms"), 500)
	assert.InDelta(t, time.Now().Unix()+118, num(t, d, "expire_at"), 2)
	assert.NotContains(t, d, "token", "extend does not repeat the token")

	// release with a wrong token, then the right one, then again
	r = ts.lock(t, testKeyAcme, `{"action":"release","key":"order:pay:10086","token":"`+goodToken+`"}`)
	d = okData(t, r)
	assert.Equal(t, false, d["released"])
	assert.Equal(t, msgWrongToken, r.Env.Msg)
	r = ts.lock(t, testKeyAcme, `{"action":"release","key":"order:pay:10086","token":"`+token+`"}`)
	d = okData(t, r)
	assert.Equal(t, true, d["released"])
	assert.Equal(t, "", r.Env.Msg)
	r = ts.lock(t, testKeyAcme, `{"action":"release","key":"order:pay:10086","token":"`+token+`"}`)
	d = okData(t, r)
	assert.Equal(t, false, d["released"])
	assert.Equal(t, msgNotHeld, r.Env.Msg)

	// extend after release: not held
	r = ts.lock(t, testKeyAcme, `{"action":"extend","key":"order:pay:10086","token":"`+token+`","ttl":120}`)
	d = okData(t, r)
	assert.Equal(t, false, d["extended"])
	assert.Equal(t, msgNotHeld, r.Env.Msg)

	// status → not held, nothing else
	r = ts.lock(t, testKeyAcme, `{"action":"status","key":"order:pay:10086"}`)
	d = okData(t, r)
	assert.Equal(t, map[string]any{"action": "status", "key": "order:pay:10086", "held": false}, d)
}

func TestDefaultTTLAndAlias(t *testing.T) {
	ts := newTestServer(t, newFakeLocker(), func(o *Options) { o.DefaultTTL = 45 * time.Second })
	r := ts.do(t, http.MethodPost, "/gateway/distlock", `{"key":"job:daily_report"}`, map[string]string{"X-API-Key": testKeyAcme})
	d := okData(t, r)
	assert.Equal(t, true, d["acquired"])
	assert.EqualValues(t, 45, num(t, d, "ttl"))
}

// Tenants: the same key under two accounts, or two namespaces, is two
// locks; one account can never release, extend or see another's lock.
func TestTenantIsolation(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f)

	a := okData(t, ts.lock(t, testKeyAcme, `{"key":"stock:sku_1001"}`))
	require.Equal(t, true, a["acquired"])
	tokenA := a["token"].(string)
	b := okData(t, ts.lock(t, testKeyGlobex, `{"key":"stock:sku_1001"}`))
	require.Equal(t, true, b["acquired"], "globex's stock:sku_1001 is not acme's")
	tokenB := b["token"].(string)

	// globex cannot see, extend or release acme's lock, even with its token
	d := okData(t, ts.lock(t, testKeyGlobex, `{"action":"release","key":"stock:sku_1001","token":"`+tokenA+`"}`))
	assert.Equal(t, false, d["released"])
	d = okData(t, ts.lock(t, testKeyGlobex, `{"action":"extend","key":"stock:sku_1001","token":"`+tokenA+`"}`))
	assert.Equal(t, false, d["extended"])
	d = okData(t, ts.lock(t, testKeyGlobex, `{"key":"only:acme"}`))
	require.Equal(t, true, d["acquired"])
	okData(t, ts.lock(t, testKeyGlobex, `{"action":"release","key":"only:acme","token":"`+d["token"].(string)+`"}`))
	d = okData(t, ts.lock(t, testKeyAcme, `{"key":"acme:private"}`))
	require.Equal(t, true, d["acquired"])
	d = okData(t, ts.lock(t, testKeyGlobex, `{"action":"status","key":"acme:private"}`))
	assert.Equal(t, false, d["held"], "globex does not see acme's lock")
	d = okData(t, ts.lock(t, testKeyAcme, `{"action":"status","key":"acme:private"}`))
	assert.Equal(t, true, d["held"])

	// both original locks still held by their owners
	d = okData(t, ts.lock(t, testKeyAcme, `{"action":"release","key":"stock:sku_1001","token":"`+tokenA+`"}`))
	assert.Equal(t, true, d["released"])
	d = okData(t, ts.lock(t, testKeyGlobex, `{"action":"release","key":"stock:sku_1001","token":"`+tokenB+`"}`))
	assert.Equal(t, true, d["released"])

	// namespaces: "a" + "b:c" and "a:b" + "c" are different locks
	d = okData(t, ts.lock(t, testKeyAcme, `{"namespace":"a","key":"b:c"}`))
	assert.Equal(t, true, d["acquired"])
	d = okData(t, ts.lock(t, testKeyAcme, `{"namespace":"a:b","key":"c"}`))
	assert.Equal(t, true, d["acquired"])
	d = okData(t, ts.lock(t, testKeyAcme, `{"key":"b:c"}`))
	assert.Equal(t, true, d["acquired"], "no namespace is not namespace a")

	keys := f.seenKeys()
	assert.Equal(t, redisKey(testPrefix, "acme", "", "stock:sku_1001"), keys[0])
	assert.Equal(t, redisKey(testPrefix, "globex", "", "stock:sku_1001"), keys[1])
	assert.Equal(t, redisKey(testPrefix, "globex", "", "stock:sku_1001"), keys[2], "globex's release went to globex's key")
	assert.Contains(t, keys, redisKey(testPrefix, "acme", "a", "b:c"))
	assert.Contains(t, keys, redisKey(testPrefix, "acme", "a:b", "c"))
	for _, k := range keys {
		assert.True(t, strings.HasPrefix(k, testPrefix+"lock:"), k)
	}
}

// wait_ms is passed to the Locker, which retries until the holder lets go.
func TestAcquireWait(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f)
	d := okData(t, ts.lock(t, testKeyAcme, `{"key":"msg:notify:u42","ttl":1}`))
	require.Equal(t, true, d["acquired"])
	start := time.Now()
	d = okData(t, ts.lock(t, testKeyAcme, `{"key":"msg:notify:u42","wait_ms":2000}`))
	assert.Equal(t, true, d["acquired"], "acquired once the 1s lock expired")
	assert.Less(t, time.Since(start), 2*time.Second)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Equal(t, []time.Duration{0, 2 * time.Second}, f.waits)
}

// No quorum: 503 quorum_unavailable with Retry-After, for every action.
func TestQuorumUnavailable(t *testing.T) {
	f := newFakeLocker()
	f.down.Store(true)
	for i := range 5 {
		f.setUp(i, false)
	}
	const noReturn = "; no time is known for a quorum to be back, as the masters counted above have no known return; retry later"
	ts := newTestServer(t, f)
	for _, body := range []string{
		`{"key":"k"}`,
		`{"action":"release","key":"k","token":"` + goodToken + `"}`,
		`{"action":"extend","key":"k","token":"` + goodToken + `"}`,
		`{"action":"status","key":"k"}`,
	} {
		r := ts.lock(t, testKeyAcme, body)
		assert.Equal(t, http.StatusServiceUnavailable, r.Status, body)
		assert.Equal(t, codeQuorum, r.code())
		assert.Equal(t, "1", r.Header.Get("Retry-After"))
		if strings.Contains(body, "status") {
			assert.Equal(t, "cannot tell whether the lock is held: 0 master(s) hold it, 0 answered it is free, 5 could not answer or do not count (3 of 5 needed either way)"+noReturn, r.Env.Msg)
		} else {
			assert.Equal(t, "no quorum of Redis masters could vote in time (3 of 5 needed; 5 down)"+noReturn, r.Env.Msg)
		}
		assert.Equal(t, "null", string(r.Env.Data))
	}
	warns := ts.Logs.FilterLevelExact(zapcore.WarnLevel).FilterMessage("request").All()
	assert.Len(t, warns, 4)

	// The hint backs off as the outage lasts: half of it so far, 1 s to
	// 30 s; an answered action ends the outage.
	for _, tc := range []struct {
		lasted time.Duration
		want   string
	}{{4 * time.Second, "2"}, {20 * time.Second, "10"}, {10 * time.Minute, "30"}} {
		ts.Server.outage.since.Store(time.Now().Add(-tc.lasted).UnixNano())
		r := ts.lock(t, testKeyAcme, `{"key":"k"}`)
		assert.Equal(t, tc.want, r.Header.Get("Retry-After"), "after %v", tc.lasted)
	}
	f.down.Store(false)
	okData(t, ts.lock(t, testKeyAcme, `{"key":"k2"}`))
	f.down.Store(true)
	assert.Equal(t, "1", ts.lock(t, testKeyAcme, `{"key":"k"}`).Header.Get("Retry-After"), "a new outage starts at 1 s")
}

// TestQuorumReturnOverHTTP: a 503 promises a quorum's return, in its
// message and its Retry-After, only when the masters that would make up
// the quorum all have a known return.
func TestQuorumReturnOverHTTP(t *testing.T) {
	f := newFakeLocker()
	f.down.Store(true)
	f.setUp(4, false)
	f.mu.Lock()
	f.extra[1].QuarantineLeft = 264 * time.Second
	f.extra[2].QuarantineLeft = 200 * time.Second
	f.extra[3].QuarantineLeft = 300 * time.Second
	f.mu.Unlock()
	ts := newTestServer(t, f)

	// Master 0 counts, 1 and 2 come back within 264 s: a quorum then; the
	// down master 4 cannot make one with master 0 alone before that.
	r := ts.lock(t, testKeyAcme, `{"key":"k"}`)
	assert.Equal(t, http.StatusServiceUnavailable, r.Status)
	assert.Equal(t, "no quorum of Redis masters could vote in time (3 of 5 needed; 1 down, 3 not counted (quarantined, repairing or waiting; see /readyz), 1 healthy (not waited for: the outcome was settled before they answered)); a quorum is expected back in 4m24s, when quarantines end; retry in 264 s", r.Env.Msg)
	assert.Equal(t, "264", r.Header.Get("Retry-After"))

	// Master 3 down instead: the two down masters may be back in a second
	// and make a quorum with master 0, so the quarantines' end is a bound
	// and Retry-After the outage's backoff (a paused master beside
	// quarantined ones: Retry-After 264 s kept callers away from a quorum
	// back two seconds later).
	f.setUp(3, false)
	r = ts.lock(t, testKeyAcme, `{"key":"k"}`)
	assert.Equal(t, "no quorum of Redis masters could vote in time (3 of 5 needed; 2 down, 2 not counted (quarantined, repairing or waiting; see /readyz), 1 healthy (not waited for: the outcome was settled before they answered)); a quorum is expected back in 4m24s, when quarantines end, or sooner when the 2 master(s) down or not answering come back; retry in 1 s", r.Env.Msg)
	assert.Equal(t, "1", r.Header.Get("Retry-After"), "the outage's backoff")

	// Master 0 down too: the quarantined two are not a quorum, and when
	// the down masters return is not known.
	f.setUp(0, false)
	r = ts.lock(t, testKeyAcme, `{"key":"k"}`)
	assert.Equal(t, "no quorum of Redis masters could vote in time (3 of 5 needed; 3 down, 2 not counted (quarantined, repairing or waiting; see /readyz)); no time is known for a quorum to be back, as the masters counted above have no known return; retry later", r.Env.Msg)
	assert.Equal(t, "1", r.Header.Get("Retry-After"), "the outage's backoff")
}

// A client that goes away cancels its acquire (the Locker sees ctx end).
func TestClientDisconnectCancelsAcquire(t *testing.T) {
	f := newFakeLocker()
	f.block = make(chan struct{}) // never closed
	f.blocked = make(chan struct{}, 1)
	ts := newTestServer(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-f.blocked
		cancel()
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/lock", strings.NewReader(`{"key":"export:merchant_5"}`))
	require.NoError(t, err)
	req.Header.Set("X-API-Key", testKeyAcme)
	_, err = ts.client.Do(req)
	require.Error(t, err)
	require.Eventually(t, func() bool { return f.cancelled.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		return ts.Server.metrics.counts[actAcquire][resCancelled].Load() == 1
	}, 5*time.Second, 5*time.Millisecond)
}

// A panic in a handler is a logged 500 internal; the server keeps serving.
// An unexpected Locker error is a 500 too.
func TestPanicAndInternal(t *testing.T) {
	f := newFakeLocker()
	f.panicKey = "boom"
	f.failKey = "weird"
	ts := newTestServer(t, f)
	r := ts.lock(t, testKeyAcme, `{"key":"boom"}`)
	assert.Equal(t, http.StatusInternalServerError, r.Status)
	assert.Equal(t, codeInternal, r.code())
	assert.Equal(t, "err", r.Env.Ret)
	panics := ts.Logs.FilterMessage("panic in handler").All()
	require.Len(t, panics, 1)
	assert.Contains(t, panics[0].ContextMap()["stack"], "fakeLocker")

	r = ts.lock(t, testKeyAcme, `{"key":"weird"}`)
	assert.Equal(t, http.StatusInternalServerError, r.Status)
	assert.Equal(t, codeInternal, r.code())
	errs := ts.Logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessage("request").All()
	require.Len(t, errs, 2)
	assert.Equal(t, "something unexpected", errs[1].ContextMap()["error"])

	d := okData(t, ts.lock(t, testKeyAcme, `{"key":"fine"}`))
	assert.Equal(t, true, d["acquired"])
}

// Log lines carry the account and an 8-character token hash prefix, never
// an API key or a token.
func TestLogsNeverHoldSecrets(t *testing.T) {
	ts := newTestServer(t, newFakeLocker())
	d := okData(t, ts.lock(t, testKeyAcme, `{"key":"job:daily_report"}`))
	token := d["token"].(string)
	okData(t, ts.lock(t, testKeyAcme, `{"action":"extend","key":"job:daily_report","token":"`+token+`"}`))
	okData(t, ts.lock(t, testKeyAcme, `{"action":"release","key":"job:daily_report","token":"`+token+`"}`))
	ts.lock(t, "wrong-key-"+testKeyAcme, `{"key":"job:daily_report"}`)

	entries := ts.Logs.FilterMessage("request").All()
	require.Len(t, entries, 4)
	for i, e := range entries {
		line := fmt.Sprint(e.ContextMap())
		assert.NotContains(t, line, token)
		assert.NotContains(t, line, testKeyAcme)
		if i < 3 {
			assert.Equal(t, "acme", e.ContextMap()["account"])
			assert.Equal(t, tokenHashPrefix(token), e.ContextMap()["token_sha256"])
			assert.Len(t, e.ContextMap()["token_sha256"], 8)
		}
	}
	assert.Equal(t, "unauthorized", entries[3].ContextMap()["result"])
	assert.NotContains(t, entries[3].ContextMap(), "account")
}

func TestSecretInQuery(t *testing.T) {
	s, err := New(nil, validOptions(newFakeLocker()))
	require.NoError(t, err)
	for q, want := range map[string]bool{
		"":                                false,
		"a=1&b=2":                         false,
		"x=1":                             false,
		"monkey=1":                        true, // contains "key": refused, harmless
		"KEY=1":                           true,
		"x;api_key=1":                     true,
		"Token":                           true,
		"id_token=1":                      true,
		"a=api_key":                       false, // a value is only refused when it is an API key
		"%zz=1&apikey=2":                  true,
		"%zzkey=1":                        true, // undecodable names are checked raw
		"namespace=a&ttl=3":               false,
		"foo=" + testKeyAcme:              true, // a configured key as a value
		"a=1&foo=" + testKeyAcme:          true,
		"x=1;" + testKeyAcme:              true, // … or as a bare name
		"foo=" + testKeyAcme + "x":        false,
		"foo=acme%2Dkey-0123456789abcdef": true,  // unescaped before hashing
		"foo=" + testKeyGlobex:            false, // not a key of this server
		"foo=":                            false,
	} {
		c := urlKeyCheck{s: s, left: maxURLHashes}
		assert.Equal(t, want, c.secretInQuery(q), q)
	}
}

func TestAppendJSONString(t *testing.T) {
	for in, want := range map[string]string{
		"plain":          `"plain"`,
		"q\"b\\s":        `"q\"b\\s"`,
		"\n\r\t\x00\x1f": `"\n\r\t\u0000\u001f"`,
		"é🔒":             `"é🔒"`,
		"bad\xffbyte":    `"bad\ufffdbyte"`,
		"\u2028\u2029":   `"\u2028\u2029"`,
		"<&>":            `"<&>"`,
	} {
		assert.Equal(t, want, string(appendJSONString(nil, in)), "%q", in)
	}
}

// More than one X-API-Key is ambiguous: 400, whatever the values (even the
// same valid key twice), never echoed, and no Locker call.
// TestTwoContentTypeHeaders: two Content-Type headers are refused with
// 400 whichever comes first (a black-box pass: JSON first acted, JSON
// second got 415), and nothing reaches the masters.
func TestTwoContentTypeHeaders(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f)
	for _, cts := range [][]string{
		{"application/json", "text/plain"},
		{"text/plain", "application/json"},
		{"application/json", "application/json"},
	} {
		req, err := http.NewRequest(http.MethodPost, ts.URL+"/v1/lock", strings.NewReader(`{"key":"two"}`))
		require.NoError(t, err)
		req.Header.Set("X-API-Key", testKeyAcme)
		for _, ct := range cts {
			req.Header.Add("Content-Type", ct)
		}
		resp, err := ts.client.Do(req)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%q: %s", cts, raw)
		var env envelope
		require.NoError(t, json.Unmarshal(raw, &env))
		require.NotNil(t, env.Code)
		assert.Equal(t, codeBadRequest, *env.Code)
		assert.Equal(t, msgTwoContentTypes, env.Msg)
	}
	assert.Zero(t, f.calls.Load())
	assert.Equal(t, true, okData(t, ts.lock(t, testKeyAcme, `{"key":"two"}`))["acquired"], "one header still works")
}

func TestTwoAPIKeyHeaders(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f)
	for _, keys := range [][]string{
		{testKeyAcme, testKeyGlobex},
		{testKeyAcme, testKeyAcme},
		{"", testKeyAcme},
		{"not-a-key-of-anyone", testKeyAcme},
	} {
		req, err := http.NewRequest(http.MethodPost, ts.URL+"/v1/lock", strings.NewReader(`{"key":"two"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		for _, k := range keys {
			req.Header.Add("X-API-Key", k)
		}
		resp, err := ts.client.Do(req)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%q: %s", keys, raw)
		var env envelope
		require.NoError(t, json.Unmarshal(raw, &env))
		assert.Equal(t, "err", env.Ret)
		require.NotNil(t, env.Code)
		assert.Equal(t, codeBadRequest, *env.Code)
		assert.Equal(t, msgTwoAPIKeys, env.Msg)
		for _, k := range keys {
			if k != "" {
				assert.NotContains(t, string(raw), k)
			}
		}
	}
	assert.Zero(t, f.calls.Load())
	for _, e := range ts.Logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		assert.NotContains(t, line, testKeyAcme)
		assert.NotContains(t, line, testKeyGlobex)
	}
	// One header still works.
	assert.Equal(t, true, okData(t, ts.lock(t, testKeyAcme, `{"key":"two"}`))["acquired"])
}

// A configured API key anywhere in the query string, under any name, is
// refused without echoing it; other query strings are accepted.
func TestAPIKeyAsQueryValue(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f)
	for _, q := range []string{
		"?foo=" + testKeyAcme,
		"?x=1&foo=" + testKeyGlobex, // another account's key: still a key
		"?" + testKeyAcme,
		"?q=acme%2Dkey%2D0123456789abcdef",
	} {
		r := ts.do(t, http.MethodPost, "/v1/lock"+q, `{"key":"q"}`, map[string]string{"X-API-Key": testKeyAcme})
		assert.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", q, r.Raw)
		assert.Equal(t, codeBadRequest, r.code())
		assert.Equal(t, msgQuerySecret, r.Env.Msg)
		assert.NotContains(t, r.Raw, testKeyAcme)
		assert.NotContains(t, r.Raw, testKeyGlobex)
	}
	assert.Zero(t, f.calls.Load())
	for _, q := range []string{"?x=1", "?foo=" + testKeyAcme + "x", "?ttl=3&ns=a"} {
		r := ts.do(t, http.MethodPost, "/v1/lock"+q, `{"key":"q`+q+`"}`, map[string]string{"X-API-Key": testKeyAcme})
		assert.Equal(t, true, okData(t, r)["acquired"], q)
	}
}

// ttl is ignored by release and status, wait_ms by every action but
// acquire: any value of any type, even out of range, has no effect. Extend
// still checks ttl; acquire checks both.
func TestIgnoredFields(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f)
	d := okData(t, ts.lock(t, testKeyAcme, `{"key":"ign","ttl":30}`))
	token := d["token"].(string)

	d = okData(t, ts.lock(t, testKeyAcme, `{"action":"status","key":"ign","ttl":99999,"wait_ms":-5}`))
	assert.Equal(t, true, d["held"])
	d = okData(t, ts.lock(t, testKeyAcme, `{"action":"status","key":"ign","ttl":"abc","wait_ms":{"x":[1]}}`))
	assert.Equal(t, true, d["held"])

	r := ts.lock(t, testKeyAcme, `{"action":"extend","key":"ign","token":"`+token+`","ttl":99999}`)
	assert.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
	assert.Equal(t, "ttl: 99999 is above the maximum of 86400 seconds", r.Env.Msg)
	r = ts.lock(t, testKeyAcme, `{"action":"extend","key":"ign","token":"`+token+`","ttl":"60"}`)
	assert.Equal(t, "ttl: must be an integer number of seconds, got a string", r.Env.Msg)
	d = okData(t, ts.lock(t, testKeyAcme, `{"action":"extend","key":"ign","token":"`+token+`","ttl":60,"wait_ms":99999999}`))
	assert.Equal(t, true, d["extended"], "wait_ms is ignored by extend")
	assert.EqualValues(t, 60, num(t, d, "ttl"))

	r = ts.lock(t, testKeyAcme, `{"key":"other","wait_ms":99999999}`)
	assert.Equal(t, "wait_ms: 99999999 is above the maximum of 2000 milliseconds", r.Env.Msg, "acquire checks wait_ms")
	r = ts.lock(t, testKeyAcme, `{"key":"other","ttl":99999}`)
	assert.Equal(t, "ttl: 99999 is above the maximum of 86400 seconds", r.Env.Msg, "acquire checks ttl")

	d = okData(t, ts.lock(t, testKeyAcme, `{"action":"release","key":"ign","token":"`+token+`","ttl":99999,"wait_ms":true}`))
	assert.Equal(t, true, d["released"])
}

// TestQuorumMessage: the 503 message counts every master once, by why it
// did not help a quorum — those the outcome names by their failure, the
// others (not waited for once the outcome was decided) by their health —
// and promises a quorum's return only when a quorum of masters have a
// known one.
func TestQuorumMessage(t *testing.T) {
	me := func(i int, err error) error { return &redlock.MasterError{Index: i, Addr: "m", Err: err} }
	up := redlock.MasterStatus{State: redlock.MasterUp, Up: true, Counting: true}
	down := redlock.MasterStatus{State: redlock.MasterDown}
	repairing := redlock.MasterStatus{State: redlock.MasterRepairing, Up: true}
	waiting := redlock.MasterStatus{State: redlock.MasterWaiting, Up: true}
	oom := redlock.MasterStatus{State: redlock.MasterOOM, Up: true, Counting: true}
	quarantined := func(left time.Duration) redlock.MasterStatus {
		return redlock.MasterStatus{State: redlock.MasterQuarantined, Up: true, QuarantineLeft: left}
	}
	const head = "no quorum of Redis masters could vote in time (3 of 5 needed; "
	const excluded = " not counted (quarantined, repairing or waiting; see /readyz)"
	const notWaited = " healthy (not waited for: the outcome was settled before they answered)"
	const refusing = " refusing writes (OOM: used memory above maxmemory; see /readyz)"
	for _, tc := range []struct {
		name           string
		op             string
		votes, refused int
		failures       []error
		masters        []redlock.MasterStatus
		msg            string
		back           time.Duration
		backKnown      bool
		sooner         int
	}{{
		name:     "every master repairing, three heard from",
		failures: []error{me(0, redlock.ErrMasterQuarantined), me(1, redlock.ErrMasterQuarantined), me(2, redlock.ErrMasterQuarantined)},
		masters:  []redlock.MasterStatus{repairing, repairing, repairing, repairing, repairing},
		msg:      head + "5" + excluded + ")",
	}, {
		name:      "every master quarantined: back when the third quarantine ends",
		failures:  []error{me(0, redlock.ErrMasterQuarantined), me(3, redlock.ErrMasterQuarantined), me(4, redlock.ErrMasterQuarantined)},
		masters:   []redlock.MasterStatus{quarantined(50 * time.Second), quarantined(10 * time.Second), quarantined(30 * time.Second), quarantined(20 * time.Second), quarantined(40 * time.Second)},
		msg:       head + "5" + excluded + ")",
		back:      30 * time.Second,
		backKnown: true,
	}, {
		name:     "down and timed out, the rest not waited for",
		failures: []error{me(0, redlock.ErrMasterDown), me(1, errors.New("dial tcp: connection refused")), me(2, redlock.ErrMasterTimeout)},
		masters:  []redlock.MasterStatus{down, up, up, up, up},
		msg:      head + "2 down, 1 timed out, 2" + notWaited + ")",
	}, {
		name:     "paused master counting by its last probe: no promise",
		failures: []error{me(0, redlock.ErrMasterBusy), me(1, redlock.ErrMasterQuarantined), me(2, redlock.ErrMasterQuarantined)},
		masters:  []redlock.MasterStatus{up, quarantined(264 * time.Second), quarantined(264 * time.Second), down, down},
		msg:      head + "2 down, 2" + excluded + ", 1 timed out)",
	}, {
		name:      "one voted, two quarantined, two down: the down ones may make a quorum with the voter sooner",
		votes:     1,
		failures:  []error{me(1, redlock.ErrMasterQuarantined), me(2, redlock.ErrMasterQuarantined), me(3, redlock.ErrMasterDown)},
		masters:   []redlock.MasterStatus{up, quarantined(264 * time.Second), quarantined(200 * time.Second), down, down},
		msg:       head + "1 voted, 2 down, 2" + excluded + ")",
		back:      264 * time.Second,
		backKnown: true,
		sooner:    2,
	}, {
		name:      "two counting, two quarantined, one paused: it may be back in a second",
		votes:     2,
		failures:  []error{me(1, redlock.ErrMasterQuarantined), me(2, redlock.ErrMasterQuarantined), me(3, redlock.ErrMasterTimeout)},
		masters:   []redlock.MasterStatus{up, quarantined(520 * time.Second), quarantined(520 * time.Second), up, up},
		msg:       head + "2 voted, 2" + excluded + ", 1 timed out)",
		back:      520 * time.Second,
		backKnown: true,
		sooner:    1,
	}, {
		name:      "one voted, three quarantined, one down: the down one cannot make a quorum with the voter alone",
		votes:     1,
		failures:  []error{me(1, redlock.ErrMasterQuarantined), me(2, redlock.ErrMasterQuarantined), me(3, redlock.ErrMasterQuarantined), me(4, redlock.ErrMasterDown)},
		masters:   []redlock.MasterStatus{up, quarantined(264 * time.Second), quarantined(200 * time.Second), quarantined(60 * time.Second), down},
		msg:       head + "1 voted, 1 down, 3" + excluded + ")",
		back:      200 * time.Second,
		backKnown: true,
	}, {
		name:     "quarantined with down masters needed for a quorum: no promise",
		failures: []error{me(0, redlock.ErrMasterDown), me(1, redlock.ErrMasterQuarantined), me(2, redlock.ErrMasterQuarantined)},
		masters:  []redlock.MasterStatus{down, quarantined(264 * time.Second), quarantined(264 * time.Second), down, down},
		msg:      head + "3 down, 2" + excluded + ")",
	}, {
		name:      "repairing, waiting and quarantined mixed: the waiting and repairing ones may make a quorum sooner",
		failures:  []error{me(0, redlock.ErrMasterQuarantined), me(1, redlock.ErrMasterQuarantined), me(2, redlock.ErrMasterDataLost)},
		masters:   []redlock.MasterStatus{repairing, quarantined(time.Minute), quarantined(2 * time.Minute), waiting, up},
		msg:       head + "4" + excluded + ", 1" + notWaited + ")",
		back:      2 * time.Minute,
		backKnown: true,
		sooner:    2,
	}, {
		name:      "repairing and quarantined: back when the second quarantine ends",
		failures:  []error{me(0, redlock.ErrMasterQuarantined), me(1, redlock.ErrMasterQuarantined), me(2, redlock.ErrMasterQuarantined)},
		masters:   []redlock.MasterStatus{repairing, quarantined(time.Minute), quarantined(2 * time.Minute), quarantined(3 * time.Minute), up},
		msg:       head + "4" + excluded + ", 1" + notWaited + ")",
		back:      2 * time.Minute,
		backKnown: true,
	}, {
		name:     "refusing writes",
		failures: []error{me(0, fmt.Errorf("%w: OOM command not allowed", redlock.ErrMasterOOM)), me(1, fmt.Errorf("%w: x", redlock.ErrMasterOOM)), me(2, fmt.Errorf("%w: x", redlock.ErrMasterOOM))},
		masters:  []redlock.MasterStatus{oom, oom, oom, oom, up},
		msg:      head + "4" + refusing + ", 1" + notWaited + ")",
	}, {
		name:     "answered no",
		refused:  1,
		failures: []error{me(1, redlock.ErrMasterDown), me(2, redlock.ErrMasterDown), me(3, redlock.ErrMasterTimeout)},
		masters:  []redlock.MasterStatus{up, down, down, up, up},
		msg:      head + "1 answered no, 2 down, 1 timed out, 1" + notWaited + ")",
	}, {
		name:     "a master failing twice is counted once",
		failures: []error{me(0, redlock.ErrMasterDown), me(0, redlock.ErrMasterTimeout), me(1, redlock.ErrMasterDown), me(2, redlock.ErrMasterDown)},
		masters:  []redlock.MasterStatus{down, down, down, up, up},
		msg:      head + "3 down, 2" + notWaited + ")",
	}, {
		name:     "no snapshot",
		failures: []error{me(0, redlock.ErrMasterDown), me(1, redlock.ErrMasterDown), me(2, redlock.ErrMasterQuarantined)},
		msg:      head + "2 down, 1" + excluded + ", 2" + notWaited + ")",
	}, {
		name:      "a quorum voted too late",
		votes:     3,
		failures:  []error{errors.New("validity -1ms ≤ 0 after 31s")},
		masters:   []redlock.MasterStatus{up, up, up, up, up},
		msg:       "a quorum of Redis masters voted (3 of 5, 3 needed), but too late to leave the lock any validity or with too few storing its fencing token",
		backKnown: true, // now: nothing to promise (quorumAnswer promises only a time ahead)
	}, {
		name:     "a quorum voted, no fencing token left: nothing to promise",
		votes:    3,
		failures: []error{fmt.Errorf("%w: the fencing counter is at 9007199254740991", redlock.ErrFenceExhausted)},
		masters:  []redlock.MasterStatus{up, up, up, up, up},
		msg:      "a quorum of Redis masters voted (3 of 5, 3 needed), but no fencing token is left: the fencing counter has reached the largest fence, 9007199254740991 (set by hand near it?); every acquire is refused",
	}, {
		name:     "status",
		op:       "status",
		votes:    1,
		refused:  1,
		failures: []error{me(0, redlock.ErrMasterDown), me(1, redlock.ErrMasterDown), me(2, redlock.ErrMasterQuarantined)},
		masters:  []redlock.MasterStatus{down, down, quarantined(time.Minute), up, up},
		msg:      "cannot tell whether the lock is held: 1 master(s) hold it, 1 answered it is free, 3 could not answer or do not count (3 of 5 needed either way)",
		// Two more answers are needed to decide, and only one master has
		// a known return: the down ones are needed, so no time is known
		// (a minute from now the three answering could split again).
	}, {
		name:      "status split with a quorum counting: decidable when a quarantine ends",
		op:        "status",
		votes:     1,
		refused:   2,
		failures:  []error{me(3, redlock.ErrMasterQuarantined), me(4, redlock.ErrMasterQuarantined)},
		masters:   []redlock.MasterStatus{up, up, up, quarantined(39 * time.Second), quarantined(40 * time.Second)},
		msg:       "cannot tell whether the lock is held: 1 master(s) hold it, 2 answered it is free, 2 could not answer or do not count (3 of 5 needed either way)",
		back:      39 * time.Second,
		backKnown: true,
	}, {
		name:      "status split: two more answers needed, at the second quarantine's end (the down master cannot decide it alone)",
		op:        "status",
		votes:     1,
		refused:   1,
		failures:  []error{me(2, redlock.ErrMasterQuarantined), me(3, redlock.ErrMasterQuarantined), me(4, redlock.ErrMasterDown)},
		masters:   []redlock.MasterStatus{up, up, quarantined(10 * time.Second), quarantined(20 * time.Second), down},
		msg:       "cannot tell whether the lock is held: 1 master(s) hold it, 1 answered it is free, 3 could not answer or do not count (3 of 5 needed either way)",
		back:      20 * time.Second,
		backKnown: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			op := cmp.Or(tc.op, "acquire")
			oe := &redlock.OutcomeError{Op: op, Kind: redlock.ErrQuorumUnavailable, Quorum: 3, Masters: 5, Votes: tc.votes, Refused: tc.refused, Failures: tc.failures}
			assert.Equal(t, tc.msg, quorumMessage(oe, tc.masters))
			back, known, sooner := quorumReturn(oe, tc.masters, 3)
			assert.Equal(t, tc.backKnown, known, "return known")
			assert.Equal(t, tc.back, back, "return in")
			assert.Equal(t, tc.sooner, sooner, "masters that may make a quorum sooner")
		})
	}
	assert.Equal(t, "no quorum of Redis masters could vote in time", quorumMessage(redlock.ErrQuorumUnavailable, nil))
	_, known, _ := quorumReturn(redlock.ErrQuorumUnavailable, nil, 3)
	assert.False(t, known)
}

// ttlEatenLocker is a fakeLocker whose allowance eats every ttl below 2s.
type ttlEatenLocker struct{ *fakeLocker }

func (l ttlEatenLocker) eaten(ttl time.Duration) error {
	if ttl < 2*time.Second {
		return &redlock.TTLError{TTL: ttl, Allowance: 1100 * time.Millisecond, Min: 1500 * time.Millisecond}
	}
	return nil
}

func (l ttlEatenLocker) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	if err := l.eaten(req.TTL); err != nil {
		return Lease{}, err
	}
	return l.fakeLocker.Acquire(ctx, req)
}

func (l ttlEatenLocker) Extend(ctx context.Context, key, token string, ttl time.Duration) (Lease, error) {
	if err := l.eaten(ttl); err != nil {
		return Lease{}, err
	}
	return l.fakeLocker.Extend(ctx, key, token, ttl)
}

// TestTTLEatenByTheDriftAllowance: a ttl the drift allowance eats whole
// (redlock.TTLError; drift_factor ≤ 0.1 no longer reaches 1s, but the
// allowance is the Client's to set) is bad input, 400 naming ttl and the
// minimum, not a 500, for acquire and extend alike.
func TestTTLEatenByTheDriftAllowance(t *testing.T) {
	ts := newTestServer(t, ttlEatenLocker{newFakeLocker()})
	for _, body := range []string{
		`{"action":"acquire","key":"ttl-eaten","ttl":1}`,
		`{"action":"extend","key":"ttl-eaten","token":"0123456789abcdef0123456789abcdef","ttl":1}`,
	} {
		r := ts.do(t, http.MethodPost, "/v1/lock", body, map[string]string{"X-API-Key": testKeyAcme})
		assert.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", body, r.Raw)
		assert.Equal(t, "bad_request", r.code())
		assert.Contains(t, r.Env.Msg, "ttl: 1 leaves no validity")
		assert.Contains(t, r.Env.Msg, "the minimum ttl is now 2")
	}
	r := ts.do(t, http.MethodPost, "/v1/lock", `{"action":"acquire","key":"ttl-eaten","ttl":2}`, map[string]string{"X-API-Key": testKeyAcme})
	assert.Equal(t, true, okData(t, r)["acquired"])
}

// TestExtendedTTLNeverBelowTheTimeLeft: an extend answer's ttl is never
// below the time the lock still has (its validity, rounded up as status
// rounds): with 3,507 ms left an extend of 1 s said ttl 3 (a black-box
// pass), a lock shown shorter than it is. A lock-delay's cap still caps
// what was asked.
func TestExtendedTTLNeverBelowTheTimeLeft(t *testing.T) {
	for _, tc := range []struct {
		asked      int64
		granted    time.Duration
		validityMS int64
		want       int64
	}{
		{1, 0, 3507, 4},
		{1, 0, 3000, 3},
		{5, 0, 3507, 5},
		{10, 8 * time.Second, 2000, 8},
		{10, 8 * time.Second, 8400, 9},
	} {
		assert.Equal(t, tc.want, extendedTTL(tc.asked, tc.granted, tc.validityMS), "%+v", tc)
	}
}
