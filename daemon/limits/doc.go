// Package limits is redlockd's account limits: a quota of calls per
// window, a token-bucket rate limit and a cap on the locks held at once
// (max_locks), shared by every daemon serving the same masters with the
// same key prefix.
//
// A daemon creates a Store (its own connections to the masters), Metrics
// and a Limiter, gives the Limiter its accounts (SetAccounts, again on
// every reload), Starts it before serving and Closes it after. Each
// request takes one Admission (Limiter.Admission) once its API key is
// known and goes through it: Admit, and for the lock actions Reserve and
// Done, or Changed.
//
// What is guaranteed: a daemon decides alone, from what it knows, so a
// refusal costs nothing on the masters and an admitted call no extra round
// trip; counts are synced with the masters every sync interval and are
// never overcounted. What is not: n daemons together can admit more than a
// limit, by what the others admitted since their last sync reached this
// one; the bounds are on Limiter (limits.go). The key layout is in
// store.go, the scripts in scripts/.
package limits
