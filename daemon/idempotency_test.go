package daemon

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/redlock"
	"github.com/redlockd/redlockd/redlock/idempotency"

	"github.com/redlockd/redlockd/daemon/limits"
)

// idemServer starts a daemon replica over the deployment with the
// idempotency actions on: a redlock Client and a Store of its own.
func (d *deployment) idemServer(t *testing.T, opts ...idempotency.Option) *testServer {
	t.Helper()
	return d.idemServerWith(t, nil, opts...)
}

// idemServerWith is idemServer with Options edited by edit (nil: none).
func (d *deployment) idemServerWith(t *testing.T, edit func(*Options), opts ...idempotency.Option) *testServer {
	t.Helper()
	masters := make([]*redis.Options, len(d.servers))
	for i, s := range d.servers {
		masters[i] = &redis.Options{Addr: s.Addr()}
	}
	c, err := redlock.New(masters,
		redlock.WithFenceKey(d.prefix+"fence"), redlock.WithMarkerKey(d.prefix+"marker"),
		redlock.WithPerMasterTimeout(500*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	st, err := idempotency.New(c, opts...)
	require.NoError(t, err)
	return newTestServer(t, NewRedlockLocker(c), func(o *Options) {
		o.KeyPrefix = d.prefix
		o.Idempotency = &IdempotencyOptions{Store: st, Registerer: o.Metrics.gatherer.(prometheus.Registerer)}
		if edit != nil {
			edit(o)
		}
	})
}

// idemServerLimited is idemServer with the acme account's limits lim,
// kept on the deployment's masters.
func (d *deployment) idemServerLimited(t *testing.T, lim limits.Limits) *testServer {
	t.Helper()
	masters := make([]*redis.Options, len(d.servers))
	for i, s := range d.servers {
		masters[i] = &redis.Options{Addr: s.Addr()}
	}
	ls, err := limits.NewStore(masters, time.Second)
	require.NoError(t, err)
	return d.idemServerWith(t, func(o *Options) {
		for i := range o.APIKeys {
			if o.APIKeys[i].Account == "acme" {
				o.APIKeys[i].Limits = lim
			}
		}
		o.LimitStore, o.LimitsSyncInterval = ls, limitsInterval
	})
}

// idem posts one idempotency action with the acme key.
func (ts *testServer) idem(t *testing.T, body map[string]any) *response {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	return ts.lock(t, testKeyAcme, string(b))
}

type idemAnswer struct {
	Status     int               `json:"status"`
	Headers    map[string]string `json:"headers"`
	BodyBase64 string            `json:"body_base64"`
}

type idemResult struct {
	Outcome       string      `json:"outcome"`
	Token         string      `json:"token"`
	Fence         int64       `json:"fence"`
	PreviousFence int64       `json:"previous_fence"`
	Attempts      int64       `json:"attempts"`
	RetryAfter    int64       `json:"retry_after"`
	ValidityMS    int64       `json:"validity_ms"`
	Answer        *idemAnswer `json:"answer"`
	State         string      `json:"state"`
}

func (r *response) idem(t *testing.T) idemResult {
	t.Helper()
	var out idemResult
	require.NoError(t, json.Unmarshal(r.Env.Data, &out), "data %s", r.Env.Data)
	return out
}

// TestIdemBeginsAcrossTwoReplicas: 100 concurrent idem_begin of one key and
// fingerprint through two daemon replicas: exactly one started; after
// idem_complete, every begin through either replica gets the stored answer
// byte for byte.
func TestIdemBeginsAcrossTwoReplicas(t *testing.T) {
	d := newDeployment(t)
	replicas := []*testServer{d.idemServer(t), d.idemServer(t)}
	begin := map[string]any{"action": "idem_begin", "key": "req-001", "namespace": "u1001", "body": `{"sku":"A1","qty":2}`, "lease": 30}

	var mu sync.Mutex
	byStatus := map[int]int{}
	var started idemResult
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			r := replicas[i%2].idem(t, begin)
			res := r.idem(t)
			mu.Lock()
			defer mu.Unlock()
			byStatus[r.Status]++
			switch r.Status {
			case http.StatusOK:
				assert.Equal(t, "started", res.Outcome)
				started = res
			case http.StatusConflict:
				assert.Equal(t, "in_progress", res.Outcome)
				assert.Equal(t, "in_progress", *r.Env.Code)
				assert.Positive(t, res.RetryAfter)
				assert.NotEmpty(t, r.Header.Get("Retry-After"))
			}
		})
	}
	wg.Wait()
	require.Equal(t, map[int]int{http.StatusOK: 1, http.StatusConflict: 99}, byStatus)
	require.Len(t, started.Token, 32)
	require.Positive(t, started.Fence)

	body := []byte("{\"order\":\"o-1\"}\x00\xff")
	r := replicas[1].idem(t, map[string]any{"action": "idem_complete", "key": "req-001", "namespace": "u1001", "token": started.Token,
		"answer": map[string]any{"status": 201, "headers": map[string]string{"Content-Type": "application/json", "Location": "/orders/o-1"}, "body_base64": base64.StdEncoding.EncodeToString(body)}})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)

	var first string
	for i := range 100 {
		wg.Go(func() {
			r := replicas[i%2].idem(t, begin)
			if !assert.Equal(t, http.StatusOK, r.Status, r.Raw) {
				return
			}
			res := r.idem(t)
			assert.Equal(t, "completed", res.Outcome)
			if assert.NotNil(t, res.Answer) {
				assert.Equal(t, 201, res.Answer.Status)
				assert.Equal(t, "/orders/o-1", res.Answer.Headers["Location"])
				got, err := base64.StdEncoding.DecodeString(res.Answer.BodyBase64)
				assert.NoError(t, err)
				assert.Equal(t, body, got)
			}
			mu.Lock()
			defer mu.Unlock()
			if first == "" {
				first = string(r.Env.Data)
			}
			assert.Equal(t, first, string(r.Env.Data), "every replay is the same answer")
		})
	}
	wg.Wait()
	// Another account's key of the same name is another record.
	other := replicas[0].lock(t, testKeyGlobex, `{"action":"idem_begin","key":"req-001","namespace":"u1001","body":"x"}`)
	require.Equal(t, http.StatusOK, other.Status, other.Raw)
	require.Equal(t, "started", other.idem(t).Outcome)
}

// TestIdemFingerprintMismatch: the same key with a changed quantity gets 422
// while in progress and after completion; nothing starts.
func TestIdemFingerprintMismatch(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServer(t)
	r := ts.idem(t, map[string]any{"action": "idem_begin", "key": "pay-7", "body": `{"qty":1}`})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	tok := r.idem(t).Token
	changed := map[string]any{"action": "idem_begin", "key": "pay-7", "body": `{"qty":2}`}
	for range 3 {
		r := ts.idem(t, changed)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, r.Raw)
		require.Equal(t, "fingerprint_mismatch", *r.Env.Code)
	}
	r = ts.idem(t, map[string]any{"action": "idem_complete", "key": "pay-7", "token": tok, "answer": map[string]any{"status": 200, "body": "charged once"}})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	r = ts.idem(t, changed)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, r.Raw)
	r = ts.idem(t, map[string]any{"action": "idem_get", "key": "pay-7"})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	got := r.idem(t)
	require.Equal(t, "COMPLETED", got.State)
	require.EqualValues(t, 1, got.Attempts, "no other attempt began")
}

// TestIdemExpiredLease: a begin after the lease ended without complete
// answers expired_in_progress with the earlier fence and a higher one.
func TestIdemExpiredLease(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServer(t)
	begin := map[string]any{"action": "idem_begin", "key": "job-1", "fingerprint": strings.Repeat("ab", 32), "lease": 1}
	r := ts.idem(t, begin)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	first := r.idem(t)
	var second idemResult
	require.Eventually(t, func() bool {
		r = ts.idem(t, begin)
		second = r.idem(t)
		return r.Status == http.StatusOK
	}, 5*time.Second, 50*time.Millisecond)
	require.Equal(t, "expired_in_progress", second.Outcome)
	require.Equal(t, first.Fence, second.PreviousFence)
	require.Greater(t, second.Fence, first.Fence)
	require.EqualValues(t, 2, second.Attempts)
	// The earlier attempt's complete is refused: 409 not_owner.
	r = ts.idem(t, map[string]any{"action": "idem_complete", "key": "job-1", "token": first.Token, "answer": map[string]any{"status": 200}})
	require.Equal(t, http.StatusConflict, r.Status, r.Raw)
	require.Equal(t, "not_owner", *r.Env.Code)
	r = ts.idem(t, map[string]any{"action": "idem_extend", "key": "job-1", "token": second.Token, "lease": 10})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	r = ts.idem(t, map[string]any{"action": "idem_abort", "key": "job-1", "token": second.Token})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	// The take-over's abort puts the first attempt back (it may have done
	// its work): the next begin is a take-over of it again, not a start.
	r = ts.idem(t, begin)
	third := r.idem(t)
	require.Equal(t, "expired_in_progress", third.Outcome, r.Raw)
	require.Equal(t, first.Fence, third.PreviousFence)
}

// TestIdemBadInput: every bad field is named with its limit, and nothing
// is written.
func TestIdemBadInput(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServer(t, idempotency.WithMaxAnswerBytes(1000))
	tok := strings.Repeat("0", 32)
	for _, tc := range []struct {
		body   string
		status int
		msg    string
	}{
		{`{"action":"idem_begin","body":"x"}`, 400, "key: required"},
		{`{"action":"idem_begin","key":"k"}`, 400, "fingerprint: send exactly one of"},
		{`{"action":"idem_begin","key":"k","fingerprint":"ABC"}`, 400, "fingerprint: must be 64 lowercase hex characters (a SHA-256), got 3 characters"},
		{`{"action":"idem_begin","key":"k","fingerprint":"` + strings.Repeat("AB", 32) + `"}`, 400, "fingerprint: must be 64 lowercase hex characters (a SHA-256); it has uppercase hex: send it in lowercase"},
		{`{"action":"idem_begin","key":"k","fingerprint":"` + strings.Repeat("zz", 32) + `"}`, 400, "fingerprint: must be 64 lowercase hex characters (a SHA-256); it has a character that is not lowercase hex (0-9, a-f)"},
		{`{"action":"idem_begin","key":"k","body":"x","retention":604801}`, 400, "retention: 604801 is above the maximum of 604800"},
		{`{"action":"idem_begin","key":"k","body":"x","lease":0}`, 400, "lease: 0 is below the minimum of 1"},
		{`{"action":"idem_begin","key":"k","body":"x","lease":1.5}`, 400, "lease: must be an integer number of seconds"},
		{`{"action":"idem_begin","key":"k","body":"x","lease":60,"retention":30}`, 400, "retention: 30 seconds must be at least twice the lease (60 seconds)"},
		// No retention sent: the lease is named, not a retention the client never sent.
		{`{"action":"idem_begin","key":"k","body":"x","lease":50000}`, 400, "lease: 50000 seconds needs a retention of at least twice it (100000 seconds), above the default retention of 86400 seconds"},
		{`{"action":"idem_begin","key":"k","body":"x","colour":"red"}`, 400, `request body: unknown field "colour"; the fields of idem_begin are action, key, namespace, fingerprint, body, body_base64, lease, retention`},
		{`{"action":"idem_complete","key":"k","token":"xyz","answer":{"status":200}}`, 400, "token: must be the 32 lowercase hex characters idem_begin returned, got 3 characters"},
		{`{"action":"idem_complete","key":"k","token":"wrongtoken0123456789abcdefabcdef","answer":{"status":200}}`, 400, "token: must be the 32 lowercase hex characters idem_begin returned; it has a character that is not lowercase hex (0-9, a-f)"},
		{`{"action":"idem_complete","key":"k","token":"` + tok + `","answer":"x"}`, 400, `field "answer" must be an object, got a string`},
		{`{"action":"idem_complete","key":"k","token":"` + tok + `","answer":{"status":200,"headers":[]}}`, 400, `field "answer.headers" must be an object, got an array`},
		{`{"action":"idem_complete","key":"k","token":"` + tok + `","answer":{"status":200,"headers":{"x-id":"1","X-Id":"2"}}}`, 400, `answer.headers: "X-Id" and "x-id" name the same header (names are case-insensitive); send it once`},
		// Which part is wrong is named (a black-box pass got "not a valid
		// header name and value" for a value with a CR LF).
		{`{"action":"idem_complete","key":"k","token":"` + tok + `","answer":{"status":200,"headers":{"X-A":"1\r\nX-B: 2"}}}`, 400, `answer.headers: the value of "X-A" holds a CR or LF`},
		{`{"action":"idem_complete","key":"k","token":"` + tok + `","answer":{"status":200,"headers":{"X A":"1"}}}`, 400, `answer.headers: "X A" is not a valid header name`},
		// Read as a strict reader reads them (a black-box pass: "Key" set
		// the key, and of two "key" members the second named the record).
		{`{"action":"idem_begin","key":"k","body":"x","Key":"other"}`, 400, `body: unknown field "Key": names are case-sensitive ("Key" is not "key")`},
		{`{"action":"idem_begin","key":"k","key":"k2","body":"x"}`, 400, `body: field "key" appears more than once`},
		{`{"action":"idem_complete","key":"k","token":"` + tok + `","answer":{"status":200,"Status":201}}`, 400, `body: unknown field "answer.Status": names are case-sensitive`},
		{`{"action":"idem_complete","key":"k","token":"` + tok + `","answer":{"status":200,"body":"a","body":"b"}}`, 400, `body: field "answer.body" appears more than once`},
		{`{"action":"idem_complete","key":"k","token":"` + tok + `","answer":{"status":200,"headers":{"X":"a","X":"b"}}}`, 400, `body: field "answer.headers.X" appears more than once`},
		{`{"action":"idem_complete","key":"k","token":"` + tok + `","answer":{"status":200,"headers":{"H0":"v","H1":"v","H0":"v"}}}`, 400, `body: field "answer.headers.H0" appears more than once`},
		{`{"action":"idem_bogus","key":"k"}`, 400, `is not one of acquire, release, extend, status (and, where idempotency records are on, idem_begin, idem_complete, idem_abort, idem_get, idem_extend)`},
		{`{"action":"idem_complete","key":"k","answer":{"status":200}}`, 400, "token: required for idem_complete"},
		{`{"action":"idem_complete","key":"k","token":"` + tok + `"}`, 400, "answer: required for idem_complete"},
		{`{"action":"idem_complete","key":"k","token":"` + tok + `","answer":{"status":99}}`, 400, "answer.status: 99 is outside 100 to 599 (an HTTP status code)"},
		{`{"action":"idem_complete","key":"k","token":"` + tok + `","answer":{"status":600}}`, 400, "answer.status: 600 is outside 100 to 599"},
		{`{"action":"idem_complete","key":"k","token":"` + tok + `","answer":{"headers":{}}}`, 400, "answer.status: required, an HTTP status code from 100 to 599"},
		{`{"action":"idem_abort","key":"k","token":"` + tok + `","retryable":false}`, 400, "answer: required for idem_abort with retryable false"},
		// A field the action does not read is refused, not dropped.
		{`{"action":"idem_abort","key":"k","token":"` + tok + `","retryable":true,"answer":{"status":500}}`, 400, "answer: only with retryable false"},
		{`{"action":"idem_abort","key":"k","token":"` + tok + `","answer":{"status":500}}`, 400, "answer: only with retryable false"},
		{`{"action":"idem_begin","key":"k","body":"x","token":"` + tok + `"}`, 400, "token: not a field of idem_begin, which reads action, key, namespace, fingerprint, body, body_base64, lease, retention"},
		{`{"action":"idem_get","key":"k","lease":30}`, 400, "lease: not a field of idem_get, which reads action, key, namespace"},
		// Data after the object is named as such for every action, not as
		// a lock request's unknown field.
		{`{"action":"idem_begin","key":"t1","body":"x"} {}`, 400, "unexpected data after the JSON object at byte"},
		{`{"action":"idem_extend","key":"t1","token":"` + tok + `","lease":5}{}`, 400, "unexpected data after the JSON object at byte"},
		{`{"action":"idem_complete","key":"t1","token":"` + tok + `","answer":{"status":200}} x`, 400, "unexpected data after the JSON object at byte"},
		{`{"action":"idem_complete","key":"k","token":"` + tok + `","lease":30,"answer":{"status":200}}`, 400, "lease: not a field of idem_complete"},
		{`{"action":"idem_extend","key":"k","token":"` + tok + `","retryable":false}`, 400, "retryable: not a field of idem_extend"},
		{`{"action":"idem_complete","key":"k","token":"` + tok + `","answer":{"status":200,"body":"` + strings.Repeat("x", 1001) + `"}}`, 413, "1001 bytes (body and headers) is above the limit of 1000 bytes"},
	} {
		r := ts.lock(t, testKeyAcme, tc.body)
		assert.Equal(t, tc.status, r.Status, tc.body)
		assert.Contains(t, r.Env.Msg, tc.msg, tc.body)
	}
	r := ts.idem(t, map[string]any{"action": "idem_get", "key": "k"})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	require.Equal(t, "ABSENT", r.idem(t).State)
	// A lock action keeps the lock body limit (4096 here).
	big := fmt.Sprintf(`{"action":"acquire","key":"%s"}`, strings.Repeat("k", 5000))
	r = ts.lock(t, testKeyAcme, big)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, r.Raw)
}

// TestIdemDeepNesting: an idempotency body nested deeper than
// encoding/json's 10,000 levels, larger than the lock requests' body limit
// but within the idempotency actions', is a 400 saying so — not a 413
// quoting the lock requests' limit, which it got when the action could not
// be read from it (a README-only break-it pass found it).
func TestIdemDeepNesting(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServer(t)
	tok := strings.Repeat("0", 32)
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, body := range []string{
		`{"action":"idem_complete","key":"k","token":"` + tok + `","answer":{"status":200,"headers":{"x":` + deep(10000) + `}}}`,
		`{"action":"idem_begin","key":"k","body":"x","lease":` + deep(100000) + `}`,
		`{"lease":` + deep(100000) + `,"key":"k","body":"x","action":"idem_begin"}`,
	} {
		r := ts.lock(t, testKeyAcme, body)
		assert.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
		assert.Contains(t, r.Env.Msg, "nested deeper than 10000 levels", r.Raw)
	}
	// Nested less deep, the field is named as before.
	r := ts.lock(t, testKeyAcme, `{"action":"idem_complete","key":"k","token":"`+tok+`","answer":{"status":200,"headers":{"x":`+deep(9000)+`}}}`)
	assert.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
	assert.Contains(t, r.Env.Msg, `field "answer.headers"`, r.Raw)
	// A lock request past its body limit is still a 413.
	r = ts.lock(t, testKeyAcme, `{"action":"acquire","key":"k","ttl":`+deep(10000)+`}`)
	assert.Equal(t, http.StatusRequestEntityTooLarge, r.Status, r.Raw)
}

// TestIdemAdminListing: GET /admin/idempotency lists an account's records
// (of one namespace when asked) once each, across pages, without tokens.
func TestIdemAdminListing(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServerWith(t, func(o *Options) { o.AdminListen = "127.0.0.1:0" })
	admin := adminURL(t, ts)
	want := map[string]string{}
	for i := range 5 {
		ns := "u1"
		if i%2 == 1 {
			ns = "u2:x" // ':' in a namespace: the encoding keeps it apart
		}
		key := fmt.Sprintf("req-%d", i)
		r := ts.idem(t, map[string]any{"action": "idem_begin", "key": key, "namespace": ns, "body": key})
		require.Equal(t, http.StatusOK, r.Status, r.Raw)
		want[ns+"/"+key] = "IN_PROGRESS"
		if i < 2 {
			r = ts.idem(t, map[string]any{"action": "idem_complete", "key": key, "namespace": ns, "token": r.idem(t).Token, "answer": map[string]any{"status": 200, "body": "done"}})
			require.Equal(t, http.StatusOK, r.Status, r.Raw)
			want[ns+"/"+key] = "COMPLETED"
		}
	}
	list := func(query string) map[string]string {
		got := map[string]string{}
		cursor := ""
		for range 1000 {
			st, body, _ := ts.raw(t, http.MethodGet, admin+"/admin/idempotency?"+query+"&limit=2&cursor="+cursor, nil)
			require.Equal(t, http.StatusOK, st, body)
			require.NotContains(t, body, "token")
			var page recordList
			require.NoError(t, json.Unmarshal([]byte(body), &page))
			for _, r := range page.Records {
				k := r.Namespace + "/" + r.Key
				_, dup := got[k]
				require.False(t, dup, "%s listed twice", k)
				got[k] = r.State
			}
			if page.NextCursor == "" {
				return got
			}
			cursor = page.NextCursor
		}
		t.Fatal("the listing did not end")
		return nil
	}
	require.Equal(t, want, list("account=acme"))
	u1 := list("account=acme&namespace=u1")
	require.Len(t, u1, 3)
	require.Empty(t, list("account=globex"))
	st, body, _ := ts.raw(t, http.MethodGet, admin+"/admin/idempotency?account=acme&cursor=zz", nil)
	require.Equal(t, http.StatusBadRequest, st, body)
	require.Contains(t, body, `"msg":"cursor: not a cursor of this listing`, "the message starts with the parameter, as /admin/locks's")
	// The listings' gate is the lock listing's: with the account's
	// listings all running, one more is refused, before any master is read.
	for range MaxAccountListings {
		ok, _ := ts.Server.listings.enter("acme")
		require.True(t, ok)
	}
	st, body, hdr := ts.raw(t, http.MethodGet, admin+"/admin/idempotency?account=acme", nil)
	require.Equal(t, http.StatusTooManyRequests, st, body)
	require.Contains(t, body, "too_many_listings")
	require.Contains(t, body, "at most "+listings(MaxAccountListings)+" (GET /admin/locks")
	require.Equal(t, "1", hdr.Get("Retry-After"))
	for range MaxAccountListings {
		ts.Server.listings.leave("acme")
	}
	st, body, _ = ts.raw(t, http.MethodGet, admin+"/admin/idempotency?account=acme", nil)
	require.Equal(t, http.StatusOK, st, body)
}

// TestIdemAbortRefusedSaysSo: an abort that deleted nothing is 409
// not_owner without aborted:true: another token, a token after its
// complete, a key never begun.
func TestIdemAbortRefusedSaysSo(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServer(t)
	r := ts.idem(t, map[string]any{"action": "idem_begin", "key": "k-ab2", "body": "x"})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	tok := r.idem(t).Token
	other := strings.Repeat("f", 32)
	for _, key := range []string{"k-ab2", "never-begun"} {
		r = ts.idem(t, map[string]any{"action": "idem_abort", "key": key, "token": other})
		require.Equal(t, http.StatusConflict, r.Status, r.Raw)
		require.Equal(t, "not_owner", *r.Env.Code)
		require.NotContains(t, r.Raw, `"aborted"`)
	}
	r = ts.idem(t, map[string]any{"action": "idem_complete", "key": "k-ab2", "token": tok, "answer": map[string]any{"status": 201}})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	r = ts.idem(t, map[string]any{"action": "idem_abort", "key": "k-ab2", "token": tok})
	require.Equal(t, http.StatusConflict, r.Status, r.Raw)
	require.NotContains(t, r.Raw, `"aborted"`)
	r = ts.idem(t, map[string]any{"action": "idem_get", "key": "k-ab2"})
	require.Equal(t, "COMPLETED", r.idem(t).State)
}

// TestIdemSecondCompleteRefused: a second complete of one attempt with
// another answer is 409 already_completed and the first answer stays; the
// same complete again (a retry) is 200.
func TestIdemSecondCompleteRefused(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServer(t)
	r := ts.idem(t, map[string]any{"action": "idem_begin", "key": "k-c2", "body": "x"})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	tok := r.idem(t).Token
	first := map[string]any{"action": "idem_complete", "key": "k-c2", "token": tok, "answer": map[string]any{"status": 201, "body": "one"}}
	r = ts.idem(t, first)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	r = ts.idem(t, first)
	require.Equal(t, http.StatusOK, r.Status, "the same complete again is a retry: %s", r.Raw)
	for _, second := range []map[string]any{
		{"action": "idem_complete", "key": "k-c2", "token": tok, "answer": map[string]any{"status": 500, "body": "two"}},
		{"action": "idem_abort", "key": "k-c2", "token": tok, "retryable": false, "answer": map[string]any{"status": 400}},
	} {
		r = ts.idem(t, second)
		require.Equal(t, http.StatusConflict, r.Status, r.Raw)
		require.Equal(t, "already_completed", *r.Env.Code)
		require.NotContains(t, r.Raw, `"completed":true`)
	}
	r = ts.idem(t, map[string]any{"action": "idem_begin", "key": "k-c2", "body": "x"})
	ans := r.idem(t).Answer
	require.NotNil(t, ans)
	require.Equal(t, 201, ans.Status)
	require.Equal(t, base64.StdEncoding.EncodeToString([]byte("one")), ans.BodyBase64)
}

// TestIdemRetentionOutlivesLease: a retention that leaves no take-over
// window after the lease is refused, naming both fields.
func TestIdemRetentionOutlivesLease(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServer(t)
	for _, body := range []string{
		`{"action":"idem_begin","key":"ret-1","body":"x","lease":2,"retention":2}`,
		`{"action":"idem_begin","key":"ret-1","body":"x","lease":2,"retention":3}`,
	} {
		r := ts.lock(t, testKeyAcme, body)
		require.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
		require.Contains(t, r.Env.Msg, "retention: ", body)
		require.Contains(t, r.Env.Msg, "twice the lease (2 seconds)", body)
	}
	r := ts.lock(t, testKeyAcme, `{"action":"idem_begin","key":"ret-1","body":"x","lease":1,"retention":2}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	first := r.idem(t)
	time.Sleep(1100 * time.Millisecond)
	r = ts.lock(t, testKeyAcme, `{"action":"idem_begin","key":"ret-1","body":"x","lease":1,"retention":2}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	second := r.idem(t)
	require.Equal(t, "expired_in_progress", second.Outcome, "a retry after the lease sees the earlier attempt")
	require.Equal(t, first.Fence, second.PreviousFence)
}

// TestIdemAnswerEscapedUnderCap: an answer under the cap is accepted however
// its JSON escapes it (every byte a \" or a \u escape).
func TestIdemAnswerEscapedUnderCap(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServer(t)
	for i, body := range []string{strings.Repeat(`\"`, 60<<10), strings.Repeat(`\u0001`, 60<<10), strings.Repeat(`\u4e2d`, 18000)} {
		key := fmt.Sprintf("esc-%d", i)
		r := ts.idem(t, map[string]any{"action": "idem_begin", "key": key, "body": "x"})
		require.Equal(t, http.StatusOK, r.Status, r.Raw)
		tok := r.idem(t).Token
		raw := `{"action":"idem_complete","key":"` + key + `","token":"` + tok + `","answer":{"status":200,"body":"` + body + `"}}`
		r = ts.lock(t, testKeyAcme, raw)
		require.Equal(t, http.StatusOK, r.Status, "%d bytes of JSON: %.300s", len(raw), r.Raw)
	}
}

// TestIdemSecondsStrict: lease and retention are integers written as
// integers; strings and null are refused like the lock path's ttl.
func TestIdemSecondsStrict(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServer(t)
	for _, tc := range []struct{ body, msg string }{
		{`{"action":"idem_begin","key":"s","body":"x","lease":"5"}`, "lease: must be an integer number of seconds, got a string"},
		{`{"action":"idem_begin","key":"s","body":"x","retention":"10"}`, "retention: must be an integer number of seconds, got a string"},
		{`{"action":"idem_begin","key":"s","body":"x","lease":null}`, "lease: must be an integer number of seconds, got null"},
		{`{"action":"idem_begin","key":"s","body":"x","lease":true}`, "lease: must be an integer number of seconds, got true"},
		{`{"action":"idem_extend","key":"s","token":"` + strings.Repeat("0", 32) + `","lease":"5"}`, "lease: must be an integer number of seconds, got a string"},
	} {
		r := ts.lock(t, testKeyAcme, tc.body)
		require.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
		require.Contains(t, r.Env.Msg, tc.msg, tc.body)
	}
	r := ts.idem(t, map[string]any{"action": "idem_get", "key": "s"})
	require.Equal(t, "ABSENT", r.idem(t).State)
}

// TestIdemReadyzShowsRecordQuorum: /readyz shows the records' own quorum,
// each master seen by a record action and counting for records.
func TestIdemReadyzShowsRecordQuorum(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServer(t)
	r := ts.do(t, http.MethodGet, "/readyz", "", nil)
	var b readyBody
	require.NoError(t, json.Unmarshal([]byte(r.Raw), &b), r.Raw)
	require.NotNil(t, b.Idempotency, r.Raw)
	require.Len(t, b.Idempotency.Masters, 5)
	r = ts.idem(t, map[string]any{"action": "idem_get", "key": "ready-1"})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	require.Eventually(t, func() bool {
		r = ts.do(t, http.MethodGet, "/readyz", "", nil)
		b = readyBody{}
		require.NoError(t, json.Unmarshal([]byte(r.Raw), &b), r.Raw)
		seen := 0
		for _, m := range b.Idempotency.Masters {
			if m.Seen {
				seen++
			}
		}
		return seen >= 3 // a read stops at a quorum
	}, 5*time.Second, 50*time.Millisecond)
	require.Equal(t, readyIdem{Needed: 3, Counting: 5, Available: true, Masters: b.Idempotency.Masters}, *b.Idempotency)
	for _, m := range b.Idempotency.Masters {
		require.True(t, m.Counts)
		require.Zero(t, m.CountsAgainInS)
	}
}

// TestIdemLeasesCountAgainstMaxLocks: a processing lease holds a slot of
// the account's max_locks as a lock does: a begin that would take one
// past the limit is refused 429 too_many_locks (no lease written), while a
// completed record still replays and another fingerprint is still refused
// 422; complete and abort give the slot back.
func TestIdemLeasesCountAgainstMaxLocks(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServerLimited(t, limits.Limits{MaxLocks: 2})
	begin := func(key, body string) *response {
		return ts.idem(t, map[string]any{"action": "idem_begin", "key": key, "body": body, "lease": 30})
	}
	started := func(key string) idemResult {
		t.Helper()
		r := begin(key, "b-"+key)
		require.Equal(t, http.StatusOK, r.Status, r.Raw)
		res := r.idem(t)
		require.Equal(t, "started", res.Outcome, r.Raw)
		return res
	}
	refused := func(key string) {
		t.Helper()
		r := begin(key, "b-"+key)
		require.Equal(t, http.StatusTooManyRequests, r.Status, r.Raw)
		assert.Equal(t, "too_many_locks", r.code())
		assert.Contains(t, r.Env.Msg, "holds 2 and its limit (max_locks) is 2")
		assert.Empty(t, keysOn(t, d.servers, d.prefix+"*"+key+"*"), "a refused begin writes no lease and no record")
	}

	k1 := started("k1")
	k2 := started("k2")
	refused("k3")

	r := ts.idem(t, map[string]any{"action": "idem_complete", "key": "k1", "token": k1.Token,
		"answer": map[string]any{"status": 200, "body_base64": base64.StdEncoding.EncodeToString([]byte("one"))}})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	started("k3")
	refused("k4")

	// At the limit, a completed record still replays, and another
	// fingerprint is still told apart.
	r = begin("k1", "b-k1")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	require.Equal(t, "completed", r.idem(t).Outcome, r.Raw)
	r = begin("k1", "another body")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, r.Raw)
	// A retry of an attempt in progress takes no lease: 409 in_progress,
	// as below the limit (found by a helper: it was 429).
	r = begin("k2", "b-k2")
	require.Equal(t, http.StatusConflict, r.Status, r.Raw)
	require.Equal(t, "in_progress", r.idem(t).Outcome, r.Raw)
	assert.NotEmpty(t, r.Header.Get("Retry-After"), r.Raw)

	r = ts.idem(t, map[string]any{"action": "idem_extend", "key": "k2", "token": k2.Token, "lease": 30})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	r = ts.idem(t, map[string]any{"action": "idem_abort", "key": "k2", "token": k2.Token})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	started("k4")
	refused("k5")
}

// TestIdemExtendPastRetentionRefused: an idem_extend whose lease the max
// retention cannot cover twice is refused 400 naming lease and retention;
// the lease is unchanged and a smaller extend still works.
func TestIdemExtendPastRetentionRefused(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServer(t, idempotency.WithMaxRetention(time.Minute))
	r := ts.idem(t, map[string]any{"action": "idem_begin", "key": "x1", "body": "b", "lease": 10, "retention": 60})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	tok := r.idem(t).Token
	r = ts.idem(t, map[string]any{"action": "idem_extend", "key": "x1", "token": tok, "lease": 31})
	require.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
	assert.Equal(t, "lease: 31 seconds: the record is kept twice the lease from now, above the maximum retention of 60 seconds (idempotency_max_retention): the lease can be at most 30", r.Env.Msg)
	r = ts.idem(t, map[string]any{"action": "idem_extend", "key": "x1", "token": tok, "lease": 30})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Greater(t, r.idem(t).ValidityMS, int64(20000))
}

// TestIdemQuorumMessageSaysSooner: with two masters repaired after a data
// loss (out for records for the max retention) and a third down, a record
// action's 503 gives the retention's end as the known return but says a
// quorum may come back sooner, with the master that is down, and its
// Retry-After is the outage backoff, not days.
func TestIdemQuorumMessageSaysSooner(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServer(t)
	ctx := context.Background()
	for _, i := range []int{0, 1} {
		r := redis.NewClient(&redis.Options{Addr: d.servers[i].Addr()})
		require.NoError(t, r.Del(ctx, d.prefix+"marker", d.prefix+"marker:horizon", d.prefix+"fence").Err())
		_ = r.Close()
	}
	require.Eventually(t, func() bool {
		ts.idem(t, map[string]any{"action": "idem_get", "key": "sooner"}) // a vote finds the losses
		r := ts.do(t, http.MethodGet, "/readyz", "", nil)
		var b readyBody
		require.NoError(t, json.Unmarshal([]byte(r.Raw), &b), r.Raw)
		// Repaired, and counting for locks again (their quarantine, the
		// lease horizon of the others, is short here): out for records only.
		return b.Idempotency.Masters[0].RepairedAtMS > 0 && b.Idempotency.Masters[1].RepairedAtMS > 0 &&
			b.Masters[0].Counts && b.Masters[1].Counts
	}, 20*time.Second, 50*time.Millisecond, "masters 0 and 1 repaired")
	d.kill(t, 2)
	r := ts.idem(t, map[string]any{"action": "idem_begin", "key": "sooner", "body": "x"})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Raw)
	require.Contains(t, r.Env.Msg, "a quorum counts for records again in 16")
	require.Contains(t, r.Env.Msg, "or sooner when the 1 master(s) down or not answering come back")
	retry, err := strconv.Atoi(r.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.LessOrEqual(t, retry, 60, "the outage backoff, not the retention")
}

// TestIdemAttemptsEndPastTheQuota: once an account's quota (or its rate
// bucket) is spent, idem_begin and idem_get are refused 429, but
// idem_complete, idem_abort and idem_extend of a real attempt are not, as
// a lock's release and extend are not: a refused idem_complete lost the
// answer of work that had run (a break-it pass saw the gateway run a
// request again after the lease), a refused idem_abort kept the lease and
// its max_locks slot, a refused idem_extend let the lease end under a
// request still running (a liveness pass: the account's other calls spent
// its quota). With a forged token they are refused as any call: an account
// past its limits cannot send answers to every master for free.
func TestIdemAttemptsEndPastTheQuota(t *testing.T) {
	for _, tc := range []struct {
		name string
		lim  limits.Limits
		code string
	}{
		{"quota", limits.Limits{QuotaCalls: 3, QuotaWindow: time.Hour}, "quota_exhausted"},
		{"rate", limits.Limits{Rate: 0.001, Burst: 3}, "rate_limited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			awayFromWindowEnd(t, time.Hour)
			d := newDeployment(t)
			ts := d.idemServerLimited(t, tc.lim)
			var attempts []idemResult
			for _, k := range []string{"a", "b", "c"} {
				r := ts.idem(t, map[string]any{"action": "idem_begin", "key": k, "body": "b-" + k, "lease": 30})
				require.Equal(t, http.StatusOK, r.Status, r.Raw)
				attempts = append(attempts, r.idem(t))
			}
			forged := strings.Repeat("ab", 16)
			for _, body := range []map[string]any{
				{"action": "idem_begin", "key": "d", "body": "b-d", "lease": 30},
				{"action": "idem_get", "key": "a"},
				{"action": "idem_extend", "key": "b", "token": forged, "lease": 30},
				{"action": "idem_complete", "key": "a", "token": forged, "answer": map[string]any{"status": 201, "body": strings.Repeat("x", 1000)}},
				{"action": "idem_abort", "key": "c", "token": forged},
			} {
				r := ts.idem(t, body)
				require.Equal(t, http.StatusTooManyRequests, r.Status, "%v: %s", body, r.Raw)
				assert.Equal(t, tc.code, r.code(), r.Raw)
			}
			assert.Empty(t, keysOn(t, d.servers, d.prefix+"idem:*:d"), "the refused begin wrote nothing")

			r := ts.idem(t, map[string]any{"action": "idem_extend", "key": "b", "token": attempts[1].Token, "lease": 30})
			require.Equal(t, http.StatusOK, r.Status, "the attempt's extend: %s", r.Raw)
			r = ts.idem(t, map[string]any{"action": "idem_complete", "key": "a", "token": attempts[0].Token,
				"answer": map[string]any{"status": 201, "body": "done"}})
			require.Equal(t, http.StatusOK, r.Status, r.Raw)
			r = ts.idem(t, map[string]any{"action": "idem_abort", "key": "c", "token": attempts[2].Token})
			require.Equal(t, http.StatusOK, r.Status, r.Raw)
			// The same complete again (a retry whose answer was lost) is
			// still the attempt's: not refused.
			r = ts.idem(t, map[string]any{"action": "idem_complete", "key": "a", "token": attempts[0].Token,
				"answer": map[string]any{"status": 201, "body": "done"}})
			require.Equal(t, http.StatusOK, r.Status, r.Raw)

			// The answer was stored: a replica of the same account without
			// limits replays it.
			r = d.idemServer(t).idem(t, map[string]any{"action": "idem_begin", "key": "a", "body": "b-a", "lease": 30})
			require.Equal(t, http.StatusOK, r.Status, r.Raw)
			res := r.idem(t)
			require.Equal(t, "completed", res.Outcome, r.Raw)
			require.NotNil(t, res.Answer, r.Raw)
			assert.Equal(t, 201, res.Answer.Status)
			assert.Equal(t, base64.StdEncoding.EncodeToString([]byte("done")), res.Answer.BodyBase64)
		})
	}
}

// TestIdemTextFieldsMustBeUTF8: a key, namespace, body or answer string
// that is invalid UTF-8 or holds a lone surrogate escape is refused 400
// naming its field, as the lock actions refuse such a key. encoding/json
// turned both into U+FFFD, so "z\xff" and "z\xfe" named one record and
// "pay \xff" and "pay \xfe" gave one fingerprint: a break-it pass had a
// different request answered with another's stored answer.
func TestIdemTextFieldsMustBeUTF8(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServer(t)
	tok := strings.Repeat("0", 32)
	for _, tc := range []struct{ body, field string }{
		{"{\"action\":\"idem_begin\",\"key\":\"z\xff\",\"body\":\"x\"}", "key"},
		{`{"action":"idem_begin","key":"z\ud800","body":"x"}`, "key"},
		{`{"action":"idem_begin","key":"z\udc00x","body":"x"}`, "key"},
		{"{\"action\":\"idem_begin\",\"key\":\"k\",\"namespace\":\"u\xe9\",\"body\":\"x\"}", "namespace"},
		{"{\"action\":\"idem_begin\",\"key\":\"k\",\"body\":\"pay \xff\"}", "body"},
		{`{"action":"idem_begin","key":"k","body":"pay \ud800\u0041"}`, "body"},
		{"{\"action\":\"idem_complete\",\"key\":\"k\",\"token\":\"" + tok + "\",\"answer\":{\"status\":200,\"body\":\"\xc3\"}}", "answer.body"},
		{"{\"action\":\"idem_complete\",\"key\":\"k\",\"token\":\"" + tok + "\",\"answer\":{\"status\":200,\"headers\":{\"X-Id\":\"\xff\"}}}", "answer.headers.X-Id"},
		{"{\"action\":\"idem_begin\",\"key\":\"k\",\"body\":\"x\",\"\xff\":1}", "request body: a field name"},
	} {
		r := ts.lock(t, testKeyAcme, tc.body)
		assert.Equal(t, http.StatusBadRequest, r.Status, "%q: %s", tc.body, r.Raw)
		assert.Contains(t, r.Env.Msg, tc.field+": must be valid UTF-8", "%q", tc.body)
	}
	assert.Empty(t, keysOn(t, d.servers, d.prefix+"idem:*"), "a refused body writes nothing")

	// A surrogate pair is text: its key works, and is another key than
	// the replacement character's.
	r := ts.lock(t, testKeyAcme, `{"action":"idem_begin","key":"z\ud83d\ude00","body":"x"}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, "started", r.idem(t).Outcome)
	r = ts.lock(t, testKeyAcme, `{"action":"idem_begin","key":"z\ufffd","body":"x"}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, "started", r.idem(t).Outcome, "U+FFFD itself is a key of its own")
}

// TestIdemDefaultLeaseFitsMaxTTL: without lease, idem_begin and
// idem_extend take the default lease (30 s) lowered to max_ttl, as an
// acquire's default ttl is. With max_ttl 10 every begin without a lease
// was refused 400 "ttl 30s is above the max TTL 10s" (a break-it pass).
func TestIdemDefaultLeaseFitsMaxTTL(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServerWith(t, func(o *Options) { o.MaxTTL = 10 * time.Second })
	r := ts.idem(t, map[string]any{"action": "idem_begin", "key": "short", "body": "x"})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	res := r.idem(t)
	require.Equal(t, "started", res.Outcome, r.Raw)
	assert.LessOrEqual(t, res.ValidityMS, int64(10_000))
	assert.Greater(t, res.ValidityMS, int64(8_000), "the lease is max_ttl")
	r = ts.idem(t, map[string]any{"action": "idem_extend", "key": "short", "token": res.Token})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	r = ts.idem(t, map[string]any{"action": "idem_begin", "key": "long", "body": "x", "lease": 11})
	require.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
	assert.Contains(t, r.Env.Msg, "lease: 11 is above the maximum of 10")
}

// TestIdemRecordsBudget: an account's idempotency records count against
// its MaxIdempotencyBytes on the masters: once its completed records take
// it up, an idem_begin of a new record is refused 429 records_budget_full
// with Retry-After, writing no record and no lease, while a completed
// record still replays and another account still locks. The negative
// control: the same account without the cap writes every record (a
// black-box pass filled the masters that way from an account held to two
// locks, until every other account got 503 OOM).
func TestIdemRecordsBudget(t *testing.T) {
	body := base64.StdEncoding.EncodeToString(make([]byte, 4000))
	fill := func(t *testing.T, maxBytes int64) (*testServer, *deployment, []string) {
		d := newDeployment(t)
		ts := d.idemServerWith(t, func(o *Options) {
			for i := range o.APIKeys {
				if o.APIKeys[i].Account == "acme" {
					o.APIKeys[i].MaxIdempotencyBytes = maxBytes
				}
			}
		})
		var refused []string
		for i := range 8 {
			key := fmt.Sprintf("rec%d", i)
			r := ts.idem(t, map[string]any{"action": "idem_begin", "key": key, "body": key, "lease": 30, "retention": 3600})
			if r.Status == http.StatusTooManyRequests {
				assert.Equal(t, "records_budget_full", r.code(), r.Raw)
				assert.Contains(t, r.Env.Msg, "max_idempotency_bytes (20000 bytes per master)", r.Raw)
				ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
				require.NoError(t, err, r.Raw)
				assert.Equal(t, int(maxRetryAfter/time.Second), ra, "until the oldest record ends (an hour), at most maxRetryAfter")
				assert.Regexp(t, `the oldest in (1h0m0s|59m[0-9]+s)`, r.Env.Msg, "an hour's retention, begun moments ago")
				assert.Empty(t, keysOn(t, d.servers, d.prefix+"*"+key+"*"), "a refused begin writes no lease and no record")
				refused = append(refused, key)
				continue
			}
			require.Equal(t, http.StatusOK, r.Status, r.Raw)
			res := r.idem(t)
			require.Equal(t, "started", res.Outcome, r.Raw)
			r = ts.idem(t, map[string]any{"action": "idem_complete", "key": key, "token": res.Token,
				"answer": map[string]any{"status": 200, "body_base64": body}})
			require.Equal(t, http.StatusOK, r.Status, r.Raw)
		}
		return ts, d, refused
	}
	ts, _, refused := fill(t, 20_000)
	assert.NotEmpty(t, refused, "20 KB hold only a few records of 4 KB answers")
	assert.Less(t, len(refused), 8, "the first records fit")
	r := ts.idem(t, map[string]any{"action": "idem_begin", "key": "rec0", "body": "rec0", "lease": 30, "retention": 3600})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, "completed", r.idem(t).Outcome, "a kept record replays at the cap")
	assert.Equal(t, true, okData(t, ts.lock(t, testKeyGlobex, `{"key":"other-account"}`))["acquired"], "another account still locks")

	_, _, refused = fill(t, 0)
	assert.Empty(t, refused, "negative control: no cap, every record written")
}
