package idempotency

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

var (
	//go:embed scripts/read.lua
	readLua string
	//go:embed scripts/write.lua
	writeLua string

	//go:embed scripts/list_read.lua
	listReadLua string

	readScript     = redlock.NewQuorumScript(readLua)
	writeScript    = redlock.NewQuorumScript(writeLua)
	listReadScript = redlock.NewQuorumScript(listReadLua)
)

// Defaults and ceilings of the options.
const (
	DefaultMaxAnswerBytes = 64 << 10
	DefaultMaxRetention   = 7 * 24 * time.Hour
	// MinRetention is the shortest retention Begin accepts.
	MinRetention = time.Second
)

var (
	// ErrInvalid: a bad argument; the message names it and the limit.
	ErrInvalid = errors.New("idempotency: invalid argument")
	// ErrAnswerTooLarge: the answer is above WithMaxAnswerBytes.
	ErrAnswerTooLarge = errors.New("idempotency: answer too large")
	// ErrNotOwner: the token is not the one of the record's current
	// attempt: its lease ended and a later attempt began (take-over), or
	// the record completed under another attempt, or is gone (aborted,
	// past its retention, never begun).
	ErrNotOwner = errors.New("idempotency: token does not own the record")
	// ErrAlreadyCompleted: Complete of an attempt that already completed
	// with another answer; the first answer is kept and replayed (as
	// Stripe replays the first result of a key).
	ErrAlreadyCompleted = errors.New("idempotency: the attempt already completed with another answer; the first answer is kept")
	// ErrBudgetFull: Begin of a new record whose budget (BeginRequest.Budget)
	// is spent on enough masters that no quorum could keep it; the error is
	// a *BudgetError, which says when the oldest record ends.
	ErrBudgetFull = errors.New("idempotency: the records' budget is full")
)

// BudgetError is Begin refused for a full budget: RetryAfter is the
// soonest the oldest record counted against it ends on a master that
// refused (a begin may pass then, if that frees enough bytes).
type BudgetError struct {
	MaxBytes   int64
	RetryAfter time.Duration
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%v: its records take up the budget of %d bytes on enough masters that no quorum can keep another; the oldest ends in %v", ErrBudgetFull, e.MaxBytes, e.RetryAfter.Round(time.Millisecond))
}

func (e *BudgetError) Unwrap() error { return ErrBudgetFull }

// Store keeps idempotency records on a redlock.Client's masters. It is safe
// for concurrent use; it does not own the Client.
type Store struct {
	c              *redlock.Client
	maxAnswerBytes int
	maxRetention   time.Duration

	mu   sync.Mutex
	seen []masterSeen // by master index: the last answer's retention state
}

// masterSeen is what a master's last answer said about its data.
type masterSeen struct {
	at         time.Time // our clock, when the answer came
	keptSince  time.Time // zero: kept its data since the first marker
	masterTime time.Time
}

// RecordMaster is one master's standing for records (RecordMasters).
type RecordMaster struct {
	Index int
	// Seen is false before the master's first answer to a record action.
	Seen bool
	// Counts: as far as is known, its answers count for records: it is
	// not waiting out the max retention since a repair. A master that does
	// not count for locks does not count for records either; that is the
	// lock path's state, not reported here.
	Counts bool
	// RepairedAt is the master's last repair after a data loss (zero when
	// none is known); Left is how long until it counts for records again.
	RepairedAt time.Time
	Left       time.Duration
}

// RecordMasters reports, per master, whether its answers count for
// records: a master repaired after a data loss answers for locks once
// repaired, but for records only when the max retention has passed since
// its repair (safety.go). What is known of its repair comes from its last
// answer to a record action or, when later, from the marker the lock
// Client expects it to carry (redlock.MasterStatus.KeptSince, read by
// every probe): a master restarted empty and repaired since the last
// record action is reported out at once, not at the next record action
// that reaches it. The actions themselves judge each answer (counts).
func (s *Store) RecordMasters(now time.Time) []RecordMaster {
	lock := s.c.Masters()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]RecordMaster, s.c.MasterCount())
	for i := range out {
		out[i].Index = i
		var kept time.Time
		var left time.Duration
		if i < len(s.seen) && !s.seen[i].at.IsZero() {
			m := &s.seen[i]
			out[i].Seen = true
			if !m.keptSince.IsZero() {
				kept = m.keptSince
				left = s.maxRetention - m.masterTime.Sub(m.keptSince) - now.Sub(m.at)
			}
		}
		if i < len(lock) && lock[i].KeptSince.After(kept) {
			// By the master's clock: ours plus its offset.
			kept = lock[i].KeptSince
			left = s.maxRetention - now.Add(lock[i].ClockOffset).Sub(kept)
		}
		out[i].RepairedAt = kept
		out[i].Counts = left <= 0
		out[i].Left = max(left, 0)
	}
	return out
}

// observe keeps a master's answer's retention state for RecordMasters.
func (s *Store) observe(a redlock.MasterAnswer) {
	if a.Err != nil || a.MasterTime.IsZero() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = make([]masterSeen, s.c.MasterCount())
	}
	if a.Index >= 0 && a.Index < len(s.seen) {
		s.seen[a.Index] = masterSeen{at: time.Now(), keptSince: a.KeptSince, masterTime: a.MasterTime}
	}
}

// Option configures a Store.
type Option func(*Store)

// WithMaxAnswerBytes caps Answer.Size. Default DefaultMaxAnswerBytes.
func WithMaxAnswerBytes(n int) Option { return func(s *Store) { s.maxAnswerBytes = n } }

// WithMaxRetention caps Begin's retention, and is how long after its
// repair a master that lost its data stays out of record answers (doc.go).
// Every Store on one deployment must use the same or a longer one.
// Default DefaultMaxRetention.
func WithMaxRetention(d time.Duration) Option { return func(s *Store) { s.maxRetention = d } }

// New returns a Store over c. Errors match ErrInvalid.
func New(c *redlock.Client, opts ...Option) (*Store, error) {
	s := &Store{c: c, maxAnswerBytes: DefaultMaxAnswerBytes, maxRetention: DefaultMaxRetention}
	for _, o := range opts {
		o(s)
	}
	switch {
	case c == nil:
		return nil, fmt.Errorf("%w: nil redlock.Client", ErrInvalid)
	case s.maxAnswerBytes < 1:
		return nil, fmt.Errorf("%w: max answer bytes %d is below 1", ErrInvalid, s.maxAnswerBytes)
	case s.maxRetention < MinRetention:
		return nil, fmt.Errorf("%w: max retention %v is below %v", ErrInvalid, s.maxRetention, MinRetention)
	}
	return s, nil
}

// MaxAnswerBytes and MaxRetention return the Store's limits.
func (s *Store) MaxAnswerBytes() int         { return s.maxAnswerBytes }
func (s *Store) MaxRetention() time.Duration { return s.maxRetention }

func leaseKey(key string) string { return key + ":lease" }

// LeaseKey is the Redis key of key's processing lease: a Redlock lock
// like any other, for callers that account for the locks held (the
// daemon's max_locks).
func LeaseKey(key string) string  { return leaseKey(key) }
func recordKey(key string) string { return key + ":rec" }

// counts reports whether a master's answer may speak for a record: the
// lock's checks passed (a.Err nil), and the master has kept its data for
// at least the longest retention, so it kept every record still retained.
func (s *Store) counts(a redlock.MasterAnswer) bool {
	s.observe(a)
	return a.Err == nil && (a.KeptSince.IsZero() || a.MasterTime.Sub(a.KeptSince) >= s.maxRetention)
}

// notCounted is the error for an answer counts refused.
func (s *Store) notCounted(a redlock.MasterAnswer) error {
	if a.Err != nil {
		return a.Err
	}
	return &RetentionWaitError{Master: a.Index, RepairedAt: a.KeptSince,
		Left: s.maxRetention - a.MasterTime.Sub(a.KeptSince), MaxRetention: s.maxRetention}
}

// RetentionWaitError is a master that answers the lock path but not yet
// for records: it lost its data at RepairedAt, and may miss copies written
// before that until the max retention has passed since (safety.go), Left
// from the answer's time. It matches redlock.ErrMasterQuarantined.
type RetentionWaitError struct {
	Master       int
	RepairedAt   time.Time
	Left         time.Duration
	MaxRetention time.Duration
}

func (e *RetentionWaitError) Error() string {
	return fmt.Sprintf("master %d: lost its data and was repaired at %s: it answers for records again in %v, when the max retention (%v) has passed since",
		e.Master, e.RepairedAt.UTC().Format(time.RFC3339), e.Left.Round(time.Second), e.MaxRetention)
}

func (e *RetentionWaitError) Unwrap() error { return redlock.ErrMasterQuarantined }

// QuorumError is a record action that did not hear a quorum of masters
// that count for records. It matches redlock.ErrQuorumUnavailable and
// every master's failure.
type QuorumError struct {
	Op string
	// Done is how many counting masters did the action (wrote, read), of
	// Quorum needed, of Masters.
	Done, Quorum, Masters int
	// Failures are the masters that did not count, one error each.
	Failures []error
	// Return is how long until a quorum of masters counts for records
	// again, when known (ReturnKnown): masters that counted count now, a
	// master waiting out its retention (RetentionWaitError) when it ends,
	// any other failure has no known return.
	Return      time.Duration
	ReturnKnown bool
}

func (e *QuorumError) Error() string {
	return fmt.Sprintf("idempotency: %s: %d of %d needed masters wrote or read the record (%d masters, %d not counted): %v",
		e.Op, e.Done, e.Quorum, e.Masters, len(e.Failures), errors.Join(e.Failures...))
}

func (e *QuorumError) Unwrap() []error {
	return append([]error{redlock.ErrQuorumUnavailable}, e.Failures...)
}

// quorumError is a record action's failure to hear a quorum.
func (s *Store) quorumError(op string, done int, failures []error) error {
	e := &QuorumError{Op: op, Done: done, Quorum: s.c.Quorum(), Masters: s.c.MasterCount(), Failures: failures}
	ends := make([]time.Duration, 0, e.Masters)
	for range max(e.Masters-len(failures), 0) {
		ends = append(ends, 0)
	}
	for _, f := range failures {
		var rw *RetentionWaitError
		if errors.As(f, &rw) {
			ends = append(ends, max(rw.Left, 0))
		}
	}
	if len(ends) >= e.Quorum {
		slices.Sort(ends)
		e.Return, e.ReturnKnown = ends[e.Quorum-1], true
	}
	return e
}

// read reads the record at quorum: every answer until a quorum of
// counting answers, so that the COMPLETED copy with the highest fence
// among them answers (safety.go, 4). A COMPLETED copy found when fewer
// than a quorum count (masters down) still answers: only a Complete
// writes one, after its attempt's work.
func (s *Store) read(ctx context.Context, key string) (copies, error) {
	var cp copies
	var failures []error
	err := s.c.RunQuorumScript(ctx, readScript, recordKey(key), nil, func(a redlock.MasterAnswer) bool {
		if !s.counts(a) {
			failures = append(failures, s.notCounted(a))
			return false
		}
		cp.counted++
		if a.Code == 1 {
			cp.addCopy(a.Extra, a.Value)
		}
		return cp.counted >= s.c.Quorum()
	})
	if err != nil {
		return cp, err
	}
	if cp.completed == nil && cp.counted < s.c.Quorum() {
		return cp, s.quorumError("read", cp.counted, failures)
	}
	return cp, nil
}

// Get returns the record as a quorum read decides it: State StateAbsent
// when no counting master has it. Errors: ErrInvalid, or one matching
// redlock.ErrQuorumUnavailable.
func (s *Store) Get(ctx context.Context, key string) (Record, error) {
	if key == "" {
		return Record{}, fmt.Errorf("%w: key must not be empty", ErrInvalid)
	}
	cp, err := s.read(ctx, key)
	if err != nil {
		return Record{}, err
	}
	if w := cp.winner(); w != nil {
		return *w, nil
	}
	return Record{}, nil
}

// Attempted reports whether token is an attempt of key's record, as a
// quorum read sees it: the token of its IN_PROGRESS or its COMPLETED copy
// with the highest fence. A daemon asks it before it lets idem_complete or
// idem_abort past an account's spent quota or rate: ending a real attempt
// is free, a forged token's large answer is not. Errors: those of Get.
func (s *Store) Attempted(ctx context.Context, key, token string) (bool, error) {
	if key == "" || token == "" {
		return false, fmt.Errorf("%w: key and token must not be empty", ErrInvalid)
	}
	cp, err := s.read(ctx, key)
	if err != nil {
		return false, err
	}
	return cp.inProgress != nil && cp.inProgress.token == token || cp.completed != nil && cp.completed.token == token, nil
}

// encodeAnswer checks a against the limits and encodes it for the record.
func (s *Store) encodeAnswer(a *Answer) (string, error) {
	if a == nil {
		return "", fmt.Errorf("%w: answer: required", ErrInvalid)
	}
	if a.Status < 100 || a.Status > 599 {
		return "", fmt.Errorf("%w: answer.status: %d is outside 100 to 599", ErrInvalid, a.Status)
	}
	seen := make(map[string]string, len(a.Headers))
	for k := range a.Headers {
		c := strings.ToLower(k)
		if other, dup := seen[c]; dup {
			return "", fmt.Errorf("%w: answer.headers: %q and %q name the same header (names are case-insensitive)", ErrInvalid, min(k, other), max(k, other))
		}
		seen[c] = k
	}
	if n := a.Size(); n > s.maxAnswerBytes {
		return "", fmt.Errorf("%w: %d bytes (body and headers) is above the limit of %d bytes", ErrAnswerTooLarge, n, s.maxAnswerBytes)
	}
	b, err := json.Marshal(a)
	return string(b), err
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
