package daemon

import (
	"fmt"
	"sync"
)

// Default caps on acquires waiting (wait_ms > 0) for a held lock.
const (
	// DefaultMaxWaiters caps the waiters of one daemon.
	DefaultMaxWaiters = 10000
	// DefaultMaxWaitersPerAccount caps the waiters of one account in one
	// daemon, so that one account cannot take every slot.
	DefaultMaxWaitersPerAccount = 1000
)

// waiters counts the acquires waiting in this daemon, in all and per
// account, against their caps. A waiter costs a goroutine and a timer here;
// on the masters it costs nothing while its key is held (redlock/wait.go).
type waiters struct {
	max, perAccount int

	mu        sync.Mutex
	total     int
	byAccount map[string]int
}

// enter takes a slot for account, or says why there is none.
func (w *waiters) enter(account string) (ok bool, why string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.total >= w.max:
		return false, fmt.Sprintf("too many acquires waiting in this daemon (max_waiters %d); retry later or without wait_ms", w.max)
	case w.byAccount[account] >= w.perAccount:
		return false, fmt.Sprintf("too many acquires waiting for this account (max_waiters_per_account %d); retry later or without wait_ms", w.perAccount)
	}
	if w.byAccount == nil {
		w.byAccount = map[string]int{}
	}
	w.total++
	w.byAccount[account]++
	return true, ""
}

// leave gives account's slot back.
func (w *waiters) leave(account string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.total--
	if w.byAccount[account]--; w.byAccount[account] == 0 {
		delete(w.byAccount, account)
	}
}

// waiting returns how many acquires wait now.
func (w *waiters) waiting() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}
