package daemon

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/redlockd/redlockd/redlock"
)

// Limits of the action API's fields.
const (
	maxKeyBytes       = 512
	maxNamespaceBytes = 128
	tokenLen          = 32
	// maxPermits is the largest semaphore (permits), redlock.MaxPermits.
	maxPermits = redlock.MaxPermits
	// maxLockDelayMS is the longest lock_delay_ms, redlock.MaxLockDelay.
	maxLockDelayMS = int64(redlock.MaxLockDelay / time.Millisecond)
	// maxMultiKeys is the most keys of a multi-key lock, redlock.MaxMultiKeys.
	maxMultiKeys = redlock.MaxMultiKeys
)

// action is what a request asks for. actUnknown labels requests refused
// before their action was known.
type action uint8

const (
	actUnknown action = iota
	actAcquire
	actRelease
	actExtend
	actStatus
	// actIdempotency: the idempotency actions (idempotency.go), counted
	// together here and by action in redlockd_idempotency_requests_total.
	actIdempotency
	numActions
)

var actionNames = [numActions]string{"unknown", "acquire", "release", "extend", "status", "idempotency"}

func (a action) String() string { return actionNames[a] }

// lockRequest is a decoded and validated body of POST /v1/lock.
type lockRequest struct {
	action    action
	key       string
	namespace string
	token     string // "" for acquire and status
	ttl       int64  // seconds, defaulted
	waitMS    int64
	// permits is the semaphore's number of permits (acquire and status);
	// 0 for a plain lock.
	permits int64
	// slot is the semaphore permit a release or extend acts on, when
	// hasSlot: the lock key is then redlock.PermitKey(key, slot).
	slot    int64
	hasSlot bool
	// lockDelayMS is the acquire's lock-delay (redlock/lockdelay.go); 0
	// for none. hasLockDelay: the request sent lock_delay_ms.
	lockDelayMS  int64
	hasLockDelay bool
	// keys are the keys of a multi-key lock (redlock/multikey.go), 2 to
	// maxMultiKeys distinct keys; nil for one key (key). A keys of one key
	// is that key, and keysOfOne says so: its answer carries keys, as a
	// set's does.
	keys      []string
	keysOfOne bool
}

// lockBounds are the configured bounds a request is checked against.
type lockBounds struct {
	defaultTTL int64 // seconds
	maxTTL     int64 // seconds
	maxWaitMS  int64
}

// badRequest is a 400 answer; msg names the field and the limit, and never
// quotes a token.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

// jsonKind is the type of one JSON value.
type jsonKind uint8

const (
	kNone jsonKind = iota // field absent
	kString
	kNumber
	kTrue
	kFalse
	kNull
	kObject
	kArray
)

var kindNames = [...]string{"nothing", "a string", "a number", "true", "false", "null", "an object", "an array"}

// jsonValue is one scanned field value. Objects and arrays are never
// scanned: no field accepts them, so seeing one is already the answer.
type jsonValue struct {
	kind    jsonKind
	str     string // kString, unescaped
	notText bool   // kString: invalid UTF-8 or a lone surrogate escape
	raw     []byte // kArray: the array's JSON text
	num     string // kNumber, as written
	isInt   bool   // kNumber: no fraction and no exponent
}

// absent reports whether the field is missing. An explicit null is not
// absent: it is a value of the wrong type for every field, refused like
// any other, so that a client that means "unset" and sends null learns of
// it instead of silently getting the default (an acquire, a 30 s TTL).
func (v *jsonValue) absent() bool { return v.kind == kNone }

// parseLockRequest decodes body strictly — one JSON object, known fields
// only (exact, case-sensitive names), each at most once, strings where
// strings belong, integers written as integers, nothing after the object —
// and validates it against lim. On error, the returned action is the
// request's action when it was already known, for metrics.
//
// The JSON syntax is jsontext's (scanObject); the rules above are checked
// here, on its tokens.
func parseLockRequest(body []byte, lim *lockBounds) (lockRequest, action, *badRequest) {
	f, err := scanLockFields(body)
	if err != nil {
		return lockRequest{}, actUnknown, err
	}
	var req lockRequest
	if req.action, err = f.parseAction(); err != nil {
		return req, actUnknown, err
	}
	a := req.action
	for _, step := range []func(*lockRequest, *lockBounds) *badRequest{f.parseTarget, f.parseNumbers, f.parseToken} {
		if err := step(&req, lim); err != nil {
			return req, a, err
		}
	}
	return req, a, nil
}

// lockFields are the fields of a lock body as scanned, each kNone when
// absent.
type lockFields struct {
	action, key, keys, ttl, token, namespace, waitMS, permits, slot, lockDelayMS jsonValue
}

// scanLockFields reads body's fields by name: a known name at most once,
// strings where a string is the only shape (the numbers, and keys, are
// checked once the action is known).
func scanLockFields(body []byte) (*lockFields, *badRequest) {
	var f lockFields
	err := scanObject(body, func(name string, v jsonValue) (nested bool, err *badRequest) {
		var dst *jsonValue
		switch name {
		case "action":
			dst, err = &f.action, wantString(name, &v)
		case "key":
			dst, err = &f.key, wantString(name, &v)
		case "keys":
			dst, nested = &f.keys, true
			if v.kind != kArray {
				err = bad("keys: must be an array of 1 to %d strings, got %s", maxMultiKeys, kindNames[v.kind])
			}
		case "ttl":
			// Checked once the action is known (it may come later in the
			// body); until then any value, nested ones included, is kept.
			dst, nested = &f.ttl, true
		case "token":
			dst, err = &f.token, wantString(name, &v)
		case "namespace":
			dst, err = &f.namespace, wantString(name, &v)
		case "wait_ms":
			dst, nested = &f.waitMS, true
		case "permits":
			dst, nested = &f.permits, true
		case "slot":
			dst, nested = &f.slot, true
		case "lock_delay_ms":
			dst, nested = &f.lockDelayMS, true
		default:
			return false, bad("body: unknown field %s; the fields are action, key, keys, ttl, token, namespace, wait_ms, permits, slot, lock_delay_ms", quoteShort(name))
		}
		if dst.kind != kNone {
			return false, bad("body: field %q appears more than once", name)
		}
		*dst = v
		return nested, err
	})
	return &f, err
}

// parseAction reads action. An absent action means acquire, the
// documented default. An empty string is not absent: like any other value
// outside the enum it is refused (null was refused by wantString).
func (f *lockFields) parseAction() (action, *badRequest) {
	switch s := f.action.str; {
	case f.action.absent() || s == "acquire":
		return actAcquire, nil
	case s == "release":
		return actRelease, nil
	case s == "extend":
		return actExtend, nil
	case s == "status":
		return actStatus, nil
	default:
		return actUnknown, bad("action: %s is not one of acquire, release, extend, status (and, where idempotency records are on, idem_begin, idem_complete, idem_abort, idem_get, idem_extend)", quoteShort(s))
	}
}

// parseTarget reads what the action acts on: key or keys (one of them),
// and namespace.
func (f *lockFields) parseTarget(req *lockRequest, _ *lockBounds) *badRequest {
	switch {
	case !f.keys.absent() && !f.key.absent():
		return bad("key, keys: send one of them: key for one lock, keys for a multi-key lock")
	case !f.keys.absent():
		keys, err := parseKeys(f.keys.raw)
		if err != nil {
			return err
		}
		req.key = keys[0]
		if len(keys) > 1 {
			req.keys = keys
		} else {
			req.keysOfOne = true
		}
	case f.key.absent():
		return bad("key: required, a string of 1 to %d bytes (or keys, an array of 1 to %d such strings)", maxKeyBytes, maxMultiKeys)
	default:
		if err := checkText("key", &f.key, 1, maxKeyBytes); err != nil {
			return err
		}
		req.key = f.key.str
	}
	if err := checkText("namespace", &f.namespace, 0, maxNamespaceBytes); err != nil {
		return err
	}
	req.namespace = f.namespace.str
	return nil
}

// parseNumbers reads ttl, wait_ms, permits, slot and lock_delay_ms, each
// for the actions that use it.
//
// ttl is used by acquire and extend only, wait_ms by acquire only. An
// action that does not use a field ignores it entirely — any value of
// any type, even an object, is accepted and has no effect (req.ttl
// stays 0 for release and status) — so that a client may send one body
// shape for every action, and so that "ttl is ignored by release and
// status" (the API documentation) holds literally. The field must still be
// well-formed JSON, known by name, and appear at most once: those are
// rules of the body, not of the field. permits (a semaphore's acquire or
// status) and slot (the permit a release or extend acts on) are ignored by
// the other actions in the same way.
func (f *lockFields) parseNumbers(req *lockRequest, lim *lockBounds) *badRequest {
	a := req.action
	var err *badRequest
	if a == actAcquire || a == actExtend {
		req.ttl = lim.defaultTTL
		if !f.ttl.absent() {
			if req.ttl, err = intField("ttl", "seconds", &f.ttl, 1, lim.maxTTL); err != nil {
				return err
			}
		}
	}
	if a == actAcquire && !f.waitMS.absent() {
		if req.waitMS, err = intField("wait_ms", "milliseconds", &f.waitMS, 0, lim.maxWaitMS); err != nil {
			return err
		}
	}
	if (a == actAcquire || a == actStatus) && !f.permits.absent() {
		if req.permits, err = intField("permits", "permits", &f.permits, 1, maxPermits); err != nil {
			return err
		}
	}
	if (a == actRelease || a == actExtend) && !f.slot.absent() {
		if req.slot, err = intField("slot", "slots", &f.slot, 0, maxPermits-1); err != nil {
			return err
		}
		req.hasSlot = true
	}
	if a == actAcquire && !f.lockDelayMS.absent() {
		n, err := intField("lock_delay_ms", "milliseconds", &f.lockDelayMS, 0, maxLockDelayMS)
		if err != nil {
			return err
		}
		// The delay record outlives the lock by the delay, and must not
		// outlive max_ttl (redlock/lockdelay.go).
		if req.ttl*1000+n > lim.maxTTL*1000 {
			return bad("lock_delay_ms: ttl %d s + lock_delay_ms %d is above max_ttl (%d s)", req.ttl, n, lim.maxTTL)
		}
		req.lockDelayMS, req.hasLockDelay = n, true
	}
	// keysOfOne: keys with one key is that key's lock, but keys still
	// cannot name a semaphore (the contract says so for any keys).
	if (req.keys != nil || req.keysOfOne) && req.permits > 0 {
		return bad("permits, keys: a semaphore has one name; send key with permits, or keys without")
	}
	if (req.keys != nil || req.keysOfOne) && req.hasSlot {
		return bad("slot, keys: a slot is a semaphore permit's; send key with slot, or keys without")
	}
	return nil
}

// parseToken reads token: required by release and extend; acquire and
// status ignore it.
func (f *lockFields) parseToken(req *lockRequest, _ *lockBounds) *badRequest {
	a := req.action
	if a != actRelease && a != actExtend {
		return nil
	}
	if f.token.absent() || f.token.str == "" {
		return bad("token: required for %s; send the token that acquire returned", a)
	}
	if !isToken(f.token.str) {
		return bad("token: must be the %d lowercase hex characters that acquire returned", tokenLen)
	}
	req.token = f.token.str
	return nil
}

// intField reads an integer field of unit in [lo, hi]: written as an
// integer (wantInt), then in range (intInRange).
func intField(field, unit string, v *jsonValue, lo, hi int64) (int64, *badRequest) {
	if err := wantInt(field, unit, v); err != nil {
		return 0, err
	}
	if unit != "seconds" && unit != "milliseconds" {
		unit = ""
	}
	return intInRange(field, unit, v, lo, hi)
}

// parseKeys reads the keys array: 1 to maxMultiKeys strings, each a key
// as checkText("key") takes it, no two the same.
func parseKeys(raw []byte) ([]string, *badRequest) {
	d := jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowInvalidUTF8(true))
	if _, err := d.ReadToken(); err != nil { // '['
		return nil, malformed(err)
	}
	var keys []string
	for d.PeekKind() != ']' {
		i := len(keys)
		if i == maxMultiKeys {
			n := i
			for d.PeekKind() != ']' {
				if err := d.SkipValue(); err != nil {
					return nil, malformed(err)
				}
				n++
			}
			return nil, bad("keys: %d keys is above the maximum of %d", n, maxMultiKeys)
		}
		v, err := readValue(d)
		if err != nil {
			return nil, malformed(err)
		}
		field := "keys[" + strconv.Itoa(i) + "]"
		if v.kind != kString {
			return nil, bad("%s: must be a string, got %s", field, kindNames[v.kind])
		}
		if err := checkText(field, &v, 1, maxKeyBytes); err != nil {
			return nil, err
		}
		if j := slices.Index(keys, v.str); j >= 0 {
			return nil, bad("%s: %s is keys[%d] again; every key of a set must be different", field, quoteShort(v.str), j)
		}
		keys = append(keys, v.str)
	}
	if len(keys) == 0 {
		return nil, bad("keys: must hold 1 to %d keys, got none", maxMultiKeys)
	}
	return keys, nil
}

func bad(format string, args ...any) *badRequest {
	return &badRequest{msg: fmt.Sprintf(format, args...)}
}

func wantString(field string, v *jsonValue) *badRequest {
	if v.kind == kNone || v.kind == kString {
		return nil
	}
	return bad("%s: must be a string, got %s", field, kindNames[v.kind])
}

// checkText applies the rules shared by key and namespace: minBytes to
// maxBytes bytes of valid UTF-8 without control characters (C0, DEL, C1).
func checkText(field string, v *jsonValue, minBytes, maxBytes int) *badRequest {
	s := v.str
	switch {
	case len(s) < minBytes:
		return bad("%s: must not be empty; send 1 to %d bytes", field, maxBytes)
	case len(s) > maxBytes:
		return bad("%s: %d bytes is above the maximum of %d bytes", field, len(s), maxBytes)
	case v.notText:
		return bad("%s: must be valid UTF-8", field)
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return bad("%s: control character %U at byte %d is not allowed", field, rune(c), i)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if unicode.IsControl(r) {
			return bad("%s: control character %U at byte %d is not allowed", field, r, i)
		}
		i += size
	}
	return nil
}

// wantInt accepts integers written as integers only: "30", 30.5, 30.0, 3e1,
// true and null are all refused.
func wantInt(field, unit string, v *jsonValue) *badRequest {
	if v.kind == kNumber && v.isInt {
		return nil
	}
	got := kindNames[v.kind]
	if v.kind == kNumber {
		got = quoteNumber(v.num)
	}
	return bad("%s: must be an integer number of %s, got %s", field, unit, got)
}

// intInRange reads an integer field (already checked by wantInt) in [lo,
// hi]. A unit ("" for none) follows the limit a refusal names: a ttl of
// 30000 meant as milliseconds is refused as "above the maximum of 600
// seconds", which says why (a newcomer's pass); "1 second", not "1
// seconds".
func intInRange(field, unit string, v *jsonValue, lo, hi int64) (int64, *badRequest) {
	n, err := strconv.ParseInt(v.num, 10, 64)
	neg := v.num[0] == '-'
	switch {
	case (err != nil && neg) || (err == nil && n < lo):
		return 0, bad("%s: %s is below the minimum of %s", field, quoteNumber(v.num), withUnit(lo, unit))
	case err != nil || n > hi:
		return 0, bad("%s: %s is above the maximum of %s", field, quoteNumber(v.num), withUnit(hi, unit))
	}
	return n, nil
}

// withUnit is n followed by unit (plural), singular for 1; n alone when
// unit is "".
func withUnit(n int64, unit string) string {
	switch {
	case unit == "":
		return strconv.FormatInt(n, 10)
	case n == 1:
		unit = strings.TrimSuffix(unit, "s")
	}
	return strconv.FormatInt(n, 10) + " " + unit
}

func isToken(s string) bool {
	if len(s) != tokenLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// quoteShort quotes a user-supplied string for a message, cut to 32 bytes.
func quoteShort(s string) string { return quoteCut(s, 32) }

// quoteCut quotes a user-supplied string for a message, cut to max bytes
// (at a rune boundary) with "…" after the quote when cut.
func quoteCut(s string, max int) string {
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}

// quoteNumber shows a number as written, cut to 24 bytes.
func quoteNumber(b string) string {
	if len(b) <= 24 {
		return b
	}
	return b[:24] + "…"
}
