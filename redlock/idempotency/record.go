package idempotency

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// State is a record's state.
type State uint8

const (
	// StateAbsent: no record (never begun, aborted, or past its retention).
	StateAbsent State = iota
	// StateInProgress: an attempt began and has not completed.
	StateInProgress
	// StateCompleted: an attempt completed; its answer is stored.
	StateCompleted
)

var stateNames = [...]string{"ABSENT", "IN_PROGRESS", "COMPLETED"}

func (s State) String() string { return stateNames[s] }

// Answer is what a completed attempt stores and every later Begin replays,
// byte for byte.
type Answer struct {
	// Status is an HTTP status code (100 to 599).
	Status int `json:"status"`
	// Headers are a few response headers worth replaying (Content-Type,
	// Location…), one value each.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the response body, any bytes.
	Body []byte `json:"body,omitempty"`
}

// Size is what an answer counts against WithMaxAnswerBytes: the body and
// every header name and value.
func (a *Answer) Size() int {
	n := len(a.Body)
	for k, v := range a.Headers {
		n += len(k) + len(v)
	}
	return n
}

// AnswerBytes is the size of the record's answer (Answer.Size: the body
// and the replayed headers), 0 unless COMPLETED.
func (r *Record) AnswerBytes() int {
	if r.Answer == nil {
		return 0
	}
	return r.answerSize
}

// Record is one view of an idempotency record, as a quorum read decided it.
type Record struct {
	State       State
	Fingerprint string    // lowercase hex SHA-256
	Fence       int64     // the fencing token of the attempt that wrote it
	Attempts    int64     // attempts begun, this one included
	StartedAt   time.Time // when the attempt began (the daemon's clock)
	CompletedAt time.Time // when it completed, by a master's clock; zero before
	// TTL is the retention left on the master whose copy was chosen.
	TTL time.Duration
	// Answer is nil unless COMPLETED. In a listing (Store.List) it holds
	// the status alone: the stored answer is not read; AnswerBytes is its
	// size.
	Answer *Answer
	// answerSize: the stored answer's Size.
	answerSize int
	token      string
	// retention is the record's retention as its begin set it (the copy's
	// "ret"; zero when absent): a copy a Complete fills in keeps it.
	retention time.Duration
}

// parseCopy decodes one master's copy: cjson of HGETALL (a flat array of
// field, value). ok is false for a copy this package did not write.
func parseCopy(extra string, pttl int64) (Record, bool) {
	r, ans, ok := parseCopyFields(extra, pttl)
	if !ok || !r.decodeAnswer(ans) {
		return Record{}, false
	}
	return r, true
}

// storedAnswer is what parseCopyFields leaves for decodeAnswer: the
// copy's stored answer, undecoded, and its status and size fields.
type storedAnswer struct {
	// raws are the 'ans' values in the order of the copy (one, in a copy
	// this package wrote: HGETALL names a field once).
	raws []string
	// quoted: raws are still the JSON string literals holding them (the
	// flatStrings path), to be unquoted (and checked) by decodeAnswer.
	quoted bool
	sized  bool // 'asz' present
	status int  // 'ast'
}

// parseCopyFields is parseCopy up to the stored answer, which it leaves
// undecoded (decodeAnswer decodes it): ok is false when extra names no
// state, or is not a flat array of field, value pairs — except that an
// 'ans' literal that is not valid JSON is found only by decodeAnswer.
//
// flatStrings splits the array and each element is unquoted as it is
// read, but for 'ans', most of a completed copy's length: flatStrings
// only found where it ends. Anything flatStrings does not split (not
// cjson's shape) is decoded by encoding/json whole, as before.
func parseCopyFields(extra string, pttl int64) (r Record, ans storedAnswer, ok bool) {
	var buf [24]string
	lits, fast := flatStrings(extra, buf[:0])
	if !fast {
		var flat []string
		if err := json.Unmarshal([]byte(extra), &flat); err != nil {
			return Record{}, ans, false
		}
		lits = flat
	}
	if len(lits)%2 != 0 {
		return Record{}, ans, false
	}
	ans.quoted = fast
	for i := 0; i < len(lits); i += 2 {
		name, v := lits[i], lits[i+1]
		if fast {
			var okName, okValue bool
			if name, okName = unquote(name); !okName {
				return Record{}, ans, false
			}
			if name != "ans" {
				if v, okValue = unquote(v); !okValue {
					return Record{}, ans, false
				}
			}
		}
		switch name {
		case "fp":
			r.Fingerprint = v
		case "st":
			switch v {
			case "IN_PROGRESS":
				r.State = StateInProgress
			case "COMPLETED":
				r.State = StateCompleted
			}
		case "tok":
			r.token = v
		case "fence":
			r.Fence, _ = strconv.ParseInt(v, 10, 64)
		case "att":
			r.Attempts, _ = strconv.ParseInt(v, 10, 64)
		case "t0":
			ms, _ := strconv.ParseInt(v, 10, 64)
			r.StartedAt = time.UnixMilli(ms)
		case "tc":
			ms, _ := strconv.ParseInt(v, 10, 64)
			r.CompletedAt = time.UnixMilli(ms)
		case "ret":
			ms, _ := strconv.ParseInt(v, 10, 64)
			r.retention = time.Duration(ms) * time.Millisecond
		case "ans":
			ans.raws = append(ans.raws, v)
		case "asz":
			r.answerSize, _ = strconv.Atoi(v)
			ans.sized = true
		case "ast":
			ans.status, _ = strconv.Atoi(v)
		}
	}
	if pttl > 0 {
		r.TTL = time.Duration(pttl) * time.Millisecond
	}
	return r, ans, r.State != StateAbsent
}

// decodeAnswer finishes parseCopy: it decodes the stored answer into
// r.Answer (of several 'ans', the last that decodes, as encoding/json
// decoding them in order left it) and reports whether r is a copy this
// package wrote (a COMPLETED copy has an answer, or its status and size in
// a listing). An 'ans' that is not a valid JSON string literal makes the
// whole copy invalid, as it made the array.
func (r *Record) decodeAnswer(ans storedAnswer) bool {
	for _, raw := range ans.raws {
		if ans.quoted {
			v, ok := unquote(raw)
			if !ok {
				return false
			}
			raw = v
		}
		var a Answer
		if json.Unmarshal([]byte(raw), &a) == nil {
			r.Answer = &a
		}
	}
	switch {
	case r.Answer == nil && ans.sized && r.State == StateCompleted:
		// A listing's read (list_read.lua): the answer's status and size,
		// not the answer.
		r.Answer = &Answer{Status: ans.status}
	case r.Answer != nil && !ans.sized:
		r.answerSize = r.Answer.Size()
	}
	return r.State != StateAbsent && (r.State != StateCompleted || r.Answer != nil)
}

// copies is what a quorum of counting masters showed of one record.
type copies struct {
	counted int
	// completed is the COMPLETED copy with the highest fence, inProgress
	// the IN_PROGRESS copy with the highest fence; nil when none was seen.
	completed, inProgress *Record
}

// addCopy parses one master's copy and adds it, as parseCopy and add
// would, but decodes the copy's stored answer only when add would choose
// the copy (chooses): a COMPLETED copy whose fence is not above the
// chosen one's, or an IN_PROGRESS copy likewise, is left out on its
// state and fence alone, answer undecoded. A read gets three or more
// copies of one record, each about as long as its stored answer; the
// answer of one is decoded.
func (c *copies) addCopy(extra string, pttl int64) {
	r, ans, ok := parseCopyFields(extra, pttl)
	if !ok || !c.chooses(&r) || !r.decodeAnswer(ans) {
		return
	}
	c.add(r)
}

// chooses reports whether r replaces the copy chosen so far in its state:
// the first copy, or one with a higher fence; of two COMPLETED copies with
// one fence (one attempt), the one completed first. That attempt's first
// Complete that returned nil wrote its answer on a quorum, so every quorum
// read meets it; a second Complete with another answer is refused
// (ErrAlreadyCompleted) where it meets the first, but writes its answer
// where a copy was still IN_PROGRESS (a master that missed the first, back
// from a restart), and reads then replayed whichever copy answered first
// (a black-box pass: 9 of 12 replays one answer, 3 the other). Otherwise
// add keeps the first of equal copies.
func (c *copies) chooses(r *Record) bool {
	switch r.State {
	case StateCompleted:
		return c.completed == nil || r.Fence > c.completed.Fence ||
			r.Fence == c.completed.Fence && completedFirst(r, c.completed)
	case StateInProgress:
		return c.inProgress == nil || r.Fence > c.inProgress.Fence
	}
	return false
}

// completedFirst reports whether a was completed before b, both stamped
// (a copy from before the stamp is never taken for the first).
func completedFirst(a, b *Record) bool {
	return !a.CompletedAt.IsZero() && !b.CompletedAt.IsZero() && a.CompletedAt.Before(b.CompletedAt)
}

func (c *copies) add(r Record) {
	if !c.chooses(&r) {
		return
	}
	switch r.State {
	case StateCompleted:
		c.completed = &r
	case StateInProgress:
		c.inProgress = &r
	}
}

// winner is the copy that answers for the record: any COMPLETED copy, for
// a COMPLETED write is made only after an attempt's work finished, and one
// that returned nil reached a quorum; else the latest IN_PROGRESS.
func (c *copies) winner() *Record {
	if c.completed != nil {
		return c.completed
	}
	return c.inProgress
}

// flatStrings splits s, a JSON array of strings as cjson encodes one (no
// whitespace), into its elements appended to into, each still a JSON
// string literal, quotes included (unquote decodes one). It finds each
// literal's closing quote and checks nothing inside it. ok is false for
// any other shape: parseCopyFields then lets encoding/json decide.
func flatStrings(s string, into []string) ([]string, bool) {
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return nil, false
	}
	i := 1
	if s[i] == ']' {
		return into, i == len(s)-1
	}
	for {
		if s[i] != '"' {
			return nil, false
		}
		end := i + 1
		for {
			k := strings.IndexByte(s[end:], '"')
			if k < 0 {
				return nil, false
			}
			end += k
			bs := 0 // backslashes right before the quote: odd escapes it
			for j := end - 1; j > i && s[j] == '\\'; j-- {
				bs++
			}
			end++
			if bs%2 == 0 {
				break
			}
		}
		into = append(into, s[i:end])
		switch {
		case end >= len(s):
			return nil, false
		case s[end] == ',':
			i = end + 1
			if i >= len(s) {
				return nil, false
			}
		case s[end] == ']':
			return into, end == len(s)-1
		default:
			return nil, false
		}
	}
}

// unquote decodes lit, a JSON string literal (quotes included), as
// encoding/json does; ok is false when it is not one. A literal without a
// backslash, control character, inner quote or invalid UTF-8 is its own
// content and costs no allocation; one with escapes is decoded by
// jsontext; what either refuses (invalid UTF-8, which encoding/json
// replaces, a lone surrogate; a bad literal) is left to encoding/json.
func unquote(lit string) (string, bool) {
	if len(lit) >= 2 && lit[0] == '"' && lit[len(lit)-1] == '"' {
		body := lit[1 : len(lit)-1]
		if !strings.ContainsRune(body, '\\') {
			plain := utf8.ValidString(body)
			for k := 0; plain && k < len(body); k++ {
				plain = body[k] >= 0x20 && body[k] != '"'
			}
			if plain {
				return body, true
			}
		} else if b, err := jsontext.AppendUnquote(nil, lit); err == nil {
			return string(b), true
		}
	}
	var v string
	err := json.Unmarshal([]byte(lit), &v)
	return v, err == nil
}
