package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/redlockd/redlockd/redlock"
)

// Limits are what one account may use: a call quota over a window, a
// token-bucket rate limit and a cap on the locks it holds at once. In
// account_defaults they apply to every account; on an api_keys entry they
// override the defaults field by field (a field left out inherits it).
type Limits struct {
	// Quota is the number of calls allowed per window; nil inherits, and
	// "unlimited" (Calls 0) means no quota.
	Quota *Quota `yaml:"quota,omitempty"`
	// Rate is the token bucket's refill, in calls per second; 0 means no
	// rate limit. 0 to 1000000.
	Rate *float64 `yaml:"rate,omitempty"`
	// Burst is the bucket's size: how many calls may come at once. Default
	// the rate rounded up (at least 1); 1 to 10000000.
	Burst *int `yaml:"burst,omitempty"`
	// MaxLocks caps the locks the account holds at once, across every
	// daemon of the deployment; 0 means no cap. 0 to 100000000.
	MaxLocks *int `yaml:"max_locks,omitempty"`
	// MaxIdempotencyBytes caps the bytes the account's idempotency records
	// take on each master (their fields and key, and their answers once
	// completed), across every daemon; 0 means no cap. 0 to 1 TiB.
	MaxIdempotencyBytes *int `yaml:"max_idempotency_bytes,omitempty"`
	// LockDelay is the lock-delay of the account's acquires that send no
	// lock_delay_ms (an acquire that sends one, 0 included, keeps its
	// own); 0 means none. 0 to 60s, whole milliseconds, and at most
	// max_ttl − 1s so that an acquire of ttl 1 can take it.
	LockDelay *Duration `yaml:"lock_delay,omitempty"`
}

// Quota is a number of calls per window. Windows are aligned on the Unix
// epoch (a 24h window resets at 00:00 UTC). Calls 0 means unlimited.
type Quota struct {
	Calls int64    `yaml:"calls"`
	Per   Duration `yaml:"per"`
}

// Limits Validate enforces on Limits.
const (
	maxQuotaCalls = 1_000_000_000_000
	minQuotaPer   = time.Second
	maxQuotaPer   = 31 * 24 * time.Hour
	maxRate       = 1_000_000
	maxBurst      = 10_000_000
	maxMaxLocks   = 100_000_000

	// DefaultMaxLocks is account_defaults.max_locks when nothing sets it.
	// A held lock with a 512-byte key costs about 800 B on every master,
	// so 10000 locks are about 8 MB per master: small against any
	// maxmemory a deployment would run with, yet a runaway client stops
	// there instead of filling the masters for every other account.
	DefaultMaxLocks = 10_000

	// DefaultMaxIdempotencyBytes is account_defaults.max_idempotency_bytes
	// when nothing sets it: 256 MiB per master, about 4,000 records with
	// answers at the default 64 KiB cap, or 200,000 with 1 KiB answers. An
	// account whose records outgrow it (records a second × retention ×
	// answer size) needs it raised; one that fills it gets 429
	// records_budget_full on new records, and every other account keeps
	// its locks.
	DefaultMaxIdempotencyBytes = 256 << 20
	maxMaxIdempotencyBytes     = 1 << 40

	defaultLimitsSyncInterval = 100 * time.Millisecond
	minLimitsSyncInterval     = 10 * time.Millisecond
	maxLimitsSyncInterval     = 10 * time.Second
)

// unlimited is how "no quota" is written in YAML, environment and flags.
const unlimited = "unlimited"

// UnmarshalYAML reads {calls: N, per: 24h} or the word "unlimited".
func (q *Quota) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		if n.Value == unlimited || n.Value == "none" {
			*q = Quota{}
			return nil
		}
		return &yaml.TypeError{Errors: []string{
			fmt.Sprintf(`line %d: quota: want {calls: 100000, per: 24h} or "unlimited"`, n.Line),
		}}
	}
	// n.Decode does not carry the file decoder's KnownFields: an unknown
	// field here ("pre: 2h" for per) was dropped, and the quota then
	// refused for a per of 0s, naming the wrong field (a black-box pass).
	if n.Kind == yaml.MappingNode {
		names := yamlFields(reflect.TypeFor[Quota]())
		var errs []string
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; !slices.Contains(names, k.Value) {
				msg := fmt.Sprintf(`line %d: quota: unknown field %q`, k.Line, k.Value)
				if near := nearest(k.Value, names); near != "" {
					msg += `; did you mean "` + near + `"?`
				}
				errs = append(errs, msg+"; a quota has calls and per")
			}
		}
		if errs != nil {
			return &yaml.TypeError{Errors: errs}
		}
	}
	type plain Quota
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*q = Quota(p)
	return nil
}

// MarshalYAML writes "unlimited" for a quota of 0 calls.
func (q Quota) MarshalYAML() (any, error) {
	if q.Calls == 0 {
		return unlimited, nil
	}
	type plain Quota
	return plain(q), nil
}

// String is the environment and flag form: "100000/24h0m0s" or "unlimited".
func (q Quota) String() string {
	if q.Calls == 0 {
		return unlimited
	}
	return strconv.FormatInt(q.Calls, 10) + "/" + q.Per.String()
}

// parseQuota reads "100000/24h" or "unlimited".
func parseQuota(s string) (Quota, error) {
	s = strings.TrimSpace(s)
	if s == unlimited || s == "none" {
		return Quota{}, nil
	}
	calls, per, ok := strings.Cut(s, "/")
	if !ok {
		return Quota{}, errors.New(`want calls/window such as "100000/24h", or "unlimited"`)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(calls), 10, 64)
	if err != nil {
		return Quota{}, errors.New(`calls: want a whole number, as in "100000/24h"`)
	}
	d, err := parseDuration(per)
	if err != nil {
		return Quota{}, fmt.Errorf("window: %w", err)
	}
	return Quota{Calls: n, Per: d}, nil
}

// AccountLimits are one account's limits with the defaults applied; zero
// fields mean "not limited".
type AccountLimits struct {
	QuotaCalls int64
	QuotaPer   time.Duration
	Rate       float64
	Burst      int
	MaxLocks   int
	// MaxIdempotencyBytes is Limits.MaxIdempotencyBytes (0: no cap).
	MaxIdempotencyBytes int64
	// LockDelay is the default lock-delay (Limits.LockDelay).
	LockDelay time.Duration
}

// AccountLimits returns the limits of k: k's own fields, the rest from
// AccountDefaults, the rest unlimited (MaxLocks: DefaultMaxLocks is in
// DefaultConfig's AccountDefaults, so a file that sets no max_locks keeps
// it).
func (c Config) AccountLimits(k APIKey) AccountLimits {
	pick := func(get func(Limits) bool) Limits {
		if get(k.Limits) {
			return k.Limits
		}
		return c.AccountDefaults
	}
	var l AccountLimits
	if src := pick(func(x Limits) bool { return x.Quota != nil }); src.Quota != nil && src.Quota.Calls > 0 {
		l.QuotaCalls, l.QuotaPer = src.Quota.Calls, time.Duration(src.Quota.Per)
	}
	if src := pick(func(x Limits) bool { return x.Rate != nil }); src.Rate != nil {
		l.Rate = *src.Rate
	}
	if l.Rate > 0 {
		l.Burst = max(int(math.Ceil(l.Rate)), 1)
		if src := pick(func(x Limits) bool { return x.Burst != nil }); src.Burst != nil {
			l.Burst = *src.Burst
		}
	}
	if src := pick(func(x Limits) bool { return x.MaxLocks != nil }); src.MaxLocks != nil {
		l.MaxLocks = *src.MaxLocks
	}
	if src := pick(func(x Limits) bool { return x.MaxIdempotencyBytes != nil }); src.MaxIdempotencyBytes != nil {
		l.MaxIdempotencyBytes = int64(*src.MaxIdempotencyBytes)
	}
	if src := pick(func(x Limits) bool { return x.LockDelay != nil }); src.LockDelay != nil {
		l.LockDelay = time.Duration(*src.LockDelay)
	}
	return l
}

// limits checks one Limits block; field is its YAML path
// ("account_defaults", "api_keys[2]"); maxTTL is max_ttl and defaultTTL
// the effective default_ttl, in seconds.
func (v *validator) limits(field string, l Limits, maxTTL, defaultTTL int) {
	if l.Quota != nil && (l.Quota.Calls != 0 || l.Quota.Per != 0) {
		v.integer(field+".quota.calls", l.Quota.Calls, 1, maxQuotaCalls)
		v.duration(field+".quota.per", l.Quota.Per, minQuotaPer, maxQuotaPer)
	}
	if l.Rate != nil {
		r := *l.Rate
		if math.IsNaN(r) || r < 0 || r > maxRate {
			v.add(field+".rate", "%g is out of range, need 0 (no limit) to %d calls per second", r, maxRate)
		}
	}
	if l.Burst != nil {
		v.integer(field+".burst", int64(*l.Burst), 1, maxBurst)
	}
	if l.MaxLocks != nil {
		v.integer(field+".max_locks", int64(*l.MaxLocks), 0, maxMaxLocks)
	}
	if l.MaxIdempotencyBytes != nil {
		v.integer(field+".max_idempotency_bytes", int64(*l.MaxIdempotencyBytes), 0, maxMaxIdempotencyBytes)
	}
	if l.LockDelay != nil {
		d := time.Duration(*l.LockDelay)
		switch {
		case d > redlock.MaxLockDelay:
			v.add(field+".lock_delay", "%v is above the limit of %v", d, redlock.MaxLockDelay)
		case d%time.Millisecond != 0:
			v.add(field+".lock_delay", "%v is not a whole number of milliseconds", d)
		case maxTTL >= 1 && d > time.Duration(maxTTL-1)*time.Second:
			// The delay record outlives the lock by the delay and must not
			// outlive max_ttl (redlock/lockdelay.go): ttl 1 + the delay.
			v.add(field+".lock_delay", "%v is above max_ttl (%d s) − 1s, so no acquire could take it", d, maxTTL)
		case maxTTL >= 1 && defaultTTL >= 1 && d > time.Duration(maxTTL-defaultTTL)*time.Second:
			// An acquire that sends no ttl gets default_ttl and this delay.
			v.add(field+".lock_delay", "%v + default_ttl (%d s) is above max_ttl (%d s), so every acquire that sends no ttl would be refused; lower lock_delay or default_ttl", d, defaultTTL, maxTTL)
		}
	}
}

func intPtr(n int) *int { return &n }
