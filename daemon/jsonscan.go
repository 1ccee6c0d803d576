package daemon

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// scanObject decodes body as one JSON object and calls field for each
// member in order, with names and values as jsontext reads them; the first
// error (of the syntax or of field) ends the scan. A member whose value is
// an object or an array is skipped (its syntax checked) when field returns
// nested true, and refused otherwise: every field but keys and the
// ignorable ttl and wait_ms refuses those by type already. An array's
// text is in jsonValue.raw (keys reads it: readStrings).
//
// jsontext (github.com/go-json-experiment/json, the proposed encoding/json
// v2) checks the syntax strictly (RFC 8259, nothing after the value) and
// matches nothing by name; repeated names are allowed through to field,
// which names the repeated field in its answer. Invalid UTF-8 and lone
// surrogate escapes in a string value are reported to field as notText, so
// the answer names the field rather than the body.
//
// It replaced a 580-line hand-written scanner. Cost, measured on two
// shared cores: BenchmarkParse 0.52–0.68 µs and 1 allocation per body with
// the scanner, 1.2–2.5 µs and 15 with jsontext; BenchmarkHTTP/acquire 88
// and 96 allocations per request. The daemon over HTTP at c=64 (cd bench
// && go run . -targets http -conc 64 -scenarios healthy -down3 ""
// -duration 5s, five runs of each build, alternating) gave 835–3154
// cycles/s (mean 1901) with the scanner and 787–2297 (mean 1732) with
// jsontext, at a load average of 9 to 20 from other work: the difference
// (−9% of the means) is inside the run-to-run spread (±50%), and the ~1 µs
// per request that the micro-benchmarks resolve is about 1% of a
// request's CPU time. Below the 10% that would justify keeping the
// scanner.
//
// A body that is not an object is decoded whole first, so that malformed
// JSON ("not json", "tru", "null null") is called malformed, at the byte
// where it goes wrong, and "must be a JSON object, got …" is kept for
// well-formed values of another type.
func scanObject(body []byte, field func(name string, v jsonValue) (nested bool, err *badRequest)) *badRequest {
	rest := bytes.TrimLeft(body, " \t\r\n")
	if len(rest) == 0 {
		return bad(`body: empty; send a JSON object such as {"action":"acquire","key":"order:pay:1"}`)
	}
	d := decoders.Get().(*jsontext.Decoder)
	defer decoders.Put(d)
	d.Reset(bytes.NewReader(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if d.PeekKind() != '{' {
		return notObject(d, body)
	}
	if _, err := d.ReadToken(); err != nil {
		return malformed(err)
	}
	for d.PeekKind() != '}' {
		tok, err := d.ReadToken()
		if err != nil {
			return malformed(err)
		}
		name := tok.String()
		v, err := readValue(d)
		if err != nil {
			return malformed(err)
		}
		nested, berr := field(name, v)
		if berr != nil {
			return berr
		}
		if v.kind == kObject || v.kind == kArray {
			if !nested {
				// Every other field rejects these; field must have said so.
				return bad("body: %s: nested values are not accepted", quoteShort(name))
			}
			if v.kind == kObject {
				if err := d.SkipValue(); err != nil {
					return malformed(err)
				}
			}
		}
	}
	if _, err := d.ReadToken(); err != nil { // '}', or the syntax error PeekKind saw
		return malformed(err)
	}
	if at, ok := dataAfter(body, int(d.InputOffset())); ok {
		return bad("body: unexpected data after the JSON object at byte %d", at)
	}
	return nil
}

// dataAfter reports where body holds more than JSON whitespace after its
// first value, which ends at end: the byte offset of that data.
func dataAfter(body []byte, end int) (at int, ok bool) {
	after := bytes.TrimLeft(body[end:], " \t\r\n")
	return len(body) - len(after), len(after) > 0
}

// decoders are reused: a jsontext.Decoder keeps its buffers across Reset.
var decoders = sync.Pool{New: func() any { return new(jsontext.Decoder) }}

// readValue reads the value of a member. An object is only peeked at (its
// kind returned, nothing read): the caller skips it. An array is read
// whole into raw.
func readValue(d *jsontext.Decoder) (jsonValue, error) {
	switch d.PeekKind() {
	case '{':
		return jsonValue{kind: kObject}, nil
	case '[':
		// Read whole (its syntax checked): keys is an array of strings.
		raw, err := d.ReadValue()
		if err != nil {
			return jsonValue{}, err
		}
		return jsonValue{kind: kArray, raw: slices.Clone(raw)}, nil
	case '"':
		raw, err := d.ReadValue()
		if err != nil {
			return jsonValue{}, err
		}
		str, uerr := jsontext.AppendUnquote(nil, raw)
		return jsonValue{kind: kString, str: string(str), notText: uerr != nil}, nil
	case '0':
		raw, err := d.ReadValue()
		if err != nil {
			return jsonValue{}, err
		}
		num := string(raw)
		return jsonValue{kind: kNumber, num: num, isInt: !strings.ContainsAny(num, ".eE")}, nil
	}
	tok, err := d.ReadToken() // a literal, or the syntax error PeekKind saw
	if err != nil {
		return jsonValue{}, err
	}
	switch tok.Kind() {
	case 't':
		return jsonValue{kind: kTrue}, nil
	case 'f':
		return jsonValue{kind: kFalse}, nil
	}
	return jsonValue{kind: kNull}, nil
}

// notObject answers a body that does not start with '{': malformed if it
// is not one JSON value, else "must be a JSON object, got …".
func notObject(d *jsontext.Decoder, body []byte) *badRequest {
	kind := d.PeekKind()
	if _, err := d.ReadValue(); err != nil {
		if kind == 0 {
			// Not the start of any value: say what was expected.
			var se *jsontext.SyntacticError
			if errors.As(err, &se) && se.ByteOffset == int64(len(body)-len(bytes.TrimLeft(body, " \t\r\n"))) {
				return bad(`body: malformed JSON at byte %d: expected a JSON object such as {"action":"acquire","key":"order:pay:1"}`, se.ByteOffset)
			}
		}
		return malformed(err)
	}
	end := int(d.InputOffset())
	if after := bytes.TrimLeft(body[end:], " \t\r\n"); len(after) > 0 {
		return bad("body: malformed JSON at byte %d: unexpected data after the JSON value", len(body)-len(after))
	}
	got := "a string"
	switch kind {
	case '0':
		got = "a number"
	case 't', 'f':
		got = "a boolean"
	case 'n':
		got = "null"
	case '[':
		got = "an array"
	}
	return bad("body: must be a JSON object, got %s", got)
}

// malformed turns a jsontext error into "body: malformed JSON at byte N:
// what" (N counts from 0).
func malformed(err error) *badRequest {
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		if errors.Is(err, io.EOF) {
			return bad("body: malformed JSON: unexpected end")
		}
		return bad("body: malformed JSON: %v", err)
	}
	what := se.Err.Error()
	if errors.Is(se.Err, io.ErrUnexpectedEOF) {
		what = "unexpected end of the body"
	}
	return bad("body: malformed JSON at byte %d: %s", se.ByteOffset, what)
}

// idemNames are the member names of an idempotency body and of the objects
// in it, by path; exactNames checks a body against them (nil: any names,
// each once).
var idemNames = map[string][]string{
	"":       {"action", "key", "namespace", "fingerprint", "body", "body_base64", "lease", "retention", "token", "retryable", "answer"},
	"answer": {"status", "headers", "body", "body_base64"},
	// Any header name; each once, as every other member (a black-box pass
	// stored {"X":"a","X":"b"} as "X: b", and 40 copies of one name passed
	// the 16-header limit as one).
	"answer.headers": nil,
}

// exactNames refuses what encoding/json reads loosely in an idempotency
// body (parseIdemRequest), so that the daemon reads a body as a strict
// reader does, as lock bodies are read (scanLockFields): a member name
// that differs from a known one only in case (encoding/json matches names
// case-insensitively: "Key" set the key) and a name given twice in one
// object (encoding/json keeps the last: of two "key" members the second
// named the record). A black-box pass sent both; a proxy or validator that
// reads "key" would see another record than the daemon. Other errors
// (syntax, unknown names, types) are left to the decoder's messages.
func exactNames(body []byte) *badRequest {
	d := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	return exactObject(d, "")
}

func exactObject(d *jsontext.Decoder, object string) *badRequest {
	if d.PeekKind() != '{' {
		return nil
	}
	if _, err := d.ReadToken(); err != nil {
		return nil
	}
	known := idemNames[object]
	seen := make(map[string]bool, len(known))
	for d.PeekKind() != '}' {
		tok, err := d.ReadToken()
		if err != nil {
			return nil
		}
		name := tok.String()
		path := name
		if object != "" {
			path = object + "." + name
		}
		if !slices.Contains(known, name) {
			if i := slices.IndexFunc(known, func(k string) bool { return strings.EqualFold(k, name) }); i >= 0 {
				return bad("body: unknown field %s: names are case-sensitive (%q is not %q)", quoteShort(path), name, known[i])
			}
		}
		if seen[name] {
			return bad("body: field %q appears more than once", path)
		}
		seen[name] = true
		if _, nested := idemNames[path]; nested && path != "" && d.PeekKind() == '{' {
			if berr := exactObject(d, path); berr != nil {
				return berr
			}
			continue
		}
		if err := d.SkipValue(); err != nil {
			return nil
		}
	}
	_, _ = d.ReadToken() // the object's '}': the caller reads on after it
	return nil
}
