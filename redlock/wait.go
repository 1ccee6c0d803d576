package redlock

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waiting for a lock (WithWait).
//
// A waiting Acquire joins the queue of its key in this Client: waiters on
// one key are served in arrival order, and only the first (the head) makes
// attempts, so at most one attempt per key is in flight for its waiters and
// a waiter behind it costs the masters nothing. The head attempts again:
//
//   - as soon as the lock is released through any Client of the deployment
//     (every daemon replica): the release script publishes the release's
//     id and the key (releaseMessage) on the release channel of every
//     master, and the Client subscribes to it on every master once the
//     first waiter joins;
//   - when the holder's lock ends by itself: the refusing masters report
//     its remaining TTL (OutcomeError.RetryAfter), and the head wakes then;
//   - at the latest after pollFallback, in case notifications were lost (a
//     master down, a pub/sub connection killed), so a lost notification only
//     slows the hand-off down to polling;
//   - while no quorum can vote, with the retry strategy's backoff: masters
//     may come back within the wait.
//
// A waiter that joins an empty queue attempts once more at once: a release
// between Acquire's first attempt and the join notified nobody. When a
// head leaves without the lock (its wait ran out, its caller went away)
// the next waiter becomes a head and attempts at once; when it leaves
// with the lock, the next waiter becomes a head that attempts at the end
// of the winner's lock on the masters (as a refused attempt would have told it), or
// at a release or released slot before: the key is held by the one that
// left, and a semaphore's released slots wake its idle heads in arrival
// order (semQueue). An attempt at once there was refused, or, for a
// semaphore, took a slot whose release was on its way to a head that came
// earlier (that head then waited for the next release: 5 runs in 140 of
// TestSemaphoreNewWaiterJoinsBehindTheQueue on a loaded machine). Waiters
// that are not heads wake every pollFallback, so that one made a head
// without a notification polls as a head does. The order
// holds within one Client; across daemons there is no global order: after a
// release, the heads of every daemon attempt and one of them wins. A
// failed attempt's clean-up publishes the keys it deleted, as a release
// does (acquire.go cleanup): they may have refused another attempt.
//
// A semaphore's waiters (AcquirePermit) queue by semaphore and by the
// permits they ask for (permitWaitQueue); a queue has up to that many
// heads, a released slot is noted once in every queue whose callers take
// it and wakes one idle head there, which tries that slot first
// (semQueue); a new caller joins a queue that has waiters without an
// attempt of its own.
//
// Load on the masters while a key is held: one attempt per pollFallback
// per key per Client (one script call per master each), whatever the number
// of waiters, plus one attempt per release notification and one when a
// waiter joins an empty queue.

// pollFallback bounds how long the head of a queue sleeps without a
// notification. A variable so that a test can show that a waiter got the
// lock by a notification, not by a poll.
var pollFallback = 2 * time.Second

// waiter is one Acquire waiting in a key's queue.
type waiter struct {
	wake chan struct{} // buffered 1: a release, or becoming the head
	busy bool          // under waitQueues.mu: attempting now
	// due, under waitQueues.mu: set when w was made a head by a waiter
	// that left with the lock: when that lock ends on the masters, w's
	// first attempt as a head (takeDue).
	due time.Time
}

// waitQueues holds the queue of every key with waiters.
//
// A key's queue has one head. A semaphore's queue (permitWaitQueue) has up
// to its permits of them (maxHeads): its slots are independent locks, and a
// single head would serialise every hand-off of every slot through its
// own round trips. Each release of a slot wakes one head that is not
// attempting already, and notes the slot, which the woken head tries
// first (takeFreed).
type waitQueues struct {
	mu     sync.Mutex
	byKey  map[string][]*waiter
	active int // waiters in all queues
	// watchers: per key, the queues of multi-key locks (multikey.go) that
	// hold it, with how many waiters of each watch it: the release of any
	// key of a set wakes the set's queue.
	watchers map[string]map[string]int
	// sems: the semaphore queues with waiters (permitWaitQueue), and
	// semsOf, per semaphore (permitQueue), the keys of its queues: one per
	// permits asked for, since callers with another N can take other
	// slots.
	sems   map[string]*semQueue
	semsOf map[string][]string
	// recent: per key a waiter here waits for (waitedFor), the releases
	// of it heard; forgotten when no waiter waits for the key.
	recent map[string]*keyReleases
	// holderEnds: per queue, the holder's end as the latest refused
	// attempt of its heads saw it (sawHolder); dropped with the queue.
	holderEnds map[string]holderEnd
}

// holderEnd is when a refused attempt saw the holder's lock end (the
// attempt's time plus its RetryAfter), and when that attempt was.
type holderEnd struct{ seen, ends time.Time }

// keyReleases is what a waited-for key keeps of its releases heard
// (releaseMessage ids), oldest first, at most recentReleases each.
//
// A copy of a release that arrives after a waiter here won the key tells
// nothing: the key is the winner's. It used to wake the next head for an
// attempt the winner refused (for a semaphore's slot: that attempt then
// tried every other slot). A copy that arrives after a failed attempt
// still wakes a head: the attempt may have voted before the release
// reached a majority of the masters, and only the release's later copies
// say it has since.
type keyReleases struct {
	heard []string // releases heard since the key was last won here
	taken []string // releases heard before a waiter here won the key: their copies wake nobody
}

// recentReleases bounds the release ids remembered per key and kind. One
// is enough for copies that arrive before the next release of the key; a
// few more cover a copy from a slow master that arrives after the next
// holder's own release (the masters publish in the order they run the
// scripts, not in the order of the releases).
const recentReleases = 4

// pushID appends id to ids, the oldest dropped past recentReleases.
func pushID(ids []string, id string) []string {
	if slices.Contains(ids, id) {
		return ids
	}
	if len(ids) == recentReleases {
		ids = append(ids[:0], ids[1:]...)
	}
	return append(ids, id)
}

// semQueue is what a semaphore's queue keeps beside its waiters.
//
// Every master that deleted a slot lock publishes its release, so one
// release arrives up to five times. Each copy woke a head before, and
// every head but the first found the slot taken and tried all the others:
// a release cost several refused attempts. Copies of a release of a slot
// a waiter here has won are now dropped on arrival (keyReleases), and a
// slot is noted once in freed; a head takes it (takeFreed) and tries it
// first.
// A new release of the slot (taken and released by another Client) that
// arrives while it tries is remembered (missed) and, if its attempt
// fails, noted again, to wake a head as before.
type semQueue struct {
	base    string          // the semaphore's permitQueue
	permits int             // the permits its waiters ask for: they take slots below it
	freed   []string        // slot keys released and not yet taken by a head, oldest first
	trying  map[string]bool // slot keys taken by a head whose attempt has not ended
	missed  map[string]bool // of those, noted again during the attempt
}

// maxHeads bounds the heads of one semaphore queue: how many of its
// waiters in one Client attempt at once.
const maxHeads = 64

// watch makes the release of any of keys wake the head of queue q.
func (q *waitQueues) watch(queue string, keys []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.watchers == nil {
		q.watchers = map[string]map[string]int{}
	}
	for _, k := range keys {
		if q.watchers[k] == nil {
			q.watchers[k] = map[string]int{}
		}
		q.watchers[k][queue]++
	}
}

// unwatch undoes one watch(queue, keys).
func (q *waitQueues) unwatch(queue string, keys []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, k := range keys {
		if q.watchers[k][queue]--; q.watchers[k][queue] <= 0 {
			delete(q.watchers[k], queue)
		}
		if len(q.watchers[k]) == 0 {
			delete(q.watchers, k)
			q.forget(k)
		}
	}
}

// heard reports whether the release id of key (releaseMessage) wakes
// waiters: false for a copy of a release heard before a waiter here won
// the key (keyReleases). Only keys a waiter waits for are remembered, so
// the memory is bounded by the waiters' keys.
func (q *waitQueues) heard(key, id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.waitedFor(key) {
		return true
	}
	r := q.recent[key]
	if r == nil {
		if q.recent == nil {
			q.recent = map[string]*keyReleases{}
		}
		r = &keyReleases{}
		q.recent[key] = r
	}
	if slices.Contains(r.taken, id) {
		return false
	}
	r.heard = pushID(r.heard, id)
	return true
}

// won notes that a waiter here won keys (a lock's key, a semaphore's
// slot, every key of a multi-key lock): the releases of them heard so far
// are taken, and their copies wake nobody (keyReleases).
func (q *waitQueues) won(keys []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.wonLocked(keys)
}

// wonLocked is won under mu.
func (q *waitQueues) wonLocked(keys []string) {
	for _, k := range keys {
		if r := q.recent[k]; r != nil {
			for _, id := range r.heard {
				r.taken = pushID(r.taken, id)
			}
			r.heard = r.heard[:0]
		}
	}
}

// waitedFor reports whether a waiter here waits for key: a lock's queue,
// a multi-key lock's queue watching it, or, for a semaphore's slot, a
// queue of callers that can take it. Under mu.
func (q *waitQueues) waitedFor(key string) bool {
	if len(q.byKey[key]) > 0 || len(q.watchers[key]) > 0 {
		return true
	}
	base, slot, ok := parsePermitKey(key)
	if !ok {
		// Not a slot key as PermitKey writes it ("#permit:01", a plain
		// lock of anyone's): remembered, leave would not forget it.
		return false
	}
	for _, queue := range q.semsOf[base] {
		if slot < q.sems[queue].permits {
			return true
		}
	}
	return false
}

// forget drops the release ids of key once no waiter waits for it. Under
// mu.
func (q *waitQueues) forget(key string) {
	if _, ok := q.recent[key]; ok && !q.waitedFor(key) {
		delete(q.recent, key)
	}
}

// join appends a waiter to key's queue: a lock's (sem nil), whose first
// waiter attempts, or the queue of a semaphore's callers asking for
// sem.permits (permitWaitQueue), whose first min(permits, maxHeads) do.
func (q *waitQueues) join(key string, sem *permitWait) *waiter {
	w := &waiter{wake: make(chan struct{}, 1)}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.byKey == nil {
		q.byKey = map[string][]*waiter{}
	}
	if sem != nil && q.sems[key] == nil {
		if q.sems == nil {
			q.sems, q.semsOf = map[string]*semQueue{}, map[string][]string{}
		}
		q.sems[key] = &semQueue{base: sem.base, permits: sem.permits, trying: map[string]bool{}, missed: map[string]bool{}}
		q.semsOf[sem.base] = append(q.semsOf[sem.base], key)
	}
	q.byKey[key] = append(q.byKey[key], w)
	q.active++
	return w
}

// queued reports whether key's queue has waiters.
func (q *waitQueues) queued(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.byKey[key]) > 0
}

// headCount is how many of key's first waiters attempt: one, or for a
// semaphore's queue its permits, at most maxHeads. Under mu.
func (q *waitQueues) headCount(key string) int {
	if sq := q.sems[key]; sq != nil {
		return min(sq.permits, maxHeads)
	}
	return 1
}

// heads is the waiters of key's queue that attempt. Under mu.
func (q *waitQueues) heads(key string) []*waiter {
	ws := q.byKey[key]
	return ws[:min(len(ws), q.headCount(key))]
}

// isHead reports whether w is among the heads of key's queue.
func (q *waitQueues) isHead(key string, w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Contains(q.heads(key), w)
}

// startAttempt reports whether w is a head of key's queue and, if so,
// marks it attempting until endAttempt, so that a release wakes another
// head.
func (q *waitQueues) startAttempt(key string, w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !slices.Contains(q.heads(key), w) || !w.due.IsZero() {
		// Not a head, or made one by a winner since its wake (takeDue):
		// the wake that carried due is in w.wake, and the next round
		// takes it and waits for the winner's end.
		return false
	}
	w.busy = true
	return true
}

// endAttempt ends w's attempt; when a slot of key's queue was released
// while every head was attempting, w is woken to try it.
func (q *waitQueues) endAttempt(key string, w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w.busy = false
	if sq := q.sems[key]; sq != nil && len(sq.freed) > 0 {
		wakeToAttempt(w)
	}
}

// leave removes w from key's queue and wakes the waiter that becomes a
// head in its place: to attempt at once when w leaves without the lock
// (wonUntil zero), or, when w won it, to attempt when w's lock ends on
// the masters (wonUntil; due), as a refused attempt would have learnt: a
// winner that dies without a release hands the key on at its end.
func (q *waitQueues) leave(key string, w *waiter, wonUntil time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.byKey[key]
	n := q.headCount(key)
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			q.active--
			if i < n && len(ws) >= n {
				ws[n-1].due = wonUntil
				notify(ws[n-1])
			}
			break
		}
	}
	if len(ws) == 0 {
		delete(q.byKey, key)
		delete(q.holderEnds, key)
		q.forget(key)
		if sq := q.sems[key]; sq != nil {
			delete(q.sems, key)
			q.semsOf[sq.base] = slices.DeleteFunc(q.semsOf[sq.base], func(k string) bool { return k == key })
			if len(q.semsOf[sq.base]) == 0 {
				delete(q.semsOf, sq.base)
			}
			if len(q.recent) > 0 {
				for slot := range sq.permits {
					q.forget(sq.base + strconv.Itoa(slot))
				}
			}
		}
	} else {
		q.byKey[key] = ws
		if sq := q.sems[key]; sq != nil && len(sq.freed) > 0 {
			q.wakeIdleHead(key) // w was woken for a slot it left untaken
		}
	}
}

// heldRefusal returns err's *OutcomeError when it is a refusal by a
// holder whose end it knows (ErrLockHeld with a RetryAfter), else nil.
func heldRefusal(err error) *OutcomeError {
	var oe *OutcomeError
	if errors.As(err, &oe) && errors.Is(oe.Kind, ErrLockHeld) && oe.RetryAfter > 0 {
		return oe
	}
	return nil
}

// sawHolder notes the holder's end that err, an attempt of a head of
// key's queue made at at, saw: the queue's waiters that make no attempts
// answer with it (asOfNow).
func (q *waitQueues) sawHolder(key string, err error, at time.Time) {
	oe := heldRefusal(err)
	if oe == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.byKey[key]) == 0 {
		return // the queue is gone: nobody to answer
	}
	if h, ok := q.holderEnds[key]; ok && h.seen.After(at) {
		return
	}
	if q.holderEnds == nil {
		q.holderEnds = map[string]holderEnd{}
	}
	q.holderEnds[key] = holderEnd{seen: at, ends: at.Add(oe.RetryAfter)}
}

// asOfNow makes err, the refusal a waiter of key's queue saw at at, say
// the holder's remaining time now (RetryAfter), from the latest attempt
// of the queue that saw it: the waiter's own, or a head's since. A waiter
// that is not a head makes no attempt after its first, and it answered
// the RetryAfter of its arrival however long it had waited since: a
// daemon's waiters, answered at the end of their wait_ms, said
// retry_after 25 for a holder with 15 s left (a black-box pass). A
// RetryAfter that has run out is 1 ms (the holder's lock is ending: its
// key may outlive it by the drift allowance): still a known end.
func (q *waitQueues) asOfNow(key string, err error, at time.Time) error {
	var oe *OutcomeError
	if !errors.As(err, &oe) || !errors.Is(oe.Kind, ErrLockHeld) {
		return err
	}
	ends := time.Time{}
	if oe.RetryAfter > 0 {
		ends = at.Add(oe.RetryAfter)
	}
	q.mu.Lock()
	if h, ok := q.holderEnds[key]; ok && (ends.IsZero() || h.seen.After(at)) {
		ends = h.ends
	}
	q.mu.Unlock()
	if !ends.IsZero() {
		// The waiter's own error: nobody else holds it.
		oe.RetryAfter = max(time.Until(ends), time.Millisecond)
	}
	return err
}

// takeDue returns and clears w's due (the zero time when none): set, w
// was woken to wait as a head for that time, not to attempt.
func (q *waitQueues) takeDue(w *waiter) time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := w.due
	if !d.IsZero() {
		// The wake that carried it, if the timer came first: no
		// wakeToAttempt since (it clears due), so it says nothing more.
		w.due = time.Time{}
		select {
		case <-w.wake:
		default:
		}
	}
	return d
}

// released wakes the head of key's queue, if any.
func (q *waitQueues) released(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if ws := q.byKey[key]; len(ws) > 0 {
		wakeToAttempt(ws[0])
	}
	for queue := range q.watchers[key] {
		if ws := q.byKey[queue]; len(ws) > 0 {
			wakeToAttempt(ws[0])
		}
	}
}

// releasedSlot notes that slot key of the semaphore base (permitQueue)
// was released, in each of its queues whose callers can take that slot
// (once: semQueue), and wakes one head of each that is not attempting; if
// every head is, the first to end its attempt takes it (endAttempt).
func (q *waitQueues) releasedSlot(base, key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, queue := range q.semsOf[base] {
		sq := q.sems[queue]
		switch {
		case freedSlot(key, sq.permits) < 0: // a slot these callers do not take
		case sq.trying[key]:
			sq.missed[key] = true
		case slices.Contains(sq.freed, key):
		default:
			sq.freed = append(sq.freed, key)
			q.wakeIdleHead(queue)
		}
	}
}

// wakeIdleHead wakes the first head of queue that is not attempting.
// Under mu.
func (q *waitQueues) wakeIdleHead(queue string) {
	for _, h := range q.heads(queue) {
		if !h.busy {
			wakeToAttempt(h)
			return
		}
	}
}

// takeFreed returns the oldest slot key noted for queue by releasedSlot
// and marks it tried until triedFreed; "" when none.
func (q *waitQueues) takeFreed(queue string) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	sq := q.sems[queue]
	if sq == nil || len(sq.freed) == 0 {
		return ""
	}
	key := sq.freed[0]
	sq.freed = sq.freed[1:]
	sq.trying[key] = true
	return key
}

// triedFreed ends the attempt on key, a slot key takeFreed returned. The
// slot is noted again, and an idle head woken, when the attempt ended
// without an answer for it (untried: its caller left, no quorum), or
// when its release was noted again during the attempt and the attempt
// did not get it (got false; semQueue).
func (q *waitQueues) triedFreed(queue, key string, got, untried bool) {
	if key == "" {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	sq := q.sems[queue]
	if sq == nil {
		return
	}
	if got {
		// Won: the releases of key heard so far are taken (won) before it
		// leaves trying, in the same step. Between the two, a late copy
		// of its release was noted freed again and woke another head for
		// a slot the winner holds: a refused attempt that then tried
		// every other slot (TestSemaphoreQueueDropsACopyAfterTheWin).
		q.wonLocked([]string{key})
	}
	delete(sq.trying, key)
	if (untried || sq.missed[key] && !got) && !slices.Contains(sq.freed, key) {
		sq.freed = append(sq.freed, key)
		q.wakeIdleHead(queue)
	}
	delete(sq.missed, key)
}

// wakeHeads wakes the heads of every queue.
func (q *waitQueues) wakeHeads() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for key := range q.byKey {
		for _, h := range q.heads(key) {
			wakeToAttempt(h)
		}
	}
}

// Waiting returns how many Acquire calls are waiting for a lock held by
// another owner (or for a quorum), in this Client.
func (c *Client) Waiting() int {
	c.waits.mu.Lock()
	defer c.waits.mu.Unlock()
	return c.waits.active
}

// wakeToAttempt wakes w, a head, to attempt: a release, or a slot
// noted, since. It clears a due w was woken with (leave): the winner's
// lock may have been released before its end. Under waitQueues.mu.
func wakeToAttempt(w *waiter) {
	w.due = time.Time{}
	notify(w)
}

func notify(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// releaseChannel is the pub/sub channel the release scripts publish on:
// "<marker key>:released:v2", whose messages are releaseMessage's. (Before,
// "<marker key>:released" carried the bare key: daemons of the two
// versions side by side do not hear each other's releases, and their
// waiters fall back to polling, pollFallback.)
func (c *Client) releaseChannel() string { return c.releaseChan.(string) }

// releaseChannelOf is the release channel of a Client whose marker key is
// markerKey; New builds it once (Client.releaseChan).
func releaseChannelOf(markerKey string) string { return markerKey + ":released:v2" }

// ReleaseChannel is the pub/sub channel on which the masters publish the
// releases of a Client whose marker key (WithMarkerKey) is markerKey, and
// to which its waiters subscribe: "<markerKey>:released:v2". A Redis ACL
// user of the Client must be allowed to PUBLISH and SUBSCRIBE to it.
func ReleaseChannel(markerKey string) string { return releaseChannelOf(markerKey) }

// releaseIDLen is the length of a release's id in its message
// (releaseID).
const releaseIDLen = 16

// releaseID is the id of the release of token (releaseMessage): the
// 64-bit FNV-1a hash of the token in 16 hex digits. One release sends the
// same id to every master, and so does a release sent again to one that
// missed it (retryReleases). A hash, not the token's own characters:
// nothing of a token is published. Computed here, not by the script: the
// masters' CPU is the scarcer (docs/performance.md).
func releaseID(token string) string {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(token); i++ {
		h = (h ^ uint64(token[i])) * prime
	}
	var b [releaseIDLen]byte
	const digits = "0123456789abcdef"
	for i := releaseIDLen - 1; i >= 0; i-- {
		b[i] = digits[h&0xf]
		h >>= 4
	}
	return string(b[:])
}

// releaseMessage splits a message of the release channel into the
// release's id and the released key; ok is false for any other shape.
//
// Every master that deletes a lock publishes its release, so one release
// arrives up to five times, and copies can arrive long after the first
// (from a master that was slow, or paused): each copy used to wake a
// waiter, also after another waiter here had won the key, for an attempt
// the new holder refused. The id tells a copy (the same id for the key)
// from a new release of the key by another holder, whose token differs
// (keyReleases).
func releaseMessage(payload string) (id, key string, ok bool) {
	if len(payload) <= releaseIDLen {
		return "", "", false
	}
	return payload[:releaseIDLen], payload[releaseIDLen:], true
}

// subscribe starts, once, a subscription to the release channel on every
// master; each delivers released keys to the waiters until Close. It does
// not wait for them: connecting to a master that is down or paused waits
// out its dial and read timeouts, in the background, not in the way of the
// waiters (of every key) that would otherwise queue behind it. go-redis
// resubscribes after a lost connection. What a master publishes while it
// has no subscription of ours is lost: each time one is in place (again),
// the head of every queue attempts once, and pollFallback covers the rest.
func (c *Client) subscribe() {
	c.subOnce.Do(func() {
		c.subConns = make([]net.Conn, len(c.masters))
		for _, m := range c.masters {
			o := m.probeOpts
			o.PoolSize = 1
			// 0 is go-redis's default, 5 s: it bounds the commands a new
			// connection sends (HELLO), not the wait for messages
			// (PubSub.Receive sets no read deadline).
			o.ReadTimeout = 0
			o.Dialer = c.subDialer(m.idx, o.Dialer, &o)
			rdb := redis.NewClient(&o)
			ps := rdb.Subscribe(context.Background()) // no channel: connects nothing yet
			c.subs = append(c.subs, ps)
			c.wg.Go(func() {
				defer rdb.Close()
				// An error leaves the channel recorded: the receiver
				// connects and subscribes again, until Close.
				_ = ps.Subscribe(context.Background(), c.releaseChannel())
				msgs := ps.ChannelWithSubscriptions()
				for {
					select {
					case <-c.closed:
						return
					case msg, ok := <-msgs:
						if !ok {
							return
						}
						switch msg := msg.(type) {
						case *redis.Message:
							id, key, ok := releaseMessage(msg.Payload)
							if !ok || !c.waits.heard(key, id) {
								break // a copy of a release already heard
							}
							c.waits.released(key)
							if base, ok := permitQueue(key); ok {
								c.waits.releasedSlot(base, key)
							}
						case *redis.Subscription:
							// Subscribed (again): what this master published
							// before reached no waiter.
							c.waits.wakeHeads()
						}
					}
				}
			})
		}
	})
}

// subDialer is the dialer of master i's release subscription: dial (nil:
// go-redis's) over a connection that Close can close (Client.subConns).
// A dial under way when the Client closes is cancelled, and none starts
// after: the PubSub holds its lock while it dials, and PubSub.Close
// waits for that lock.
func (c *Client) subDialer(i int, dial func(ctx context.Context, network, addr string) (net.Conn, error), o *redis.Options) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = redis.NewDialer(o)
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-c.closed:
				cancel()
			case <-ctx.Done():
			}
		}()
		cn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c.subMu.Lock()
		defer c.subMu.Unlock()
		select {
		case <-c.closed: // Close closes the connections recorded before, not this one
			_ = cn.Close()
			return nil, ErrClosed
		default:
		}
		c.subConns[i] = cn
		return cn, nil
	}
}

// waitInQueue is an acquire's wait after a first attempt, begun at seen,
// failed with err (attemptThenWait): it queues behind queue's earlier waiters and
// attempts when the lock is released, ends, or a fallback poll is due,
// until giveUp. A key's queue is the key; a semaphore's waiters
// (semaphore.go) share the queue permitQueue(name), woken by the release
// of any of its permits; a multi-key lock's, multiQueue(keys).
func (c *Client) waitInQueue(ctx context.Context, key string, attempt func(context.Context) (*Lock, error), cfg *acquireConfig, giveUp time.Time, err error, seen time.Time) (*Lock, error) {
	c.subscribe()
	w := c.waits.join(key, cfg.permit)
	var wonUntil time.Time // the won lock's end on the masters
	defer func() { c.waits.leave(key, w, wonUntil) }()
	var due time.Time // takeDue's, until the next attempt
	if c.waits.isHead(key, w) {
		// A release between the first attempt and join found no waiter of
		// this key to notify: the first waiter attempts once more now.
		notify(w)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	c.waits.sawHolder(key, err, seen)
	for {
		left := time.Until(giveUp)
		if left <= 0 {
			return nil, c.waits.asOfNow(key, err, seen)
		}
		sleep := min(pollFallback, left) // a waiter made a head unwoken polls
		if c.waits.isHead(key, w) {
			next := nextAttempt(cfg, err)
			if !due.IsZero() {
				next = min(time.Until(due)+time.Millisecond, pollFallback)
			}
			sleep = min(max(next, 0), left)
		}
		timer.Reset(sleep)
		select {
		case <-ctx.Done():
			return nil, errors.Join(ErrNotObtained, ctx.Err(), err)
		case <-cfg.stop: // nil: never
			return nil, c.waits.asOfNow(key, err, seen)
		case <-c.closed:
			// Not joined with the last attempt's refusal: a closed Client
			// is not contention (ErrLockHeld).
			return nil, errors.Join(ErrNotObtained, ErrClosed)
		case <-w.wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
		if d := c.waits.takeDue(w); !d.IsZero() {
			due = d // made a head after a win: wait for the winner's end
			continue
		}
		if !c.waits.startAttempt(key, w) {
			continue
		}
		due = time.Time{}
		var lock *Lock
		tried := time.Now()
		lock, err = attempt(ctx)
		c.waits.endAttempt(key, w)
		if err != nil {
			seen = tried
			c.waits.sawHolder(key, err, seen)
		}
		if err == nil {
			// Its key lives on the masters until about start + TTL: the
			// drift allowance past its validity. At ValidUntil itself
			// the next head would be refused and try again.
			wonUntil = lock.ValidUntil().Add(c.drift(lock.TTL()))
			if lock.keys != nil {
				c.waits.won(lock.keys)
			} else {
				c.waits.won([]string{lock.key})
			}
			return lock, nil
		}
		if errors.Is(err, ErrInvalid) || errors.Is(err, ErrClosed) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, errors.Join(ErrNotObtained, ctx.Err(), err)
		}
		c.opts.logger.Debug("waiting for a lock", slog.String("key", key), slog.Any("error", err))
	}
}

// nextAttempt is how long the head sleeps after an attempt failed with
// err, unless notified first: until the holder's lock ends (its remaining
// TTL, a millisecond past it), at most pollFallback; with no quorum, the
// retry strategy's backoff.
func nextAttempt(cfg *acquireConfig, err error) time.Duration {
	var oe *OutcomeError
	if errors.As(err, &oe) && errors.Is(err, ErrLockHeld) {
		if oe.RetryAfter > 0 {
			return min(oe.RetryAfter+time.Millisecond, pollFallback)
		}
		return pollFallback
	}
	if b := cfg.retry.NextBackoff(); b > 0 {
		return b
	}
	return pollFallback
}
