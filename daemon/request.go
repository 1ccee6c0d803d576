package daemon

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits of the action API's fields.
const (
	maxKeyBytes       = 512
	maxNamespaceBytes = 128
	tokenLen          = 32
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
	numActions
)

var actionNames = [numActions]string{"unknown", "acquire", "release", "extend", "status"}

func (a action) String() string { return actionNames[a] }

// lockRequest is a decoded and validated body of POST /v1/lock.
type lockRequest struct {
	action    action
	key       string
	namespace string
	token     string // "" for acquire and status
	ttl       int64  // seconds, defaulted
	waitMS    int64
}

// limits are the configured bounds a request is checked against.
type limits struct {
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
	num     string // kNumber, as written
	isInt   bool   // kNumber: no fraction and no exponent
}

// absent reports whether the field is missing or null; null means absent
// for every field, as many client libraries send null for "unset".
func (v *jsonValue) absent() bool { return v.kind == kNone || v.kind == kNull }

// parseLockRequest decodes body strictly — one JSON object, known fields
// only (exact, case-sensitive names), each at most once, strings where
// strings belong, integers written as integers, nothing after the object —
// and validates it against lim. On error, the returned action is the
// request's action when it was already known, for metrics.
//
// It is a small hand-written scanner rather than encoding/json because
// encoding/json matches field names case-insensitively, lets a repeated
// field silently win, accepts "30" into a json.Number, and uses reflection
// on every request.
//
// The body is copied into one string up front (body is usually a pooled
// buffer); names and values without escapes are substrings of it, so a
// request costs one allocation here rather than one per name and value.
func parseLockRequest(body []byte, lim *limits) (lockRequest, action, *badRequest) {
	var f struct{ action, key, ttl, token, namespace, waitMS jsonValue }
	if err := scanObject(string(body), func(name string, v jsonValue) (nested bool, err *badRequest) {
		var dst *jsonValue
		switch name {
		case "action":
			dst, err = &f.action, wantString(name, &v)
		case "key":
			dst, err = &f.key, wantString(name, &v)
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
		default:
			return false, bad("body: unknown field %s; the fields are action, key, ttl, token, namespace, wait_ms", quoteShort(name))
		}
		if dst.kind != kNone {
			return false, bad("body: field %q appears more than once", name)
		}
		*dst = v
		return nested, err
	}); err != nil {
		return lockRequest{}, actUnknown, err
	}

	var req lockRequest
	switch f.action.str {
	case "", "acquire":
		req.action = actAcquire
	case "release":
		req.action = actRelease
	case "extend":
		req.action = actExtend
	case "status":
		req.action = actStatus
	default:
		return req, actUnknown, bad("action: %s is not one of acquire, release, extend, status", quoteShort(f.action.str))
	}
	a := req.action
	if f.key.absent() {
		return req, a, bad("key: required, a string of 1 to %d bytes", maxKeyBytes)
	}
	if err := checkText("key", &f.key, 1, maxKeyBytes); err != nil {
		return req, a, err
	}
	req.key = f.key.str
	if err := checkText("namespace", &f.namespace, 0, maxNamespaceBytes); err != nil {
		return req, a, err
	}
	req.namespace = f.namespace.str
	// ttl is used by acquire and extend only, wait_ms by acquire only. An
	// action that does not use a field ignores it entirely — any value of
	// any type, even an object, is accepted and has no effect (req.ttl
	// stays 0 for release and status) — so that a client may send one body
	// shape for every action, and so that "ttl is ignored by release and
	// status" (the API documentation) holds literally. The field must still be
	// well-formed JSON, known by name, and appear at most once: those are
	// rules of the body, not of the field.
	if a == actAcquire || a == actExtend {
		req.ttl = lim.defaultTTL
		if !f.ttl.absent() {
			if err := wantInt("ttl", "seconds", &f.ttl); err != nil {
				return req, a, err
			}
			n, err := intInRange("ttl", &f.ttl, 1, lim.maxTTL)
			if err != nil {
				return req, a, err
			}
			req.ttl = n
		}
	}
	if a == actAcquire && !f.waitMS.absent() {
		if err := wantInt("wait_ms", "milliseconds", &f.waitMS); err != nil {
			return req, a, err
		}
		n, err := intInRange("wait_ms", &f.waitMS, 0, lim.maxWaitMS)
		if err != nil {
			return req, a, err
		}
		req.waitMS = n
	}
	// token: required by release and extend; acquire and status ignore it.
	if a == actRelease || a == actExtend {
		if f.token.absent() || f.token.str == "" {
			return req, a, bad("token: required for %s; send the token that acquire returned", a)
		}
		if !isToken(f.token.str) {
			return req, a, bad("token: must be the %d lowercase hex characters that acquire returned", tokenLen)
		}
		req.token = f.token.str
	}
	return req, a, nil
}

func bad(format string, args ...any) *badRequest {
	return &badRequest{msg: fmt.Sprintf(format, args...)}
}

func wantString(field string, v *jsonValue) *badRequest {
	if v.kind == kNone || v.kind == kNull || v.kind == kString {
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

// wantInt accepts null and integers written as integers only: "30", 30.5,
// 30.0, 3e1 and true are all refused.
func wantInt(field, unit string, v *jsonValue) *badRequest {
	if v.kind == kNull || (v.kind == kNumber && v.isInt) {
		return nil
	}
	got := kindNames[v.kind]
	if v.kind == kNumber {
		got = quoteNumber(v.num)
	}
	return bad("%s: must be an integer number of %s, got %s", field, unit, got)
}

// intInRange reads an integer field (already checked by wantInt) in [lo, hi].
func intInRange(field string, v *jsonValue, lo, hi int64) (int64, *badRequest) {
	n, err := strconv.ParseInt(v.num, 10, 64)
	neg := v.num[0] == '-'
	switch {
	case (err != nil && neg) || (err == nil && n < lo):
		return 0, bad("%s: %s is below the minimum of %d", field, quoteNumber(v.num), lo)
	case err != nil || n > hi:
		return 0, bad("%s: %s is above the maximum of %d", field, quoteNumber(v.num), hi)
	}
	return n, nil
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

// scanObject scans body as one JSON object and calls field for each member
// in order; the first error (of the syntax or of field) ends the scan. A
// member whose value is an object or an array is skipped (its syntax
// checked) when field returns nested true, and refused otherwise: every
// field but the ignorable ttl and wait_ms refuses those by type already.
//
// A body that is not an object is scanned whole first, so that malformed
// JSON ("not json", "tru", "null null") is called malformed, at the byte
// where it goes wrong, and "must be a JSON object, got …" is kept for
// well-formed values of another type.
func scanObject(body string, field func(name string, v jsonValue) (nested bool, err *badRequest)) *badRequest {
	s := scanner{b: body}
	s.ws()
	if s.eof() {
		return bad(`body: empty; send a JSON object such as {"action":"acquire","key":"order:pay:1"}`)
	}
	if s.b[s.i] != '{' {
		return s.notObject()
	}
	s.i++
	s.ws()
	if !s.eof() && s.b[s.i] == '}' {
		s.i++
		return s.end()
	}
	for {
		s.ws()
		if s.eof() || s.b[s.i] != '"' {
			return s.malformed("expected a field name in double quotes")
		}
		name, notText, err := s.str()
		if err != nil {
			return err
		}
		if notText {
			return s.malformed("field name is not valid UTF-8")
		}
		s.ws()
		if s.eof() || s.b[s.i] != ':' {
			return s.malformed("expected ':' after a field name")
		}
		s.i++
		s.ws()
		v, err := s.value()
		if err != nil {
			return err
		}
		nested, err := field(name, v)
		if err != nil {
			return err
		}
		if v.kind == kObject || v.kind == kArray {
			if !nested {
				// Every other field rejects these; field must have said so.
				return s.malformed("nested values are not accepted")
			}
			if err := s.skipNested(); err != nil {
				return err
			}
		}
		s.ws()
		if s.eof() {
			return s.malformed("expected ',' or '}'")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return s.end()
		default:
			return s.malformed("expected ',' or '}'")
		}
	}
}

// notObject answers a body whose first byte (at s.i) is not '{': malformed
// if it is not one JSON value, else "must be a JSON object, got …".
func (s *scanner) notObject() *badRequest {
	if c := s.b[s.i]; c != '"' && c != '[' && c != '-' && (c < '0' || c > '9') && c != 't' && c != 'f' && c != 'n' {
		return s.malformed(`expected a JSON object such as {"action":"acquire","key":"order:pay:1"}`)
	}
	v, err := s.value()
	if err != nil {
		return err
	}
	if v.kind == kArray {
		if err := s.skipNested(); err != nil {
			return err
		}
	}
	s.ws()
	if !s.eof() {
		return s.malformed("unexpected data after the JSON value")
	}
	got := kindNames[v.kind]
	if v.kind == kTrue || v.kind == kFalse {
		got = "a boolean"
	}
	return bad("body: must be a JSON object, got %s", got)
}

// skipNested scans past the object or array starting at s.i, checking its
// syntax. It is off the usual path (only an ignored field, or a body that
// is an array, holds one), so it may allocate when nesting is deep.
func (s *scanner) skipNested() *badRequest {
	const (
		afterOpen  = iota // just after '{' or '[': a member or the close
		afterComma        // a member is required
		afterValue        // ',' or the close
	)
	var buf [16]byte
	stack := append(buf[:0], s.b[s.i])
	s.i++
	state := afterOpen
	for {
		s.ws()
		top := stack[len(stack)-1]
		closer, what := byte('}'), "expected ',' or '}'"
		if top == '[' {
			closer, what = ']', "expected ',' or ']'"
		}
		if s.eof() {
			if state == afterValue {
				return s.malformed(what)
			}
			return s.malformed("expected a value")
		}
		c := s.b[s.i]
		if c == closer && state != afterComma {
			s.i++
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return nil
			}
			state = afterValue
			continue
		}
		if state == afterValue {
			if c != ',' {
				return s.malformed(what)
			}
			s.i++
			state = afterComma
			continue
		}
		if top == '{' {
			if c != '"' {
				return s.malformed("expected a field name in double quotes")
			}
			if _, _, err := s.str(); err != nil {
				return err
			}
			s.ws()
			if s.eof() || s.b[s.i] != ':' {
				return s.malformed("expected ':' after a field name")
			}
			s.i++
			s.ws()
			if s.eof() {
				return s.malformed("expected a value")
			}
			c = s.b[s.i]
		}
		if c == '{' || c == '[' {
			stack = append(stack, c)
			s.i++
			state = afterOpen
			continue
		}
		if _, err := s.value(); err != nil {
			return err
		}
		state = afterValue
	}
}

type scanner struct {
	b string
	i int
}

func (s *scanner) eof() bool { return s.i >= len(s.b) }

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) end() *badRequest {
	s.ws()
	if !s.eof() {
		return bad("body: unexpected data after the JSON object at byte %d", s.i)
	}
	return nil
}

func (s *scanner) malformed(what string) *badRequest {
	return bad("body: malformed JSON at byte %d: %s", s.i, what)
}

func (s *scanner) value() (jsonValue, *badRequest) {
	if s.eof() {
		return jsonValue{}, s.malformed("expected a value")
	}
	switch c := s.b[s.i]; {
	case c == '"':
		str, notText, err := s.str()
		return jsonValue{kind: kString, str: str, notText: notText}, err
	case c == '-' || (c >= '0' && c <= '9'):
		num, isInt, err := s.number()
		return jsonValue{kind: kNumber, num: num, isInt: isInt}, err
	case c == 't':
		return jsonValue{kind: kTrue}, s.literal("true")
	case c == 'f':
		return jsonValue{kind: kFalse}, s.literal("false")
	case c == 'n':
		return jsonValue{kind: kNull}, s.literal("null")
	case c == '{':
		return jsonValue{kind: kObject}, nil
	case c == '[':
		return jsonValue{kind: kArray}, nil
	}
	return jsonValue{}, s.malformed("expected a value")
}

func (s *scanner) literal(lit string) *badRequest {
	if len(s.b)-s.i < len(lit) || s.b[s.i:s.i+len(lit)] != lit {
		return s.malformed("invalid literal; the JSON literals are true, false and null")
	}
	s.i += len(lit)
	return nil
}

// number scans a JSON number (RFC 8259 grammar) at s.i.
func (s *scanner) number() (num string, isInt bool, err *badRequest) {
	start := s.i
	j := s.i
	digits := func() int {
		k := j
		for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
			j++
		}
		return j - k
	}
	if s.b[j] == '-' {
		j++
	}
	switch {
	case j < len(s.b) && s.b[j] == '0':
		j++
	case digits() == 0:
		s.i = j
		return "", false, s.malformed("invalid number")
	}
	isInt = true
	if j < len(s.b) && s.b[j] == '.' {
		isInt = false
		j++
		if digits() == 0 {
			s.i = j
			return "", false, s.malformed("invalid number")
		}
	}
	if j < len(s.b) && (s.b[j] == 'e' || s.b[j] == 'E') {
		isInt = false
		j++
		if j < len(s.b) && (s.b[j] == '+' || s.b[j] == '-') {
			j++
		}
		if digits() == 0 {
			s.i = j
			return "", false, s.malformed("invalid number")
		}
	}
	s.i = j
	return s.b[start:j], isInt, nil
}

// str scans the JSON string at s.i (a '"') and returns its value; notText
// reports invalid UTF-8 or a lone surrogate escape, which the caller turns
// into a field error rather than a syntax error.
func (s *scanner) str() (val string, notText bool, err *badRequest) {
	start := s.i + 1
	j := start
	esc, ascii := false, true
	for {
		if j >= len(s.b) {
			s.i = len(s.b)
			return "", false, s.malformed("unterminated string")
		}
		c := s.b[j]
		if c == '"' {
			break
		}
		if c == '\\' {
			esc = true
			j += 2
			continue
		}
		if c < 0x20 {
			s.i = j
			return "", false, s.malformed("control character in a string (escape it)")
		}
		ascii = ascii && c < utf8.RuneSelf
		j++
	}
	raw := s.b[start:j]
	s.i = j + 1
	if !esc {
		return raw, !ascii && !utf8.ValidString(raw), nil
	}
	out := make([]byte, 0, len(raw))
	for k := 0; k < len(raw); {
		c := raw[k]
		if c != '\\' {
			out = append(out, c)
			k++
			continue
		}
		if k+1 >= len(raw) {
			s.i = start + k
			return "", false, s.malformed("invalid escape")
		}
		switch e := raw[k+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(raw[k+2:])
			if !ok {
				s.i = start + k
				return "", false, s.malformed(`invalid \u escape`)
			}
			k += 6
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if k+6 <= len(raw) && raw[k] == '\\' && raw[k+1] == 'u' {
					r2, ok = hex4(raw[k+2:])
				}
				if d := utf16.DecodeRune(r, r2); ok && d != utf8.RuneError {
					r = d
					k += 6
				} else {
					notText = true
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			s.i = start + k
			return "", false, s.malformed("invalid escape")
		}
		k += 2
	}
	return string(out), notText || !utf8.Valid(out), nil
}

func hex4(b string) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for i := range 4 {
		c := b[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
