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
	raw        string // 'ans': the answer's JSON
	quoted     bool   // raw is still the JSON string literal holding it
	has, sized bool   // 'ans' present; 'asz' present
	status     int    // 'ast'
}

// parseCopyFields is parseCopy up to the stored answer, which it leaves
// undecoded: ok is false when extra is not a flat array of field, value
// pairs or names no state.
//
// The array is split by flatStrings, each element unquoted only when it
// is read: the stored answer, most of the copy's length, is scanned for
// its end and nothing else (decodeAnswer unquotes it). Anything
// flatStrings does not split (not cjson's shape) is decoded by
// encoding/json, as before.
func parseCopyFields(extra string, pttl int64) (r Record, ans storedAnswer, ok bool) {
	var buf [24]string
	lits, fast := flatStrings(extra, buf[:0])
	var flat []string
	if !fast {
		if err := json.Unmarshal([]byte(extra), &flat); err != nil {
			return Record{}, ans, false
		}
		lits = flat
	}
	if len(lits)%2 != 0 {
		return Record{}, ans, false
	}
	for i := 0; i < len(lits); i += 2 {
		name, v := lits[i], lits[i+1]
		if fast {
			var okName, okValue bool
			name, okName = unquote(name)
			if name == "ans" {
				// Unquoted by decodeAnswer, when the copy is chosen.
				ans.raw, ans.quoted, ans.has = v, true, true
				if !okName {
					return Record{}, ans, false
				}
				continue
			}
			v, okValue = unquote(v)
			if !okName || !okValue {
				return Record{}, ans, false
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
			ans.raw, ans.has = v, true
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
// r.Answer and reports whether r is a copy this package wrote (a
// COMPLETED copy has an answer, or its status and size in a listing).
func (r *Record) decodeAnswer(ans storedAnswer) bool {
	if ans.quoted {
		v, ok := unquote(ans.raw)
		if !ok {
			return false
		}
		ans.raw = v
	}
	if ans.has {
		var a Answer
		if json.Unmarshal([]byte(ans.raw), &a) == nil {
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

type copies struct {
	counted int
	// completed is the COMPLETED copy with the highest fence, inProgress
	// the IN_PROGRESS copy with the highest fence; nil when none was seen.
	completed, inProgress *Record
}

// addCopy is parseCopy and add of one master's copy, with the stored
// answer decoded only when add would choose the copy: a copy whose state
// and fence add keeps the first of (a COMPLETED copy's fence not above the
// chosen one's) is not decoded further. Copies of one record are written
// alike on every master, and a read gets three or more of them, each about
// as long as its stored answer: decoding every one (the record's JSON,
// then the answer's) was two thirds of a replay's CPU in the client
// (BenchmarkReplay's profile). The answer decoded is the same one parseCopy
// would give: a copy whose answer does not decode is not added.
func (c *copies) addCopy(extra string, pttl int64) {
	r, ans, ok := parseCopyFields(extra, pttl)
	if !ok || !c.chooses(&r) || !r.decodeAnswer(ans) {
		return
	}
	c.add(r)
}

// chooses reports whether add would choose r over the copy chosen so far.
func (c *copies) chooses(r *Record) bool {
	switch r.State {
	case StateCompleted:
		return c.completed == nil || r.Fence > c.completed.Fence
	case StateInProgress:
		return c.inProgress == nil || r.Fence > c.inProgress.Fence
	}
	return false
}

func (c *copies) add(r Record) {
	switch r.State {
	case StateCompleted:
		if c.completed == nil || r.Fence > c.completed.Fence {
			c.completed = &r
		}
	case StateInProgress:
		if c.inProgress == nil || r.Fence > c.inProgress.Fence {
			c.inProgress = &r
		}
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
// backslash, control character or invalid UTF-8 is its own content and
// costs no allocation; one with escapes is decoded by jsontext; what
// either refuses (invalid UTF-8, which encoding/json replaces, a lone
// surrogate) is left to encoding/json.
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
