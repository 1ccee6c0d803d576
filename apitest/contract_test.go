package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/internal/testdaemon"
)

// contract is api/openapi.yaml, loaded and validated as a document.
type contract struct {
	doc    *openapi3.T
	router routers.Router
}

func loadContract(t *testing.T) *contract {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()), "api/openapi.yaml is a valid OpenAPI document")
	require.True(t, doc.IsOpenAPI31OrLater())
	// Route by path only: the daemon under test listens on a free port.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	return &contract{doc: doc, router: router}
}

var filterOptions = &openapi3filter.Options{
	AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
	MultiError:         true,
}

// exchange is one request to the real daemon and its answer.
type exchange struct {
	req    *http.Request
	body   []byte // request body
	status int
	header http.Header
	answer []byte
}

func send(t *testing.T, method, url, apiKey, contentType, body string) *exchange {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if apiKey != "" {
		req.Header.Set("X-API-Key", apiKey)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return &exchange{req: req, body: []byte(body), status: resp.StatusCode, header: resp.Header, answer: answer}
}

// checkAnswer validates the daemon's answer against the contract, and the
// request too when wantRequestValid (a bad-input request must be refused
// by the contract as well as by the daemon where the schema can say so).
func (c *contract) checkAnswer(t *testing.T, x *exchange, wantRequestValid bool) {
	t.Helper()
	req := x.req.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(x.body))
	route, params, err := c.router.FindRoute(req)
	require.NoError(t, err, "%s %s is in the contract", req.Method, req.URL.Path)
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: filterOptions}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if wantRequestValid {
		require.NoError(t, reqErr, "request %s", x.body)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 x.status,
		Header:                 x.header,
		Body:                   io.NopCloser(bytes.NewReader(x.answer)),
		Options:                filterOptions,
	}
	require.NoError(t, openapi3filter.ValidateResponse(context.Background(), out), "answer %d %s", x.status, x.answer)
}

// checkSchema validates v against a named schema of the contract, for
// answers no operation describes (a 405 on a path without that method).
func (c *contract) checkSchema(t *testing.T, name string, raw []byte) {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(raw, &v))
	s := c.doc.Components.Schemas[name]
	require.NotNil(t, s, "schema %s", name)
	require.NoError(t, s.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()), "%s", raw)
}

// twoKeys sends body with two X-API-Key headers.
func twoKeys(t *testing.T, url, body string) *exchange {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Add("X-API-Key", testdaemon.APIKey)
	req.Header.Add("X-API-Key", testdaemon.APIKey)
	req.Header.Set("Content-Type", jsonCT)
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 400, resp.StatusCode, "%s", answer)
	return &exchange{req: req, body: []byte(body), status: resp.StatusCode, header: resp.Header, answer: answer}
}

func data(t *testing.T, x *exchange) map[string]any {
	t.Helper()
	var env struct {
		Data map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(x.answer, &env), "%s", x.answer)
	return env.Data
}

const jsonCT = "application/json"

// TestContract sends the examples of docs/api.md and every bad-input case to the
// real daemon and validates each answer (and each well-formed request)
// against api/openapi.yaml.
func TestContract(t *testing.T) {
	c := loadContract(t)
	d := startDaemon(t)
	key := testdaemon.APIKey
	for _, path := range []string{"/v1/lock", "/gateway/distlock"} {
		t.Run(path, func(t *testing.T) {
			url := d.URL + path
			k := "order:pay:10086" + path
			x := send(t, "POST", url, key, jsonCT, `{"action":"acquire","key":"`+k+`","ttl":30}`)
			require.Equal(t, 200, x.status)
			c.checkAnswer(t, x, true)
			token := data(t, x)["token"].(string)

			for _, body := range []string{
				`{"action":"acquire","key":"` + k + `","ttl":30}`, // held: acquired:false, retry_after
				`{"action":"status","key":"` + k + `"}`,
				`{"action":"extend","key":"` + k + `","token":"` + token + `","ttl":120}`,
				`{"action":"release","key":"` + k + `","token":"` + token + `"}`,
				`{"action":"release","key":"` + k + `","token":"` + token + `"}`, // released:false
				`{"action":"extend","key":"` + k + `","token":"` + token + `"}`,  // extended:false
				`{"action":"status","key":"` + k + `"}`,                          // held:false
				`{"key":"` + k + `","namespace":"shop","wait_ms":100}`,           // defaults: acquire, ttl 30
				`{"action":"release","key":"` + k + `","namespace":"shop","token":"0123456789abcdef0123456789abcdef"}`,
			} {
				x := send(t, "POST", url, key, jsonCT, body)
				require.Equal(t, 200, x.status, "%s → %s", body, x.answer)
				c.checkAnswer(t, x, true)
			}

			// A semaphore of one permit: granted with its slot, then refused,
			// its status, and its permit extended and released by slot.
			s := "export:merchant_5" + path
			x = send(t, "POST", url, key, jsonCT, `{"action":"acquire","key":"`+s+`","ttl":30,"permits":1}`)
			require.Equal(t, 200, x.status)
			c.checkAnswer(t, x, true)
			ptoken := data(t, x)["token"].(string)
			assert.Equal(t, float64(0), data(t, x)["slot"])
			for _, body := range []string{
				`{"action":"acquire","key":"` + s + `","ttl":30,"permits":1}`, // acquired:false, retry_after
				`{"action":"status","key":"` + s + `","permits":1}`,           // held, taken, next_free_ms
				`{"action":"extend","key":"` + s + `","token":"` + ptoken + `","slot":0,"ttl":60}`,
				`{"action":"release","key":"` + s + `","token":"` + ptoken + `","slot":0}`,
				`{"action":"status","key":"` + s + `","permits":2}`, // taken 0
			} {
				x := send(t, "POST", url, key, jsonCT, body)
				require.Equal(t, 200, x.status, "%s → %s", body, x.answer)
				c.checkAnswer(t, x, true)
			}
		})
	}

	url := d.URL + "/v1/lock"
	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			body    string
			status  int
			invalid bool // the contract's schema refuses the request too
		}{
			{`{"action":"acquire"}`, 400, true},
			{`{"key":""}`, 400, true},
			{`{"key":"` + strings.Repeat("k", 513) + `"}`, 400, true},
			{`{"key":"a\u0001b"}`, 400, false},
			{`{"key":"k","ttl":0}`, 400, true},
			{`{"key":"k","ttl":-5}`, 400, true},
			{`{"key":"k","tll":30}`, 400, true},
			{`{"action":"extend","key":"k","ttl":5}`, 400, false},
			{`"key"`, 400, true},
			{`{"key":`, 400, false},
			{`{"key":"k","ttl":86401}`, 400, true},
			{`{"key":"k","ttl":"30"}`, 400, true},
			{`{"key":"k","ttl":30.5}`, 400, true},
			{`{"key":"k","wait_ms":-1}`, 400, true},
			{`{"key":"k","wait_ms":30001}`, 400, false},
			{`{"key":"k","namespace":"` + strings.Repeat("n", 129) + `"}`, 400, true},
			{`{"key":"k","action":"lock"}`, 400, true},
			{`{"action":"","key":"k","ttl":30}`, 400, true},
			{`{"key":"k","Key":"k"}`, 400, true},
			{`{"key":"k","key":"k"}`, 400, false},
			{`{"action":"release","key":"k"}`, 400, false},
			{`{"action":"release","key":"k","token":"XYZ"}`, 400, true},
			{`{"key":"k",}`, 400, false},
			{`not json`, 400, false},
			{``, 400, false},
			{`[1,2]`, 400, true},
			{`{"key":"k","permits":0}`, 400, true},
			{`{"key":"k","permits":1001}`, 400, true},
			{`{"action":"release","key":"k","token":"0123456789abcdef0123456789abcdef","slot":1000}`, 400, true},
		} {
			x := send(t, "POST", url, key, jsonCT, tc.body)
			require.Equal(t, tc.status, x.status, "%s → %s", tc.body, x.answer)
			c.checkAnswer(t, x, false)
			if tc.invalid {
				req := x.req.Clone(context.Background())
				req.Body = io.NopCloser(bytes.NewReader(x.body))
				route, params, err := c.router.FindRoute(req)
				require.NoError(t, err)
				assert.Error(t, openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
					Request: req, PathParams: params, Route: route, Options: filterOptions,
				}), "the contract also refuses %s", tc.body)
			}
		}
	})

	t.Run("credentials and transport", func(t *testing.T) {
		body := `{"key":"k"}`
		for _, x := range []*exchange{
			send(t, "POST", url, "", jsonCT, body),                                               // 401 missing
			send(t, "POST", url, "unknown-key-0123456789", jsonCT, body),                         // 401 unknown
			send(t, "POST", url+"?api_key=x", key, jsonCT, body),                                 // 400 key in query
			twoKeys(t, url, body),                                                                // 400 two X-API-Key headers
			send(t, "POST", url, key, "text/plain", body),                                        // 415
			send(t, "POST", url, key, jsonCT, `{"key":"`+strings.Repeat("k", 20000)+`"}`),        // 413
			send(t, "POST", url, key, "application/json; charset=utf-8", `{"key":"ct:charset"}`), // 200
		} {
			c.checkAnswer(t, x, false)
		}
		x := send(t, "GET", url, key, "", "")
		require.Equal(t, 405, x.status)
		assert.Equal(t, "POST", x.header.Get("Allow"))
		c.checkSchema(t, "Error", x.answer)
	})

	t.Run("other endpoints", func(t *testing.T) {
		for _, p := range []string{"/healthz", "/readyz"} {
			x := send(t, "GET", d.URL+p, "", "", "")
			require.Equal(t, 200, x.status, p)
			c.checkAnswer(t, x, true)
		}
		x := send(t, "GET", d.URL+"/openapi.yaml", "", "", "")
		require.Equal(t, 200, x.status)
		assert.Equal(t, string(api.OpenAPI), string(x.answer), "the daemon serves the file")
	})

	t.Run("503", func(t *testing.T) {
		pauseMasters(t, 3, d)
		x := send(t, "POST", url, key, jsonCT, `{"key":"k503"}`)
		require.Equal(t, 503, x.status, "%s", x.answer)
		assert.Equal(t, "1", x.header.Get("Retry-After"))
		c.checkAnswer(t, x, true)
		// /readyz follows at the next health probe.
		require.Eventually(t, func() bool {
			x = send(t, "GET", d.URL+"/readyz", "", "", "")
			return x.status == 503
		}, 20*time.Second, 20*time.Millisecond)
		c.checkAnswer(t, x, true)
	})
}

// TestContractLimits drives the account limits of a real daemon, set by
// environment variables, to each 429 and validates every answer, with its
// remain_quota and Retry-After, against the contract.
func TestContractLimits(t *testing.T) {
	c := loadContract(t)
	key := testdaemon.APIKey
	remain := func(t *testing.T, x *exchange) int {
		t.Helper()
		var env struct {
			RemainQuota int    `json:"remain_quota"`
			Code        string `json:"code"`
		}
		require.NoError(t, json.Unmarshal(x.answer, &env), "%s", x.answer)
		return env.RemainQuota
	}
	code := func(t *testing.T, x *exchange) string {
		t.Helper()
		var env struct {
			Code string `json:"code"`
		}
		require.NoError(t, json.Unmarshal(x.answer, &env), "%s", x.answer)
		return env.Code
	}

	t.Run("quota and max_locks", func(t *testing.T) {
		d := startDaemon(t, "REDLOCKD_ACCOUNT_DEFAULTS_QUOTA=4/744h", "REDLOCKD_ACCOUNT_DEFAULTS_MAX_LOCKS=1")
		url := d.URL + "/v1/lock"
		x := send(t, "POST", url, key, jsonCT, `{"key":"limits:1","ttl":30}`)
		require.Equal(t, 200, x.status, "%s", x.answer)
		c.checkAnswer(t, x, true)
		assert.Equal(t, 3, remain(t, x))

		x = send(t, "POST", url, key, jsonCT, `{"key":"limits:2","ttl":30}`)
		require.Equal(t, 429, x.status, "%s", x.answer)
		c.checkAnswer(t, x, true)
		assert.Equal(t, "too_many_locks", code(t, x))
		assert.Equal(t, 3, remain(t, x), "a refused call is not counted")
		assert.Equal(t, "1", x.header.Get("Retry-After"))

		for want := 2; want >= 0; want-- {
			x = send(t, "POST", url, key, jsonCT, `{"action":"status","key":"limits:1"}`)
			require.Equal(t, 200, x.status, "%s", x.answer)
			c.checkAnswer(t, x, true)
			assert.Equal(t, want, remain(t, x))
		}
		assert.Contains(t, string(x.answer), `"msg":"enough calls, 0 left"`)

		x = send(t, "POST", url, key, jsonCT, `{"action":"status","key":"limits:1"}`)
		require.Equal(t, 429, x.status, "%s", x.answer)
		c.checkAnswer(t, x, true)
		assert.Equal(t, "quota_exhausted", code(t, x))
		assert.Equal(t, 0, remain(t, x))
		assert.Contains(t, string(x.answer), `"msg":"not enough calls, 0 left: the quota of 4 calls per 31d is used up`)
		ra, err := strconv.Atoi(x.header.Get("Retry-After"))
		require.NoError(t, err)
		assert.True(t, ra >= 1 && ra <= 744*3600, "Retry-After %d: until the window resets", ra)
	})

	t.Run("rate", func(t *testing.T) {
		d := startDaemon(t, "REDLOCKD_ACCOUNT_DEFAULTS_RATE=0.1", "REDLOCKD_ACCOUNT_DEFAULTS_BURST=1")
		url := d.URL + "/v1/lock"
		x := send(t, "POST", url, key, jsonCT, `{"action":"status","key":"limits:r"}`)
		require.Equal(t, 200, x.status, "%s", x.answer)
		c.checkAnswer(t, x, true)
		assert.Equal(t, -1, remain(t, x), "no quota")
		x = send(t, "POST", url, key, jsonCT, `{"action":"status","key":"limits:r"}`)
		require.Equal(t, 429, x.status, "%s", x.answer)
		c.checkAnswer(t, x, true)
		assert.Equal(t, "rate_limited", code(t, x))
		ra, err := strconv.Atoi(x.header.Get("Retry-After"))
		require.NoError(t, err)
		assert.True(t, ra >= 9 && ra <= 10, "Retry-After %d: a token every 10 s", ra)
	})
}
