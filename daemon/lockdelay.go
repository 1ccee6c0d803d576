package daemon

import (
	"errors"
	"fmt"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// An account's default lock-delay (APIKey.LockDelay, lock_delay in the
// configuration): the delay of its acquires that send no lock_delay_ms,
// as Consul's sessions have a LockDelay unless they set their own. An
// acquire that sends lock_delay_ms keeps it, and 0 opts out.

// checkLockDelay checks an account's default lock-delay.
func checkLockDelay(d time.Duration) error {
	switch {
	case d < 0:
		return errors.New("negative")
	case d > redlock.MaxLockDelay:
		return fmt.Errorf("%v is above the maximum of %v", d, redlock.MaxLockDelay)
	case d%time.Millisecond != 0:
		return fmt.Errorf("%v is not a whole number of milliseconds", d)
	}
	return nil
}

// accountLockDelay gives an acquire that sent no lock_delay_ms the
// account's default delay d, checked against max_ttl as lock_delay_ms is.
func accountLockDelay(req *lockRequest, d time.Duration, lim *lockBounds) *badRequest {
	if req.action != actAcquire || req.hasLockDelay || d == 0 {
		return nil
	}
	ms := d.Milliseconds()
	if req.ttl*1000+ms > lim.maxTTL*1000 {
		return bad("ttl: %d s + the account's default lock-delay of %d ms is above max_ttl (%d s); send a shorter ttl, or lock_delay_ms to set the delay yourself (0 for none)", req.ttl, ms, lim.maxTTL)
	}
	req.lockDelayMS = ms
	return nil
}
