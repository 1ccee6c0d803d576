package daemon

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/redlockd/redlockd/internal/keyenc"
	"github.com/redlockd/redlockd/redlock/idempotency"
)

// The idempotency actions of POST /v1/lock (docs/idempotency.md): records
// kept on the masters by redlock/idempotency, scoped by account, namespace
// and the client's key.

// idemAction is one idempotency action.
type idemAction uint8

const (
	idemBegin idemAction = iota + 1
	idemComplete
	idemAbort
	idemGet
	idemExtend
)

var idemActionNames = map[string]idemAction{
	"idem_begin": idemBegin, "idem_complete": idemComplete, "idem_abort": idemAbort,
	"idem_get": idemGet, "idem_extend": idemExtend,
}

func (a idemAction) String() string {
	for n, v := range idemActionNames {
		if v == a {
			return n
		}
	}
	return "idem_unknown"
}

// Defaults and limits of the idempotency fields, in seconds.
const (
	defaultIdemLease     = 30
	defaultIdemRetention = 24 * 60 * 60
	// idemBodySlack is what an idempotency body may hold beyond its answer:
	// the other fields and their JSON.
	idemBodySlack = 16 << 10
	// idemEscapeFactor is the most JSON bytes one answer byte can take:
	// a \u00XX escape is 6 bytes (RFC 8259 section 7), more than base64's
	// 4/3. The answer itself is measured decoded, by the Store.
	idemEscapeFactor = 6
)

// idemKey is the base of an idempotency record's Redis keys (the record
// "<base>:rec" and its lease "<base>:lease", redlock/idempotency):
//
//	prefix + "idem:" + enc(account) + ":" + enc(namespace) + ":" + enc(key)
//
// injective for the reason redisKey is (keys.go), and never a lock key:
// it does not start with "lock:" after the prefix.
func idemKey(prefix, account, namespace, key string) string {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString("idem:")
	keyenc.WritePart(&b, account)
	b.WriteByte(':')
	keyenc.WritePart(&b, namespace)
	b.WriteByte(':')
	keyenc.WritePart(&b, key)
	return b.String()
}

// idemBudgetKey is the Redis key of account's idempotency.Budget set
// (with "<it>:sz" beside it):
//
//	prefix + "idem:" + enc(account) + ":budget"
//
// never a record's or a lease's: those have three encoded parts after
// "idem:" (idemKey), and "budget" cannot start one (an encoded part starts
// with a digit).
func idemBudgetKey(prefix, account string) string {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString("idem:")
	keyenc.WritePart(&b, account)
	b.WriteString(":budget")
	return b.String()
}

// idemBodyLimit is the largest idempotency body: an answer of the Store's
// limit (body and headers) in its most escaped JSON, plus the other
// fields. The Store then checks the decoded answer against its limit.
func idemBodyLimit(st *idempotency.Store) int64 {
	return int64(st.MaxAnswerBytes())*idemEscapeFactor + idemBodySlack
}

// idemActionOf returns the idempotency action a body asks for; ok is false
// for every other body, which the lock parser then judges. The cheap test
// comes first: lock requests never contain "idem_". A body that is not one
// valid JSON object is not an idempotency action here.
func idemActionOf(body []byte) (idemAction, bool) {
	if !bytes.Contains(body, []byte(`"idem_`)) {
		return 0, false
	}
	var head struct {
		Action string `json:"action"`
	}
	// The first JSON value only: data after it is refused by the action's
	// own parser, which names it (parseIdemRequest), instead of sending
	// the body to the lock requests' parser, which named a field of the
	// action as unknown (a black-box pass: `{"action":"idem_begin",…,"body":"x"} {}`
	// answered `unknown field "body"`).
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&head); err != nil {
		if !isDepthErr(err) {
			return 0, false
		}
		// Nested deeper than Unmarshal goes: read the action from the
		// tokens, or an idempotency body of deeply nested JSON would look
		// like a lock request and be refused with the lock requests'
		// smaller size limit (413) instead of a 400 naming the nesting
		// (parseIdemRequest, jsonErr).
		return idemActionOfTokens(body)
	}
	a, ok := idemActionNames[head.Action]
	return a, ok
}

// isDepthErr reports encoding/json's refusal of JSON nested more than
// 10,000 levels deep.
func isDepthErr(err error) bool {
	return strings.Contains(err.Error(), "exceeded max depth")
}

// idemActionOfTokens is idemActionOf for a body Unmarshal cannot read for
// its depth: it reads the top-level fields as tokens, which have no depth
// limit, the last "action" counting as for Unmarshal. About ten times
// slower than Unmarshal on an ordinary body, so only the fallback.
func idemActionOfTokens(body []byte) (idemAction, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0, false
	}
	action := ""
	for dec.More() {
		name, err := dec.Token()
		if err != nil {
			return 0, false
		}
		t, err := dec.Token()
		if err != nil {
			return 0, false
		}
		if _, ok := t.(json.Delim); ok { // an object or array: skipped
			for depth := 1; depth > 0; {
				t, err := dec.Token()
				if err != nil {
					return 0, false
				}
				switch t {
				case json.Delim('{'), json.Delim('['):
					depth++
				case json.Delim('}'), json.Delim(']'):
					depth--
				}
			}
			continue
		}
		if name == "action" {
			action, _ = t.(string)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return 0, false
	}
	a, ok := idemActionNames[action]
	return a, ok
}

// notTextField names the first string of body, field path and all
// ("key", "answer.body", "answer.headers.X-Id"), that is invalid UTF-8 or
// holds a lone surrogate escape ("\ud800"); ok is false when there is
// none, or when body is not JSON (the decoder then says where). encoding/json
// would turn either into U+FFFD: two different keys would name one
// record, and two different bodies give one fingerprint — a request
// answered with another's stored answer.
func notTextField(body []byte) (field string, ok bool) {
	if !bytes.Contains(body, []byte(`\u`)) && utf8.Valid(body) {
		return "", false
	}
	d := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	for {
		switch d.PeekKind() {
		case 0:
			return "", false
		case '"':
			raw, err := d.ReadValue()
			if err != nil {
				return "", false
			}
			if _, err := jsontext.AppendUnquote(nil, raw); err == nil {
				continue
			}
			var path []string
			for tok := range d.StackPointer().Tokens() {
				path = append(path, tok)
			}
			if kind, n := d.StackIndex(d.StackDepth()); kind == '{' && n%2 == 1 {
				// A member's name, not its value.
				path[len(path)-1] = "a field name"
				if len(path) == 1 {
					// "request body", not "body": body is a field.
					return "request body: a field name", true
				}
			}
			if len(path) == 0 {
				return "request body", true
			}
			return strings.Join(path, "."), true
		default:
			if _, err := d.ReadToken(); err != nil {
				return "", false
			}
		}
	}
}

// idemRequestBody is the JSON body of an idempotency action; unknown
// fields are refused.
type idemRequestBody struct {
	Action      string          `json:"action"`
	Key         *string         `json:"key"`
	Namespace   *string         `json:"namespace"`
	Fingerprint *string         `json:"fingerprint"`
	Body        *string         `json:"body"`
	BodyBase64  *string         `json:"body_base64"`
	Lease       json.RawMessage `json:"lease"`
	Retention   json.RawMessage `json:"retention"`
	Token       *string         `json:"token"`
	Retryable   *bool           `json:"retryable"`
	Answer      *idemAnswerIn   `json:"answer"`
}

// idemFields are the fields each action reads besides action, key and
// namespace; any other is refused, not ignored (an answer sent with a
// retryable abort was dropped without a word).
var idemFields = map[idemAction][]string{
	idemBegin:    {"fingerprint", "body", "body_base64", "lease", "retention"},
	idemComplete: {"token", "answer"},
	idemAbort:    {"token", "retryable", "answer"},
	idemExtend:   {"token", "lease"},
	idemGet:      {},
}

// onlyFieldsOf refuses a field that action a does not read, and an answer
// on an abort that may be retried (it stores nothing).
func (b *idemRequestBody) onlyFieldsOf(a idemAction) *badRequest {
	given := []struct {
		name string
		set  bool
	}{
		{"fingerprint", b.Fingerprint != nil}, {"body", b.Body != nil}, {"body_base64", b.BodyBase64 != nil},
		{"lease", b.Lease != nil}, {"retention", b.Retention != nil}, {"token", b.Token != nil},
		{"retryable", b.Retryable != nil}, {"answer", b.Answer != nil},
	}
	for _, g := range given {
		if g.set && !slices.Contains(idemFields[a], g.name) {
			return bad("%s: not a field of %s, which reads action, key, namespace%s", g.name, a, prefixEach(", ", idemFields[a]))
		}
	}
	if a == idemAbort && b.Answer != nil && (b.Retryable == nil || *b.Retryable) {
		return bad("answer: only with retryable false: an abort that may be retried stores no answer (the next idem_begin starts afresh)")
	}
	return nil
}

// prefixEach is each of names with sep before it.
func prefixEach(sep string, names []string) string {
	var b strings.Builder
	for _, n := range names {
		b.WriteString(sep)
		b.WriteString(n)
	}
	return b.String()
}

type idemAnswerIn struct {
	Status     *int              `json:"status"`
	Headers    map[string]string `json:"headers"`
	Body       *string           `json:"body"`
	BodyBase64 *string           `json:"body_base64"`
}

// idemRequest is a decoded and validated idempotency body.
type idemRequest struct {
	action      idemAction
	key         string
	namespace   string
	fingerprint string
	lease       time.Duration
	retention   time.Duration
	token       string
	retryable   bool
	answer      *idempotency.Answer
}

// parseIdemRequest decodes body strictly (one object, known fields only)
// and checks every field against its limit; messages name the field.
func parseIdemRequest(body []byte, a idemAction, lim *lockBounds, st *idempotency.Store) (idemRequest, *badRequest) {
	if field, ok := notTextField(body); ok {
		return idemRequest{}, bad("%s: must be valid UTF-8 (JSON text is; send bytes that are not text as body_base64)", field)
	}
	if berr := exactNames(body); berr != nil {
		return idemRequest{}, berr
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	var b idemRequestBody
	if err := dec.Decode(&b); err != nil {
		// "request body", not "body": body is one of the fields.
		return idemRequest{}, bad("request body: %s; the fields of %s are action, key, namespace%s", jsonErr(err), a, prefixEach(", ", idemFields[a]))
	}
	if at, ok := dataAfter(body, int(dec.InputOffset())); ok {
		return idemRequest{}, bad("request body: unexpected data after the JSON object at byte %d", at)
	}
	req := idemRequest{action: a, retryable: true}
	if berr := b.onlyFieldsOf(a); berr != nil {
		return req, berr
	}
	if b.Key == nil {
		return req, bad("key: required, a string of 1 to %d bytes", maxKeyBytes)
	}
	if err := checkText("key", &jsonValue{kind: kString, str: *b.Key}, 1, maxKeyBytes); err != nil {
		return req, err
	}
	req.key = *b.Key
	if b.Namespace != nil {
		if err := checkText("namespace", &jsonValue{kind: kString, str: *b.Namespace}, 0, maxNamespaceBytes); err != nil {
			return req, err
		}
		req.namespace = *b.Namespace
	}
	if err := req.leases(&b, lim, st); err != nil {
		return req, err
	}
	if err := req.outcome(&b); err != nil {
		return req, err
	}
	return req, nil
}

// leases reads an idem_begin's fingerprint, lease and retention, or an
// idem_extend's lease, from b into req, each checked against its limit.
func (req *idemRequest) leases(b *idemRequestBody, lim *lockBounds, st *idempotency.Store) *badRequest {
	switch req.action {
	case idemBegin:
		fp, err := fingerprintOf(b)
		if err != nil {
			return err
		}
		req.fingerprint = fp
		maxRet := int64(st.MaxRetention() / time.Second)
		// The default lease fits the daemon's limits, as default_ttl
		// fits max_ttl: at most max_ttl, and half the longest retention.
		n, err := seconds("lease", b.Lease, max(min(defaultIdemLease, lim.maxTTL, maxRet/2), 1), 1, lim.maxTTL)
		if err != nil {
			return err
		}
		req.lease = time.Duration(n) * time.Second
		n, err = seconds("retention", b.Retention, min(defaultIdemRetention, maxRet), 1, maxRet)
		if err != nil {
			return err
		}
		req.retention = time.Duration(n) * time.Second
		if req.retention < 2*req.lease {
			// The record must outlive the lease so that a retry after the
			// lease sees the attempt (expired_in_progress), never a
			// blind started.
			if b.Retention == nil {
				// The client sent no retention: its lease is what is too
				// long for the retention it gets.
				if 2*req.lease > time.Duration(maxRet)*time.Second {
					return bad("lease: %d seconds needs a retention of at least twice it (%d seconds), above the maximum retention of %d seconds (idempotency_max_retention): send a lease of at most %d", int64(req.lease/time.Second), 2*int64(req.lease/time.Second), maxRet, maxRet/2)
				}
				return bad("lease: %d seconds needs a retention of at least twice it (%d seconds), above the default retention of %d seconds: send a longer retention, or a shorter lease", int64(req.lease/time.Second), 2*int64(req.lease/time.Second), n)
			}
			return bad("retention: %d seconds must be at least twice the lease (%d seconds), so that a retry after the lease still sees the attempt", n, int64(req.lease/time.Second))
		}
	case idemExtend:
		n, err := seconds("lease", b.Lease, min(defaultIdemLease, lim.maxTTL), 1, lim.maxTTL)
		if err != nil {
			return err
		}
		req.lease = time.Duration(n) * time.Second
		if maxRet := int64(st.MaxRetention() / time.Second); 2*n > maxRet {
			return bad("lease: %d seconds: the record is kept twice the lease from now, above the maximum retention of %d seconds (idempotency_max_retention): the lease can be at most %d", n, maxRet, maxRet/2)
		}
	}
	return nil
}

// outcome reads the token an idem_complete, idem_abort or idem_extend
// names, and the answer an idem_complete (or a final idem_abort) stores,
// from b into req.
func (req *idemRequest) outcome(b *idemRequestBody) *badRequest {
	if req.action == idemComplete || req.action == idemAbort || req.action == idemExtend {
		if b.Token == nil {
			return bad("token: required for %s; send the %d lowercase hex characters idem_begin returned", req.action, tokenLen)
		}
		if !isToken(*b.Token) {
			if len(*b.Token) == tokenLen {
				// The length is right: say what is wrong (a black-box
				// pass read "…32 characters…, got 32 characters").
				return bad("token: must be the %d lowercase hex characters idem_begin returned; it has a character that is not lowercase hex (0-9, a-f)", tokenLen)
			}
			return bad("token: must be the %d lowercase hex characters idem_begin returned, got %d characters", tokenLen, len(*b.Token))
		}
		req.token = *b.Token
	}
	if req.action == idemAbort && b.Retryable != nil {
		req.retryable = *b.Retryable
	}
	if req.action == idemComplete || (req.action == idemAbort && !req.retryable) {
		if b.Answer == nil {
			if req.action == idemAbort {
				return bad("answer: required for idem_abort with retryable false: the failure's answer, replayed to every retry")
			}
			return bad("answer: required for idem_complete: {\"status\": 100 to 599, \"headers\": {…}, \"body\" or \"body_base64\"}")
		}
		ans, err := answerOf(b.Answer)
		if err != nil {
			return err
		}
		req.answer = ans
	}
	return nil
}

// jsonErr says what is wrong with a body encoding/json refused, without
// quoting more than a field name.
func jsonErr(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q must be %s, got %s", te.Field, jsonTypeName(te.Type), jsonValueName(te.Value))
	}
	if s, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown field " + quoteShort(strings.Trim(s, `"`))
	}
	if isDepthErr(err) {
		return "nested deeper than 10000 levels"
	}
	return "not a JSON object"
}

// jsonTypeName names a Go type by the JSON it takes, never by its Go name.
func jsonTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "another JSON type"
}

// jsonValueName names the JSON value encoding/json reports ("string",
// "number", "object", …) with its article.
func jsonValueName(v string) string {
	switch {
	case v == "object", v == "array":
		return "an " + v
	case strings.HasPrefix(v, "number"):
		return "a number"
	case v == "string", v == "bool":
		return map[string]string{"string": "a string", "bool": "true or false"}[v]
	}
	return v
}

// seconds reads an integer field in seconds, def when absent. As with the
// lock path's ttl, only an integer written as one is taken: "30", 30.5,
// 3e1, true and null are refused.
func seconds(field string, raw json.RawMessage, def, lo, hi int64) (int64, *badRequest) {
	if raw == nil {
		return def, nil
	}
	s := string(raw)
	v := &jsonValue{kind: kNumber, num: s, isInt: !strings.ContainsAny(s, ".eE")}
	switch s[0] {
	case '"':
		v.kind = kString
	case 'n':
		v.kind = kNull
	case 't':
		v.kind = kTrue
	case 'f':
		v.kind = kFalse
	case '{':
		v.kind = kObject
	case '[':
		v.kind = kArray
	}
	return intField(field, "seconds", v, lo, hi)
}

// fingerprintOf is the request's fingerprint: the client's own (64
// lowercase hex characters), or the SHA-256 of the exact bytes of body
// (its UTF-8) or body_base64 (decoded): the canonical form is the bytes
// the client names, unchanged (docs/idempotency.md).
func fingerprintOf(b *idemRequestBody) (string, *badRequest) {
	n := 0
	for _, p := range []*string{b.Fingerprint, b.Body, b.BodyBase64} {
		if p != nil {
			n++
		}
	}
	if n != 1 {
		return "", bad("fingerprint: send exactly one of fingerprint (SHA-256, 64 lowercase hex characters), body or body_base64 (the daemon hashes the bytes)")
	}
	var raw []byte
	switch {
	case b.Fingerprint != nil:
		fp := *b.Fingerprint
		switch {
		case len(fp) != 64:
			return "", bad("fingerprint: must be 64 lowercase hex characters (a SHA-256), got %d characters", len(fp))
		case strings.Trim(fp, "0123456789abcdef") != "":
			// Name what is wrong: uppercase hex is the usual case.
			what := "a character that is not lowercase hex (0-9, a-f)"
			if strings.Trim(fp, "0123456789abcdefABCDEF") == "" {
				what = "uppercase hex: send it in lowercase"
			}
			return "", bad("fingerprint: must be 64 lowercase hex characters (a SHA-256); it has %s", what)
		}
		return fp, nil
	case b.Body != nil:
		raw = []byte(*b.Body)
	default:
		var err error
		if raw, err = base64.StdEncoding.DecodeString(*b.BodyBase64); err != nil {
			return "", bad("body_base64: not standard base64 (RFC 4648 section 4, with padding)")
		}
	}
	h := sha256.Sum256(raw)
	return hex.EncodeToString(h[:]), nil
}

// answerOf checks an answer's fields; its size is checked by the Store.
func answerOf(in *idemAnswerIn) (*idempotency.Answer, *badRequest) {
	if in.Status == nil {
		return nil, bad("answer.status: required, an HTTP status code from 100 to 599")
	}
	if *in.Status < 100 || *in.Status > 599 {
		return nil, bad("answer.status: %d is outside 100 to 599 (an HTTP status code)", *in.Status)
	}
	if in.Body != nil && in.BodyBase64 != nil {
		return nil, bad("answer: send body or body_base64, not both")
	}
	const maxHeaders = 16
	if len(in.Headers) > maxHeaders {
		return nil, bad("answer.headers: %d headers is above the maximum of %d", len(in.Headers), maxHeaders)
	}
	names := make(map[string]string, len(in.Headers))
	for k, v := range in.Headers {
		if k == "" || strings.ContainsAny(k, " :\r\n\t") {
			return nil, bad("answer.headers: %s is not a valid header name (empty, or with a space, colon, tab, CR or LF)", quoteShort(k))
		}
		if strings.ContainsAny(v, "\r\n") {
			return nil, bad("answer.headers: the value of %s holds a CR or LF, which no header value may", quoteShort(k))
		}
		// Header names are case-insensitive: two spellings of one name
		// would replay as one, and which value is unknowable.
		c := strings.ToLower(k)
		if other, dup := names[c]; dup {
			a, b := min(k, other), max(k, other)
			return nil, bad("answer.headers: %s and %s name the same header (names are case-insensitive); send it once", quoteShort(a), quoteShort(b))
		}
		names[c] = k
	}
	a := &idempotency.Answer{Status: *in.Status, Headers: in.Headers}
	switch {
	case in.Body != nil:
		a.Body = []byte(*in.Body)
	case in.BodyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*in.BodyBase64)
		if err != nil {
			return nil, bad("answer.body_base64: not standard base64 (RFC 4648 section 4, with padding)")
		}
		a.Body = b
	}
	return a, nil
}
