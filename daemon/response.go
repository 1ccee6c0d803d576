package daemon

import (
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"
)

// RemainQuota is remain_quota for an account without a quota, and for
// answers that name no account (401, and what is refused before the API
// key is read): unlimited, not counted. An account with a quota gets the
// calls it has left in the current window after this call; 0 means the
// next call is refused with 429 quota_exhausted.
const RemainQuota = -1

// Stable error codes (the envelope's "code").
const (
	codeBadRequest       = "bad_request"            // 400
	codeUnauthorized     = "unauthorized"           // 401
	codeNotFound         = "not_found"              // 404
	codeMethodNotAllowed = "method_not_allowed"     // 405
	codeUnsupportedMedia = "unsupported_media_type" // 415
	codeTooLarge         = "too_large"              // 413
	codeURITooLong       = "uri_too_long"           // 414
	codeQuorum           = "quorum_unavailable"     // 503
	// codeTooManyWaiters: 429, too many acquires with wait_ms waiting.
	codeTooManyWaiters = "too_many_waiters"
	// codeTooManyAuthFailures: 429, too many requests without a valid API
	// key from one source.
	codeTooManyAuthFailures = "too_many_auth_failures"
	// codeQuotaExhausted, codeRateLimited, codeTooManyLocks: 429, the
	// account's limits (package limits, admission.go).
	codeQuotaExhausted = "quota_exhausted"
	codeRateLimited    = "rate_limited"
	codeTooManyLocks   = "too_many_locks"
	// codeRecordsBudgetFull: 429, an idem_begin of a new record while the
	// account's idempotency records take up max_idempotency_bytes.
	codeRecordsBudgetFull = "records_budget_full"
	// codeTooManyListings: 429, too many listings (GET /admin/locks, GET /admin/idempotency) at once.
	codeTooManyListings = "too_many_listings"
	codeInternal        = "internal" // 500
	// codeCancelled answers a request whose client went away (HTTP 499, as
	// nginx logs it); nobody reads it, but the log and metrics do.
	codeCancelled = "cancelled"
)

// statusClientClosed is nginx's "client closed request".
const statusClientClosed = 499

// outcome is the boolean field a lock response carries.
type outcome uint8

const (
	outNone outcome = iota
	outAcquired
	outReleased
	outExtended
	outHeld
)

var outcomeNames = [...]string{"", "acquired", "released", "extended", "held"}

// lockData is the envelope's data for an answered action. Fields that do
// not apply are left out of the JSON, in particular fence while fencing is
// not enabled (fence == 0) and token everywhere but a successful acquire.
type lockData struct {
	action  action
	key     string   // the caller's key, not the Redis key
	keys    []string // a multi-key lock's keys, the caller's; nil for one key
	outcome outcome
	ok      bool // the outcome's value

	token      string
	ttl        int64 // seconds
	hasTTL     bool
	expireAt   int64 // Unix seconds
	hasExpire  bool
	retryAfter int64 // seconds; 0 = absent
	fence      int64 // 0 = absent
	validityMS int64
	hasVal     bool
	elapsedMS  int64 // see setValidity
	hasElapsed bool
	// A semaphore's answers: permits asked for (0 = absent), the slot
	// granted, the permits taken and when the next may free.
	permits     int64
	slot        int64
	hasSlot     bool
	taken       int64
	hasTaken    bool
	nextFreeMS  int64
	hasNextFree bool
	// waitStopped: an acquire's wait_ms wait was ended early by this
	// daemon shutting down (Serve, step 3), not by the wait running out:
	// the caller should send it again, for what is left of its wait, on
	// a new connection (another replica). "wait_stopped":true on the
	// wire, absent otherwise.
	waitStopped bool
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// writeData writes a 200 {"ret":"ok"} envelope. The JSON is built by hand
// (the shapes are fixed and small) to keep reflection off the request path.
func writeData(w http.ResponseWriter, d *lockData, msg string, remainQuota int64) {
	bp := bufPool.Get().(*[]byte)
	b := (*bp)[:0]
	b = append(b, `{"ret":"ok","data":{"action":"`...)
	b = append(b, d.action.String()...)
	b = append(b, `","key":`...)
	b = appendJSONString(b, d.key)
	if d.keys != nil {
		b = append(b, `,"keys":[`...)
		for i, k := range d.keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
		}
		b = append(b, ']')
	}
	if d.outcome != outNone {
		b = append(b, ',', '"')
		b = append(b, outcomeNames[d.outcome]...)
		b = append(b, `":`...)
		b = strconv.AppendBool(b, d.ok)
	}
	if d.token != "" {
		b = append(b, `,"token":`...)
		b = appendJSONString(b, d.token)
	}
	if d.hasTTL {
		b = append(b, `,"ttl":`...)
		b = strconv.AppendInt(b, d.ttl, 10)
	}
	if d.hasExpire {
		b = append(b, `,"expire_at":`...)
		b = strconv.AppendInt(b, d.expireAt, 10)
	}
	if d.retryAfter > 0 {
		b = append(b, `,"retry_after":`...)
		b = strconv.AppendInt(b, d.retryAfter, 10)
	}
	if d.fence != 0 {
		b = append(b, `,"fence":`...)
		b = strconv.AppendInt(b, d.fence, 10)
	}
	if d.hasVal {
		b = append(b, `,"validity_ms":`...)
		b = strconv.AppendInt(b, d.validityMS, 10)
	}
	if d.hasElapsed {
		b = append(b, `,"elapsed_ms":`...)
		b = strconv.AppendInt(b, d.elapsedMS, 10)
	}
	if d.permits > 0 {
		b = append(b, `,"permits":`...)
		b = strconv.AppendInt(b, d.permits, 10)
	}
	if d.hasSlot {
		b = append(b, `,"slot":`...)
		b = strconv.AppendInt(b, d.slot, 10)
	}
	if d.hasTaken {
		b = append(b, `,"taken":`...)
		b = strconv.AppendInt(b, d.taken, 10)
	}
	if d.hasNextFree {
		b = append(b, `,"next_free_ms":`...)
		b = strconv.AppendInt(b, d.nextFreeMS, 10)
	}
	if d.waitStopped {
		b = append(b, `,"wait_stopped":true`...)
	}
	b = append(b, `},"msg":`...)
	b = appendJSONString(b, msg)
	b = append(b, `,"remain_quota":`...)
	b = strconv.AppendInt(b, remainQuota, 10)
	b = append(b, "}\n"...)
	writeJSON(w, http.StatusOK, b)
	*bp = b
	bufPool.Put(bp)
}

// writeError writes a {"ret":"err"} envelope with data null and
// remain_quota -1.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeErrorQuota(w, status, code, msg, RemainQuota)
}

// writeErrorQuota is writeError for an account's answer, with its
// remain_quota.
func writeErrorQuota(w http.ResponseWriter, status int, code, msg string, remainQuota int64) {
	bp := bufPool.Get().(*[]byte)
	b := (*bp)[:0]
	b = append(b, `{"ret":"err","data":null,"msg":`...)
	b = appendJSONString(b, msg)
	b = append(b, `,"code":`...)
	b = appendJSONString(b, code)
	b = append(b, `,"remain_quota":`...)
	b = strconv.AppendInt(b, remainQuota, 10)
	b = append(b, "}\n"...)
	writeJSON(w, status, b)
	*bp = b
	bufPool.Put(bp)
}

// Header values of every JSON answer, built once. They are assigned to the
// header map under canonical names, which is what Header.Set does without
// canonicalizing the name and allocating a new []string each time. The
// slices are shared by all responses and must never be modified in place;
// their capacity is 1, so an append (Header.Add) copies.
var (
	hvJSON    = []string{"application/json"}
	hvNoStore = []string{"no-store"}
	hvNosniff = []string{"nosniff"}
)

// contentLengths[n:n+1:n+1] is the Content-Length value of an n-byte
// answer, for the answers this package writes (all but huge keys).
var contentLengths = func() []string {
	v := make([]string, 1024)
	for i := range v {
		v[i] = strconv.Itoa(i)
	}
	return v
}()

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = hvJSON
	h["Cache-Control"] = hvNoStore
	h["X-Content-Type-Options"] = hvNosniff
	if n := len(body); n < len(contentLengths) {
		h["Content-Length"] = contentLengths[n : n+1 : n+1]
	} else {
		h["Content-Length"] = []string{strconv.Itoa(n)}
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD; control characters, '"' and '\' are escaped, and so are U+2028
// and U+2029 so the output is also safe inside a JavaScript string.
func appendJSONString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			switch r {
			case '\u2028':
				b = append(b, `\u2028`...)
			case '\u2029':
				b = append(b, `\u2029`...)
			default:
				b = append(b, `\ufffd`...)
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
