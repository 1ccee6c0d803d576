package idempotency

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

var (
	//go:embed scripts/scan.lua
	scanLua    string
	scanScript = redlock.NewQuorumScript(scanLua)
)

// MaxListCount bounds List's count.
const MaxListCount = 1000

// ListedRecord is one record List found: its key (as given to Begin) and
// the record as a quorum read decided it.
type ListedRecord struct {
	Key    string
	Record Record
}

// ListPage is one page of List; Cursor "" means the listing is done.
type ListPage struct {
	Records []ListedRecord
	Cursor  string
}

// List returns one page of the records whose keys start with prefix
// (a glob-free prefix of Begin's keys): it SCANs the masters one after
// another, COUNT count per page, and confirms each key found with a
// quorum read. A master that does not count for records when its turn
// comes is skipped; more than N − quorum skipped is an error, since a
// record on a quorum is on every quorum. A record is listed from the
// first master, in configuration order, that counts and holds a copy, so
// it is listed once while the masters' copies and counting do not change
// during the listing. Start with cursor "". Errors: ErrInvalid (a bad
// cursor or count), or one matching redlock.ErrQuorumUnavailable.
func (s *Store) List(ctx context.Context, prefix, cursor string, count int) (ListPage, error) {
	if count < 1 || count > MaxListCount {
		return ListPage{}, fmt.Errorf("%w: count: %d is outside 1 to %d", ErrInvalid, count, MaxListCount)
	}
	m, scan, skipped, err := parseListCursor(cursor, s.c.MasterCount())
	if err != nil {
		return ListPage{}, err
	}
	// Fewer than a quorum counting for records now: the listing cannot be
	// completed (a record on a quorum may be on none of the others), and
	// its pages answered empty until the skips ran out (found by a
	// black-box pass: two empty 200s, then the 503).
	if n, failures := s.countingForRecords(time.Now()); n < s.c.Quorum() {
		return ListPage{}, s.quorumError("list", n, failures)
	}
	pattern := globEscape(prefix) + "*:rec"
	a, err := s.c.RunQuorumScriptOn(ctx, scanScript, m, pattern, []any{scan, strconv.Itoa(count)})
	if err != nil {
		return ListPage{}, err
	}
	var page ListPage
	var next uint64
	if !s.counts(a) || a.Code != 1 {
		skipped++
		if skipped > s.c.MasterCount()-s.c.Quorum() {
			return ListPage{}, s.quorumError("list", s.c.MasterCount()-skipped, []error{s.notCounted(a)})
		}
	} else {
		var keys []string
		if err := json.Unmarshal([]byte(a.Extra), &keys); err != nil {
			return ListPage{}, fmt.Errorf("idempotency: list: master %d: unexpected SCAN reply: %w", m, err)
		}
		for _, k := range keys {
			key := strings.TrimSuffix(k, ":rec")
			rec, first, err := s.readFirst(ctx, key, m)
			if err != nil {
				return ListPage{}, err
			}
			if first && rec.State != StateAbsent {
				page.Records = append(page.Records, ListedRecord{Key: key, Record: rec})
			}
		}
		next = uint64(a.Value)
	}
	switch {
	case next != 0:
		page.Cursor = fmt.Sprintf("%d:%d:%d", m, next, skipped)
	case m+1 < s.c.MasterCount():
		page.Cursor = fmt.Sprintf("%d:0:%d", m+1, skipped)
	}
	return page, nil
}

// readFirst reads key's record at quorum (every master's answer), and
// reports whether master m is the first counting master holding a copy.
// The reads go over the masters' listing connections, never in front of a
// lock command, and leave the stored answer on the masters
// (list_read.lua): a listing shows its status and size only.
func (s *Store) readFirst(ctx context.Context, key string, m int) (Record, bool, error) {
	var cp copies
	first := m
	var failures []error
	err := s.c.RunQuorumScriptListing(ctx, listReadScript, recordKey(key), nil, func(a redlock.MasterAnswer) bool {
		if !s.counts(a) {
			failures = append(failures, s.notCounted(a))
			return false
		}
		cp.counted++
		if a.Code == 1 {
			if r, ok := parseCopy(a.Extra, a.Value); ok {
				cp.add(r)
				first = min(first, a.Index)
			}
		}
		return false
	})
	if err != nil {
		return Record{}, false, err
	}
	if cp.counted < s.c.Quorum() {
		return Record{}, false, s.quorumError("list", cp.counted, failures)
	}
	w := cp.winner()
	if w == nil {
		return Record{}, false, nil
	}
	return *w, first == m, nil
}

// parseListCursor decodes "<master>:<scan cursor>:<skipped>".
func parseListCursor(c string, n int) (m int, scan string, skipped int, err error) {
	if c == "" {
		return 0, "0", 0, nil
	}
	f := strings.Split(c, ":")
	bad := fmt.Errorf("%w: cursor: not a cursor of this listing; pass \"\" to start, then each page's cursor unchanged", ErrInvalid)
	if len(f) != 3 {
		return 0, "", 0, bad
	}
	m, e1 := strconv.Atoi(f[0])
	_, e2 := strconv.ParseUint(f[1], 10, 64)
	skipped, e3 := strconv.Atoi(f[2])
	if e1 != nil || e2 != nil || e3 != nil || m < 0 || m >= n || skipped < 0 || skipped > n {
		return 0, "", 0, bad
	}
	return m, f[1], skipped, nil
}

// globEscape escapes the SCAN MATCH metacharacters of s.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// countingForRecords is how many masters count for records now: they count
// for locks (redlock.MasterStatus.Counting) and are not waiting out the
// max retention since a repair (RecordMasters). failures says why each
// other one does not.
func (s *Store) countingForRecords(now time.Time) (int, []error) {
	lock := s.c.Masters()
	n := 0
	var failures []error
	for i, rm := range s.RecordMasters(now) {
		switch {
		case i < len(lock) && !lock[i].Counting:
			failures = append(failures, fmt.Errorf("master %d (%s): %s", i, lock[i].Addr, lock[i].State))
		case !rm.Counts:
			failures = append(failures, &RetentionWaitError{Master: i, RepairedAt: rm.RepairedAt, Left: rm.Left, MaxRetention: s.maxRetention})
		default:
			n++
		}
	}
	return n, failures
}
