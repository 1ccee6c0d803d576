package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const goodToken = "0123456789abcdef0123456789abcdef"

// badInput is one refused request: what is sent and what must come back.
type badInput struct {
	name   string
	method string            // default POST
	path   string            // default /v1/lock
	header map[string]string // replaces the default X-API-Key and Content-Type
	body   string
	status int
	code   string
	msg    string // a substring of msg
}

func badInputs() []badInput {
	long := strings.Repeat("k", maxKeyBytes+1)
	return []badInput{
		// key
		{name: "key missing", body: `{"action":"acquire"}`, msg: "key: required, a string of 1 to 512 bytes"},
		{name: "key null", body: `{"key":null}`, msg: "key: must be a string, got null"},
		{name: "key empty", body: `{"key":""}`, msg: "key: must not be empty; send 1 to 512 bytes"},
		{name: "key oversized", body: `{"key":"` + long + `"}`, msg: "key: 513 bytes is above the maximum of 512 bytes"},
		{name: "key oversized by escapes", body: `{"key":"` + strings.Repeat(`\u00e9`, 257) + `"}`, msg: "key: 514 bytes is above the maximum of 512 bytes"},
		{name: "key newline", body: `{"key":"a\nb"}`, msg: "key: control character U+000A at byte 1 is not allowed"},
		{name: "key NUL", body: `{"key":"a\u0000"}`, msg: "key: control character U+0000 at byte 1"},
		{name: "key DEL", body: "{\"key\":\"a\x7f\"}", msg: "key: control character U+007F"},
		{name: "key C1", body: `{"key":"x\u0085"}`, msg: "key: control character U+0085 at byte 1"},
		{name: "key raw tab", body: "{\"key\":\"a\tb\"}", msg: "body: malformed JSON at byte 9: invalid character '\\t' in string (expecting non-control character)"},
		{name: "key invalid UTF-8", body: "{\"key\":\"a\xffb\"}", msg: "key: must be valid UTF-8"},
		{name: "key lone surrogate", body: `{"key":"a\ud800"}`, msg: "key: must be valid UTF-8"},
		{name: "key number", body: `{"key":42}`, msg: "key: must be a string, got a number"},
		{name: "key object", body: `{"key":{"a":1}}`, msg: "key: must be a string, got an object"},
		{name: "key array", body: `{"key":["a"]}`, msg: "key: must be a string, got an array"},
		// namespace
		{name: "namespace oversized", body: `{"key":"a","namespace":"` + strings.Repeat("n", 129) + `"}`, msg: "namespace: 129 bytes is above the maximum of 128 bytes"},
		{name: "namespace control", body: `{"key":"a","namespace":"n\r"}`, msg: "namespace: control character U+000D at byte 1"},
		{name: "namespace bool", body: `{"key":"a","namespace":true}`, msg: "namespace: must be a string, got true"},
		{name: "namespace null", body: `{"key":"a","namespace":null}`, msg: "namespace: must be a string, got null"},
		// action
		{name: "action unknown", body: `{"key":"a","action":"foo"}`, msg: `action: "foo" is not one of acquire, release, extend, status`},
		{name: "action wrong case", body: `{"key":"a","action":"ACQUIRE"}`, msg: `action: "ACQUIRE" is not one of`},
		{name: "action long is cut", body: `{"key":"a","action":"` + strings.Repeat("z", 100) + `"}`, msg: `action: "` + strings.Repeat("z", 32) + `"… is not one of`},
		{name: "action empty", body: `{"key":"a","action":""}`, msg: `action: "" is not one of acquire, release, extend, status`},
		{name: "action empty with ttl", body: `{"action":"","key":"k","ttl":30}`, msg: `action: "" is not one of acquire, release, extend, status`},
		{name: "action number", body: `{"key":"a","action":1}`, msg: "action: must be a string, got a number"},
		{name: "action null", body: `{"key":"a","action":null}`, msg: "action: must be a string, got null"},
		{name: "action null after ttl", body: `{"ttl":30,"action":null,"key":"a"}`, msg: "action: must be a string, got null"},
		// ttl
		{name: "ttl string", body: `{"key":"a","ttl":"30"}`, msg: "ttl: must be an integer number of seconds, got a string"},
		{name: "ttl fraction", body: `{"key":"a","ttl":30.5}`, msg: "ttl: must be an integer number of seconds, got 30.5"},
		{name: "ttl point zero", body: `{"key":"a","ttl":30.0}`, msg: "ttl: must be an integer number of seconds, got 30.0"},
		{name: "ttl exponent", body: `{"key":"a","ttl":1e3}`, msg: "ttl: must be an integer number of seconds, got 1e3"},
		{name: "ttl bool", body: `{"key":"a","ttl":true}`, msg: "ttl: must be an integer number of seconds, got true"},
		{name: "ttl array", body: `{"key":"a","ttl":[30]}`, msg: "ttl: must be an integer number of seconds, got an array"},
		{name: "ttl null", body: `{"key":"a","ttl":null}`, msg: "ttl: must be an integer number of seconds, got null"},
		{name: "ttl null on extend", body: `{"key":"a","action":"extend","token":"` + goodToken + `","ttl":null}`, msg: "ttl: must be an integer number of seconds, got null"},
		{name: "ttl zero", body: `{"key":"a","ttl":0}`, msg: "ttl: 0 is below the minimum of 1 second"},
		{name: "ttl minus zero", body: `{"key":"a","ttl":-0}`, msg: "ttl: -0 is below the minimum of 1 second"},
		{name: "ttl negative", body: `{"key":"a","ttl":-5}`, msg: "ttl: -5 is below the minimum of 1 second"},
		{name: "ttl above max", body: `{"key":"a","ttl":90000}`, msg: "ttl: 90000 is above the maximum of 86400 seconds"},
		{name: "ttl overflow", body: `{"key":"a","ttl":99999999999999999999999}`, msg: "ttl: 99999999999999999999999 is above the maximum of 86400 seconds"},
		{name: "ttl negative overflow", body: `{"key":"a","ttl":-99999999999999999999}`, msg: "ttl: -99999999999999999999 is below the minimum of 1 second"},
		{name: "ttl on extend is checked", body: `{"key":"a","action":"extend","token":"` + goodToken + `","ttl":0}`, msg: "ttl: 0 is below the minimum of 1 second"},
		{name: "ttl on extend is typed", body: `{"ttl":"30","key":"a","action":"extend","token":"` + goodToken + `"}`, msg: "ttl: must be an integer number of seconds, got a string"},
		{name: "ttl object on acquire", body: `{"key":"a","ttl":{"s":30}}`, msg: "ttl: must be an integer number of seconds, got an object"},
		{name: "ignored ttl still malformed", body: `{"key":"a","action":"status","ttl":[1,}`, msg: "body: malformed JSON at byte 38: invalid character '}' at start of value"},
		{name: "ignored ttl still once", body: `{"key":"a","action":"status","ttl":1,"ttl":2}`, msg: `body: field "ttl" appears more than once`},
		// wait_ms
		{name: "wait above max", body: `{"key":"a","wait_ms":2001}`, msg: "wait_ms: 2001 is above the maximum of 2000 milliseconds"},
		{name: "wait negative", body: `{"key":"a","wait_ms":-1}`, msg: "wait_ms: -1 is below the minimum of 0 milliseconds"},
		{name: "wait fraction", body: `{"key":"a","wait_ms":1.5}`, msg: "wait_ms: must be an integer number of milliseconds, got 1.5"},
		{name: "wait null", body: `{"key":"a","wait_ms":null}`, msg: "wait_ms: must be an integer number of milliseconds, got null"},
		// token
		{name: "release without token", body: `{"key":"a","action":"release"}`, msg: "token: required for release; send the token that acquire returned"},
		{name: "extend without token", body: `{"key":"a","action":"extend"}`, msg: "token: required for extend"},
		{name: "release empty token", body: `{"key":"a","action":"release","token":""}`, msg: "token: required for release"},
		{name: "release null token", body: `{"key":"a","action":"release","token":null}`, msg: "token: must be a string, got null"},
		{name: "acquire null token", body: `{"key":"a","token":null}`, msg: "token: must be a string, got null"},
		{name: "token short", body: `{"key":"a","action":"release","token":"0123456789abcdef0123456789abcde"}`, msg: "token: must be the 32 lowercase hex characters that acquire returned"},
		{name: "token upper", body: `{"key":"a","action":"extend","token":"0123456789ABCDEF0123456789ABCDEF"}`, msg: "token: must be the 32 lowercase hex characters"},
		{name: "token long", body: `{"key":"a","action":"release","token":"0123456789abcdef0123456789abcdef0"}`, msg: "token: must be the 32 lowercase hex characters"},
		{name: "token number", body: `{"key":"a","action":"release","token":12}`, msg: "token: must be a string, got a number"},
		// body shape
		{name: "body empty", body: ``, msg: "body: empty; send a JSON object"},
		{name: "body spaces", body: "  \n ", msg: "body: empty"},
		{name: "body array", body: `[{"key":"a"}]`, msg: "body: must be a JSON object, got an array"},
		{name: "body string", body: `"key"`, msg: "body: must be a JSON object, got a string"},
		{name: "body number", body: `42`, msg: "body: must be a JSON object, got a number"},
		{name: "body null", body: `null`, msg: "body: must be a JSON object, got null"},
		{name: "body bool", body: `true`, msg: "body: must be a JSON object, got a boolean"},
		{name: "body nested array", body: ` [ {"a":[1,{}]} , [] ] `, msg: "body: must be a JSON object, got an array"},
		{name: "body not JSON", body: `key=a`, msg: "body: malformed JSON at byte 0: expected a JSON object such as {"},
		{name: "body not json words", body: `not json`, msg: "body: malformed JSON at byte 1: invalid character 'o' in literal null (expecting 'u')"},
		{name: "body nope", body: `nope`, msg: "body: malformed JSON at byte 1: invalid character 'o' in literal null"},
		{name: "body foo", body: `foo`, msg: "body: malformed JSON at byte 1: invalid character 'o' in literal false"},
		{name: "body tru", body: `tru`, msg: "body: malformed JSON at byte 3: unexpected end of the body"},
		{name: "body nullx", body: `nullx`, msg: "body: malformed JSON at byte 4: unexpected data after the JSON value"},
		{name: "body null null", body: `null null`, msg: "body: malformed JSON at byte 5: unexpected data after the JSON value"},
		{name: "body unterminated array", body: `[1,2`, msg: "body: malformed JSON at byte 4: unexpected end of the body"},
		{name: "body bad number", body: `-x`, msg: "body: malformed JSON at byte 1: invalid character 'x' in number (expecting digit)"},
		{name: "body unterminated string", body: `"abc`, msg: "body: malformed JSON at byte 4: unexpected end of the body"},
		{name: "unterminated object", body: `{"key":"a"`, msg: "body: malformed JSON at byte 10: unexpected end of the body"},
		{name: "missing value", body: `{"key":}`, msg: "body: malformed JSON at byte 7: missing value after object name"},
		{name: "trailing comma", body: `{"key":"a",}`, msg: "body: malformed JSON at byte 10: invalid character ',' at start of value"},
		{name: "single quotes", body: `{'key':'a'}`, msg: "body: malformed JSON at byte 1: invalid character '\\'' at start of value"},
		{name: "unterminated string", body: `{"key":"a`, msg: "body: malformed JSON at byte 9: unexpected end of the body"},
		{name: "bad escape", body: `{"key":"a\x"}`, msg: "body: malformed JSON at byte 9: invalid escape sequence `\\x` in string"},
		{name: "bad unicode escape", body: `{"key":"\u12g4"}`, msg: "body: malformed JSON at byte 8: invalid escape sequence `\\u12g4` in string"},
		{name: "bad literal", body: `{"key":nul}`, msg: "body: malformed JSON at byte 10: invalid character '}' in literal null (expecting 'l')"},
		{name: "leading zero", body: `{"key":"a","ttl":030}`, msg: "body: malformed JSON at byte 18: invalid character '3' after object value (expecting ',' or '}')"},
		{name: "trailing data", body: `{"key":"a"} x`, msg: "body: unexpected data after the JSON object at byte 12"},
		{name: "two objects", body: `{"key":"a"}{"key":"b"}`, msg: "body: unexpected data after the JSON object at byte 11"},
		{name: "unknown field", body: `{"key":"a","foo":1}`, msg: `body: unknown field "foo"; the fields are action, key, keys, ttl, token, namespace, wait_ms, permits, slot, lock_delay_ms`},
		{name: "field wrong case", body: `{"Key":"a"}`, msg: `body: unknown field "Key"`},
		{name: "duplicate field", body: `{"key":"a","key":"b"}`, msg: `body: field "key" appears more than once`},
		{name: "duplicate null field", body: `{"ttl":null,"key":"a","ttl":5}`, msg: `body: field "ttl" appears more than once`},
		// size
		{name: "body too large", body: `{"key":"` + strings.Repeat("a", 5000) + `"}`, status: http.StatusRequestEntityTooLarge, code: codeTooLarge, msg: "body: larger than the limit of 4096 bytes"},
		// API key
		{name: "API key missing", header: map[string]string{"Content-Type": "application/json"}, body: `{"key":"a"}`,
			status: http.StatusUnauthorized, code: codeUnauthorized, msg: "missing API key: send it in the X-API-Key header"},
		{name: "API key unknown", header: map[string]string{"X-API-Key": "not-a-key-of-anyone"}, body: `{"key":"a"}`,
			status: http.StatusUnauthorized, code: codeUnauthorized, msg: "unknown API key: send a valid key in the X-API-Key header"},
		{name: "API key in Authorization only", header: map[string]string{"Authorization": "Bearer " + testKeyAcme}, body: `{"key":"a"}`,
			status: http.StatusUnauthorized, code: codeUnauthorized, msg: "X-API-Key header"},
		// credentials in the query string, refused before authentication
		{name: "query api_key", path: "/v1/lock?api_key=" + testKeyAcme, header: map[string]string{}, body: `{"key":"a"}`, msg: msgQuerySecret},
		{name: "query apikey", path: "/v1/lock?apikey=secret-value-1", body: `{"key":"a"}`, msg: msgQuerySecret},
		{name: "query key", path: "/v1/lock?key=secret-value-1", body: `{"key":"a"}`, msg: msgQuerySecret},
		{name: "query X-API-KEY", path: "/v1/lock?x=1&X-API-KEY=secret-value-1", body: `{"key":"a"}`, msg: msgQuerySecret},
		{name: "query escaped name", path: "/v1/lock?api%5Fkey=secret-value-1", body: `{"key":"a"}`, msg: msgQuerySecret},
		{name: "query token", path: "/v1/lock?token=" + goodToken, body: `{"key":"a"}`, msg: msgQuerySecret},
		{name: "query access_token", path: "/v1/lock?Access_Token=secret-value-1", body: `{"key":"a"}`, msg: msgQuerySecret},
		{name: "query no value", path: "/v1/lock?apiKey", body: `{"key":"a"}`, msg: msgQuerySecret},
		{name: "query on alias", path: "/gateway/distlock?api_key=secret-value-1", body: `{"key":"a"}`, msg: msgQuerySecret},
		{name: "query before method", method: http.MethodGet, path: "/v1/lock?api_key=secret-value-1", msg: msgQuerySecret},
		// method
		{name: "GET", method: http.MethodGet, status: http.StatusMethodNotAllowed, code: codeMethodNotAllowed, msg: "method not allowed: use POST"},
		{name: "PUT", method: http.MethodPut, body: `{"key":"a"}`, status: http.StatusMethodNotAllowed, code: codeMethodNotAllowed, msg: "use POST"},
		{name: "DELETE on alias", method: http.MethodDelete, path: "/gateway/distlock", status: http.StatusMethodNotAllowed, code: codeMethodNotAllowed, msg: "use POST"},
		// content type
		{name: "form content type", header: map[string]string{"X-API-Key": testKeyAcme, "Content-Type": "application/x-www-form-urlencoded"}, body: `{"key":"a"}`,
			status: http.StatusUnsupportedMediaType, code: codeUnsupportedMedia, msg: "Content-Type must be application/json"},
		{name: "text content type", header: map[string]string{"X-API-Key": testKeyAcme, "Content-Type": "text/plain"}, body: `{"key":"a"}`,
			status: http.StatusUnsupportedMediaType, code: codeUnsupportedMedia, msg: "Content-Type must be application/json"},
		{name: "latin1 charset", header: map[string]string{"X-API-Key": testKeyAcme, "Content-Type": "application/json; charset=iso-8859-1"}, body: `{"key":"a"}`,
			status: http.StatusUnsupportedMediaType, code: codeUnsupportedMedia, msg: "Content-Type: application/json takes no parameter but charset=utf-8 (JSON is UTF-8); send the body in UTF-8, without another charset"},
		{name: "another parameter", header: map[string]string{"X-API-Key": testKeyAcme, "Content-Type": "application/json; version=2"}, body: `{"key":"a"}`,
			status: http.StatusUnsupportedMediaType, code: codeUnsupportedMedia, msg: "Content-Type: application/json takes no parameter but charset=utf-8; leave the others out"},
	}
}

// Every bad input of the issue, through real HTTP: the right status, code
// and message, the envelope, no Locker call (so no key written), and never
// the token or API key echoed.
func TestBadInputs(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f)
	for _, tc := range badInputs() {
		t.Run(tc.name, func(t *testing.T) {
			method, path, header := tc.method, tc.path, tc.header
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/v1/lock"
			}
			if header == nil {
				header = map[string]string{"X-API-Key": testKeyAcme, "Content-Type": "application/json"}
			}
			status, code := tc.status, tc.code
			if status == 0 {
				status = http.StatusBadRequest
			}
			if code == "" {
				code = codeBadRequest
			}
			before := f.calls.Load()
			r := ts.do(t, method, path, tc.body, header)
			assert.Equal(t, status, r.Status, r.Raw)
			assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
			assert.Equal(t, "err", r.Env.Ret, r.Raw)
			assert.Equal(t, code, r.code(), r.Raw)
			assert.Contains(t, r.Env.Msg, tc.msg)
			assert.Equal(t, "null", string(r.Env.Data))
			require.NotNil(t, r.Env.RemainQuota)
			assert.Equal(t, RemainQuota, *r.Env.RemainQuota)
			assert.Equal(t, before, f.calls.Load(), "no Locker call for a refused request")
			for _, secret := range []string{testKeyAcme, "secret-value-1", goodToken, "0123456789ABCDEF", "0123456789abcdef0123456789abcde"} {
				assert.NotContains(t, r.Raw, secret, "the answer never echoes a credential")
			}
			if status == http.StatusMethodNotAllowed {
				assert.Equal(t, "POST", r.Header.Get("Allow"))
			}
		})
	}
	for _, e := range ts.Logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		assert.NotContains(t, line, testKeyAcme)
		assert.NotContains(t, line, "secret-value-1")
		assert.NotContains(t, line, goodToken)
	}
}

// A body too large without a Content-Length (chunked) is cut at the limit.
func TestBodyTooLargeChunked(t *testing.T) {
	ts := newTestServer(t, newFakeLocker())
	body := io.MultiReader(strings.NewReader(`{"key":"`), strings.NewReader(strings.Repeat("a", 10000)), strings.NewReader(`"}`))
	r := ts.doCtx(t, t.Context(), http.MethodPost, "/v1/lock", io.NopCloser(body), map[string]string{"X-API-Key": testKeyAcme})
	assert.Equal(t, http.StatusRequestEntityTooLarge, r.Status)
	assert.Equal(t, codeTooLarge, r.code())
}

func TestContentTypesAccepted(t *testing.T) {
	ts := newTestServer(t, newFakeLocker())
	for i, ct := range []string{"", "application/json", "Application/JSON", "application/json; charset=utf-8", "application/json;charset=UTF-8"} {
		r := ts.do(t, http.MethodPost, "/v1/lock", fmt.Sprintf(`{"key":"ct%d"}`, i), map[string]string{"X-API-Key": testKeyAcme, "Content-Type": ct})
		assert.Equal(t, http.StatusOK, r.Status, "Content-Type %q: %s", ct, r.Raw)
	}
}

// Accepted shapes: absent fields take their defaults, whitespace anywhere,
// escapes.
func TestParseAccepts(t *testing.T) {
	lim := &lockBounds{defaultTTL: 30, maxTTL: 86400, maxWaitMS: 1000}
	cases := []struct {
		body string
		want lockRequest
	}{
		{`{"key":"order:pay:10086"}`, lockRequest{action: actAcquire, key: "order:pay:10086", ttl: 30}},
		{` { "action" : "acquire" , "key" : "k" , "ttl" : 86400 } `, lockRequest{action: actAcquire, key: "k", ttl: 86400}},
		{`{"key":"k","namespace":""}`, lockRequest{action: actAcquire, key: "k", ttl: 30}}, // an empty namespace is the same as none
		{`{"action":"acquire","key":"k","wait_ms":1000,"token":"ignored for acquire"}`, lockRequest{action: actAcquire, key: "k", ttl: 30, waitMS: 1000}},
		{`{"action":"release","key":"k","token":"` + goodToken + `"}`, lockRequest{action: actRelease, key: "k", token: goodToken}},
		{`{"action":"extend","key":"k","token":"` + goodToken + `","ttl":120}`, lockRequest{action: actExtend, key: "k", token: goodToken, ttl: 120}},
		{`{"action":"status","key":"k","namespace":"jobs"}`, lockRequest{action: actStatus, key: "k", namespace: "jobs"}},
		// ttl is ignored by release and status, wait_ms by all but acquire:
		// any value, any type, even before the action.
		{`{"ttl":99999,"wait_ms":-1,"action":"release","key":"k","token":"` + goodToken + `"}`, lockRequest{action: actRelease, key: "k", token: goodToken}},
		{`{"action":"status","key":"k","ttl":"30","wait_ms":{"a":[1,{"b":null}],"c":"\u00e9"}}`, lockRequest{action: actStatus, key: "k"}},
		{`{"action":"status","key":"k","ttl":[],"wait_ms":{}}`, lockRequest{action: actStatus, key: "k"}},
		// null in an ignored field is ignored like any other value.
		{`{"action":"status","key":"k","ttl":null,"wait_ms":null}`, lockRequest{action: actStatus, key: "k"}},
		{`{"action":"release","key":"k","token":"` + goodToken + `","ttl":null}`, lockRequest{action: actRelease, key: "k", token: goodToken}},
		{`{"action":"extend","key":"k","token":"` + goodToken + `","ttl":5,"wait_ms":[true,1.5e3]}`, lockRequest{action: actExtend, key: "k", token: goodToken, ttl: 5}},
		{`{"key":"a\"b\\c\/d\u00e9\ud83d\udd12"}`, lockRequest{action: actAcquire, key: "a\"b\\c/dé🔒", ttl: 30}},
		{`{"key":"` + strings.Repeat("é", 256) + `"}`, lockRequest{action: actAcquire, key: strings.Repeat("é", 256), ttl: 30}},
	}
	for _, tc := range cases {
		got, a, err := parseLockRequest([]byte(tc.body), lim)
		require.Nil(t, err, tc.body)
		assert.Equal(t, tc.want, got, tc.body)
		assert.Equal(t, tc.want.action, a)
	}
}

// FuzzParseLockRequest: the parser never panics, and whatever it accepts
// is valid JSON that encoding/json decodes to the same values.
func FuzzParseLockRequest(f *testing.F) {
	for _, tc := range badInputs() {
		f.Add([]byte(tc.body))
	}
	f.Add([]byte(`{"action":"release","key":"k","token":"` + goodToken + `","ttl":5,"wait_ms":0,"namespace":"n"}`))
	f.Add([]byte(`{"key":"\ud83d\udd12\u00e9\n"}`))
	lim := &lockBounds{defaultTTL: 30, maxTTL: 86400, maxWaitMS: 5000}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _, err := parseLockRequest(body, lim)
		if err != nil {
			if err.msg == "" || !utf8.ValidString(err.msg) {
				t.Fatalf("bad message %q", err.msg)
			}
			// "must be a JSON object" is for well-formed JSON only, and
			// well-formed JSON is never called malformed (json.Valid does
			// not check UTF-8, so only valid UTF-8 bodies are compared).
			notObject := strings.HasPrefix(err.msg, "body: must be a JSON object")
			malformed := strings.HasPrefix(err.msg, "body: malformed JSON")
			if valid := json.Valid(body); utf8.Valid(body) && ((notObject && !valid) || (malformed && valid)) {
				t.Fatalf("%q (json.Valid %v): %s", body, valid, err.msg)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		var std struct {
			Action    *string         `json:"action"`
			Key       string          `json:"key"`
			Namespace string          `json:"namespace"`
			TTL       json.RawMessage `json:"ttl"`
		}
		if err := json.Unmarshal(body, &std); err != nil {
			t.Fatalf("encoding/json refuses accepted %q: %v", body, err)
		}
		if std.Key != req.key || std.Namespace != req.namespace {
			t.Fatalf("%q: key/namespace %q/%q, encoding/json says %q/%q", body, req.key, req.namespace, std.Key, std.Namespace)
		}
		// ttl counts for acquire and extend only; the others ignore it.
		if (req.action == actAcquire || req.action == actExtend) && len(std.TTL) > 0 && string(std.TTL) != "null" {
			var ttl int64
			if err := json.Unmarshal(std.TTL, &ttl); err != nil || ttl != req.ttl {
				t.Fatalf("%q: ttl %d, encoding/json says %s (%v)", body, req.ttl, std.TTL, err)
			}
		}
	})
}

// Random mutations of valid and invalid bodies, through real HTTP: no
// input gets a 500 or kills the server.
func TestNoBodyPanics(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f)
	seeds := [][]byte{
		[]byte(`{"action":"release","key":"k","token":"` + goodToken + `","ttl":5,"wait_ms":0,"namespace":"n"}`),
		[]byte(`{"action":"status","key":"\ud83d\udd12"}`),
	}
	for _, tc := range badInputs() {
		seeds = append(seeds, []byte(tc.body))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("{}[]\":,\\u0123456789abcdefe.-+ \n\x00\x7f\xff\xc3tnl")
	for i := range 400 {
		b := bytes.Clone(seeds[i%len(seeds)])
		for range 1 + rng.IntN(4) {
			if len(b) == 0 {
				b = append(b, alphabet[rng.IntN(len(alphabet))])
				continue
			}
			p := rng.IntN(len(b))
			switch rng.IntN(3) {
			case 0:
				b[p] = alphabet[rng.IntN(len(alphabet))]
			case 1:
				b = append(b[:p], b[p+1:]...)
			default:
				b = append(b[:p], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[p:]...)...)
			}
		}
		r := ts.lock(t, testKeyAcme, string(b))
		if !slices.Contains([]int{http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge}, r.Status) {
			t.Fatalf("body %.200q → %s", b, r.Raw)
		}
	}
	r := ts.do(t, http.MethodGet, "/healthz", "", nil)
	assert.Equal(t, http.StatusOK, r.Status)
}
