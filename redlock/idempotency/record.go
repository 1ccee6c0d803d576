package idempotency

import (
	"encoding/json"
	"strconv"
	"time"
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
	var flat []string
	if err := json.Unmarshal([]byte(extra), &flat); err != nil || len(flat)%2 != 0 {
		return Record{}, false
	}
	var r Record
	sized, status := false, 0
	for i := 0; i < len(flat); i += 2 {
		v := flat[i+1]
		switch flat[i] {
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
			var a Answer
			if json.Unmarshal([]byte(v), &a) == nil {
				r.Answer = &a
			}
		case "asz":
			r.answerSize, _ = strconv.Atoi(v)
			sized = true
		case "ast":
			status, _ = strconv.Atoi(v)
		}
	}
	switch {
	case r.Answer == nil && sized && r.State == StateCompleted:
		// A listing's read (list_read.lua): the answer's status and size,
		// not the answer.
		r.Answer = &Answer{Status: status}
	case r.Answer != nil && !sized:
		r.answerSize = r.Answer.Size()
	}
	if pttl > 0 {
		r.TTL = time.Duration(pttl) * time.Millisecond
	}
	if r.State == StateAbsent || (r.State == StateCompleted && r.Answer == nil) {
		return Record{}, false
	}
	return r, true
}

// copies is what a quorum of counting masters showed of one record.
type copies struct {
	counted int
	// completed is the COMPLETED copy with the highest fence, inProgress
	// the IN_PROGRESS copy with the highest fence; nil when none was seen.
	completed, inProgress *Record
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
