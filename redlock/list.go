package redlock

import (
	"context"
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxListCount is the largest page List returns. A page's status read
// costs each master about 50µs of CPU per candidate (measured on Redis
// 7.0: the status script with its prelude): 100 keeps a page to a few
// milliseconds of each master's time, spent listBatch candidates at a
// time.
const MaxListCount = 100

// listBatch is how many of a page's status reads go to the masters at
// once, in one pipeline on each master's listing lane: about 0.4 ms of a
// master's CPU, after which it serves the lock commands that arrived
// meanwhile on the lock lanes' connections. A page's reads go out batch
// after batch, so a listing never has more than listBatch calls queued.
const listBatch = 8

func listLane(m *master) *lane { return m.list }

// ListedLock is one lock List found held.
type ListedLock struct {
	// Key is the lock's Redis key.
	Key string
	// Validity is the conservative time left, as Status.Validity: the
	// quorum-th longest PTTL among the holders minus the read's elapsed
	// time and the drift allowance; always > 0.
	Validity time.Duration
	// Fence is the holder's fencing token, as Status.Fence (0 when the
	// masters read do not have it stored).
	Fence int64
}

// ListPage is one page of List.
type ListPage struct {
	// Locks are the held locks of this page, sorted by Key; at most the
	// count asked for, and possibly none while the listing goes on.
	Locks []ListedLock
	// Cursor continues the listing; "" when it is complete.
	Cursor string
}

// List returns one page of the locks held whose Redis keys start with
// prefix: at most count of them (1 to MaxListCount). Pass "" as cursor for
// the first page, then each page's Cursor, with the same prefix, until it
// is "".
//
// Cost, per page: one SCAN step (MATCH on the escaped prefix, COUNT count;
// never KEYS) on one master, and a status read of the keys it returned on
// every master, listBatch keys per round trip, in parallel over the
// masters. Both go through a connection of their own to each master (the
// listing lane), never queued in front of lock commands in this process:
// concurrent listings queue behind each other there instead. The masters
// scanned are one quorum of the masters that count when the listing
// starts, scanned one after the other; a lock held by a quorum is on one
// of them, since two quorums of the same N masters share a master. A whole
// listing thus takes about quorum × (keys on a master ÷ count) pages,
// whatever share of the keys match (BenchmarkList: 1,000 locks in pages of
// 100 on the shared test masters, 51 pages).
//
// What it guarantees: a lock held, with a fence and holders that do not
// change, from the first page to the last is listed exactly once. Each
// candidate is confirmed by a status read (Client.Status's rule: a quorum
// of counting masters hold one token) so only locks held when the page was
// read are listed, with their validity > 0 and fence; a candidate is
// listed from the first scanned master that holds it, so one held on
// several scanned masters appears once. Locks acquired, released or moved
// between masters during the listing may be listed or not, and a master's
// keyspace resized between two pages may return a key twice (SCAN's own
// guarantees); a scanned master that did not answer the status read of a
// later page may let a lock appear twice, never be missed. The Client's
// own keys (marker, lease horizon, fencing counter, fence records) are
// never listed.
//
// Errors: ErrInvalid for a count outside 1..MaxListCount or a cursor that
// is not one of this Client's for this prefix (its message starts with
// "cursor:" or "count:"); an *OutcomeError matching ErrQuorumUnavailable
// when fewer than a quorum of masters count, when the master to scan next
// does not count or answer, or when a candidate's status cannot be told
// (retry the same cursor later); the context's error joined in when ctx
// ends.
func (c *Client) List(ctx context.Context, prefix, cursor string, count int) (ListPage, error) {
	if count < 1 || count > MaxListCount {
		return ListPage{}, fmt.Errorf("%w: count: %d is outside 1 to %d", ErrInvalid, count, MaxListCount)
	}
	if err := c.closedErr(); err != nil {
		return ListPage{}, err
	}
	var cur listCursor
	if cursor == "" {
		var err error
		if cur, err = c.startListing(prefix); err != nil {
			return ListPage{}, err
		}
	} else {
		var err error
		if cur, err = c.parseListCursor(cursor, prefix); err != nil {
			return ListPage{}, err
		}
	}
	scanCount := count
	if cur.skip > 0 {
		scanCount = cur.scanCount // the same step again, past what was returned
	}
	next, keys, err := c.scanStep(ctx, cur.masters[cur.pos], cur.scan, prefix, scanCount)
	if err != nil {
		return ListPage{}, err
	}
	locks, err := c.confirmHeld(ctx, keys, cur.masters[:cur.pos])
	if err != nil {
		return ListPage{}, err
	}
	locks = locks[min(cur.skip, len(locks)):]
	page := ListPage{Locks: locks}
	switch {
	case len(locks) > count:
		page.Locks = locks[:count]
		cur.skip += count
		cur.scanCount = scanCount
	case next != 0:
		cur.scan, cur.skip, cur.scanCount = next, 0, 0
	case cur.pos+1 < len(cur.masters):
		cur.pos, cur.scan, cur.skip, cur.scanCount = cur.pos+1, 0, 0, 0
	default:
		return page, nil // complete
	}
	page.Cursor = cur.encode()
	return page, nil
}

// listCursor is where a listing stands: the masters it scans, which one
// and where its SCAN is, and how many locks of that SCAN step were
// already returned (when one step found more than a page).
type listCursor struct {
	masters   []int  // the listing's quorum, scanned in this order
	pos       int    // index in masters of the master being scanned
	scan      uint64 // its SCAN cursor
	skip      int    // locks of the step at scan already returned
	scanCount int    // the COUNT of that step, when skip > 0
	prefix    uint32 // FNV-1a of the prefix: a cursor serves one listing
}

// startListing picks the first quorum of counting masters, in index order.
func (c *Client) startListing(prefix string) (listCursor, error) {
	cur := listCursor{prefix: prefixSum(prefix)}
	res := OutcomeError{Op: "list", Quorum: c.quorum, Masters: len(c.masters)}
	for i, m := range c.masters {
		if len(cur.masters) == c.quorum {
			break
		}
		// One reading of its state: counted, or why not.
		if err := m.notCounting(); err != nil {
			res.Failures = append(res.Failures, &MasterError{Index: i, Addr: m.addr, Err: err})
		} else {
			cur.masters = append(cur.masters, i)
		}
	}
	if len(cur.masters) < c.quorum {
		res.Kind = ErrQuorumUnavailable
		res.Votes = len(cur.masters)
		return cur, &res
	}
	return cur, nil
}

func prefixSum(prefix string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(prefix))
	return h.Sum32()
}

const listCursorVersion = "l1"

// encode writes the cursor as base64url of
// "l1 <masters, comma-separated> <pos> <scan> <skip> <scanCount> <prefix sum>".
func (cur *listCursor) encode() string {
	b := []byte(listCursorVersion + " ")
	for i, m := range cur.masters {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(m), 10)
	}
	b = fmt.Appendf(b, " %d %d %d %d %d", cur.pos, cur.scan, cur.skip, cur.scanCount, cur.prefix)
	return base64.RawURLEncoding.EncodeToString(b)
}

// parseListCursor decodes and checks a cursor of List for prefix. A bad
// one is refused with why, then what to pass instead:
// "cursor: not a cursor of this listing: it is not base64url; pass …".
func (c *Client) parseListCursor(s, prefix string) (listCursor, error) {
	bad := func(why string) (listCursor, error) {
		return listCursor{}, fmt.Errorf("%w: cursor: not a cursor of this listing: %s; pass \"\" to start, then each page's cursor unchanged, with the same prefix", ErrInvalid, why)
	}
	if len(s) > 256 {
		return bad("it is too long")
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return bad("it is not base64url")
	}
	f := strings.Split(string(raw), " ")
	if len(f) != 7 || f[0] != listCursorVersion {
		return bad("its contents are not a listing position")
	}
	var cur listCursor
	seen := make([]bool, len(c.masters))
	for m := range strings.SplitSeq(f[1], ",") {
		i, err := strconv.Atoi(m)
		if err != nil || i < 0 || i >= len(c.masters) || seen[i] {
			return bad("its masters do not match this deployment")
		}
		seen[i] = true
		cur.masters = append(cur.masters, i)
	}
	if len(cur.masters) != c.quorum {
		return bad("its masters do not match this deployment")
	}
	nums := make([]uint64, 5)
	for i := range nums {
		if nums[i], err = strconv.ParseUint(f[2+i], 10, 64); err != nil {
			return bad("its position is not numeric")
		}
	}
	if nums[0] >= uint64(len(cur.masters)) || nums[2] > 1<<20 || nums[3] > MaxListCount || nums[4] > 1<<32-1 {
		return bad("its position is out of range")
	}
	if (nums[2] > 0) != (nums[3] > 0) {
		return bad("its position is inconsistent")
	}
	cur.pos, cur.scan, cur.skip, cur.scanCount, cur.prefix = int(nums[0]), nums[1], int(nums[2]), int(nums[3]), uint32(nums[4])
	if cur.prefix != prefixSum(prefix) {
		return bad("it was made for another prefix")
	}
	return cur, nil
}

// globEscape escapes the characters SCAN's MATCH pattern gives a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// scanStep runs one SCAN step on master idx (scan.lua, through its lane:
// bounded by the per-master timeout like every other call) and returns
// the next SCAN cursor and the keys that start with prefix and are not the
// Client's own.
func (c *Client) scanStep(ctx context.Context, idx int, scan uint64, prefix string, count int) (uint64, []string, error) {
	m := c.masters[idx]
	res := OutcomeError{Op: "list", Quorum: c.quorum, Masters: len(c.masters)}
	fail := func(err error) (uint64, []string, error) {
		res.Kind = ErrQuorumUnavailable
		res.Failures = append(res.Failures, err)
		if ctx.Err() != nil {
			return 0, nil, fmt.Errorf("%w: %w", &res, ctx.Err())
		}
		return 0, nil, &res
	}
	if err := m.notCounting(); err != nil {
		// ErrMasterDown for a master marked down (a black-box pass read
		// "quarantined" for a paused one), ErrMasterQuarantined otherwise.
		return fail(&MasterError{Index: idx, Addr: m.addr, Err: err})
	}
	marker := c.opts.markerKey
	only := make([]bool, len(c.masters))
	only[idx] = true
	start := time.Now()
	f, _ := c.fanout(script{s: c.sc.scan, keys: []string{marker}, args: []any{strconv.FormatUint(scan, 10), globEscape(prefix) + "*", strconv.Itoa(count)}, only: only, via: listLane}, start)
	var got reply
	c.gather(ctx, f, start, only, func(r reply) bool { got = r; return true }, nil)
	if got.err != nil {
		return fail(masterErr(c, got))
	}
	if code, ok := got.val.(int64); ok && code == codeLost {
		m.lostDataSeen(got.gen, LossStateMissing, "data lost without restart: marker missing (seen by a listing's SCAN)")
		return fail(&MasterError{Index: idx, Addr: m.addr, Err: ErrMasterDataLost})
	}
	a, ok := got.val.([]any)
	if !ok || len(a) != 2 {
		return fail(&MasterError{Index: idx, Addr: m.addr, Err: errBadReply})
	}
	cs, _ := a[0].(string)
	next, err := strconv.ParseUint(cs, 10, 64)
	ks, ok := a[1].([]any)
	if err != nil || !ok {
		return fail(&MasterError{Index: idx, Addr: m.addr, Err: errBadReply})
	}
	keys := make([]string, 0, len(ks))
	for _, k := range ks {
		if s, _ := k.(string); strings.HasPrefix(s, prefix) && !c.reservedKey(s) {
			keys = append(keys, s)
		}
	}
	return next, keys, nil
}

// confirmHeld reads the status of every key on every master (one status
// script per key, on each master's listing lane, listBatch keys per round
// trip) and returns the held ones with validity > 0, sorted by key,
// leaving out those held on a master of before (scanned earlier: listed
// from there).
func (c *Client) confirmHeld(ctx context.Context, keys []string, before []int) ([]ListedLock, error) {
	slices.Sort(keys)
	keys = slices.Compact(keys)
	var out []ListedLock
	for lo := 0; lo < len(keys); lo += listBatch {
		held, err := c.confirmBatch(ctx, keys[lo:min(lo+listBatch, len(keys))], before)
		if err != nil {
			return nil, err
		}
		out = append(out, held...)
	}
	return out, nil
}

// confirmBatch is confirmHeld for at most listBatch keys: one round trip.
func (c *Client) confirmBatch(ctx context.Context, keys []string, before []int) ([]ListedLock, error) {
	start := time.Now()
	fans := make([]*fan, len(keys))
	for i, k := range keys {
		fans[i], _ = c.fanout(script{s: c.sc.status, keys: c.voteKeys(k), via: listLane}, start)
	}
	var out []ListedLock
	for i, k := range keys {
		t := c.newStatusTally()
		c.gather(ctx, fans[i], start, nil, func(r reply) bool { return t.add(r, false) }, nil)
		st, err := t.result(start)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %w", err, ctx.Err())
			}
			return nil, err
		}
		if !st.Held || st.Validity <= 0 || slices.ContainsFunc(before, func(m int) bool { return t.holds[m] == t.best }) {
			continue
		}
		out = append(out, ListedLock{Key: k, Validity: st.Validity, Fence: st.Fence})
	}
	return out, nil
}
