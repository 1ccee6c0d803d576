package redlock

import (
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// A master that lost its data may have lost locks granted before the loss;
// each ends at most one max TTL after it was granted, so the quarantine
// that keeps the master's vote out is bounded by "the loss + max TTL"
// (horizon.go). That bound must be the longest TTL any client of these
// masters may grant, not this Client's own max TTL: a daemon with max_ttl
// 5s and a library client allowing 12s share the masters, and the daemon's
// own bound would let a contender's vote count 5s after the loss while the
// library's 12s lock still stands (the Docker drill's restart-empty row
// showed exactly that overlap).
//
// So every Client registers its max TTL on every master at every health
// probe (scripts/max_ttl.lua: a sorted set of max TTLs, each kept until its
// last registration plus itself, which is the longest any lock granted by
// a client with that max TTL can outlive the client's last probe), and a
// loss quarantine is bounded by the longest registered (lossTTL). A client
// registers before its first vote counts (the first probe round runs
// before New returns, and a master votes only once probed), so every
// master that voted for a lock carries its client's registration; the
// repair reads a quorum of the others, which meets the lock's quorum, and
// bounds the quarantine by the longest it finds there too (readOthers).

// lossTTL is the longest a lock may outlive its grant on these masters, as
// far as this Client knows: its own max TTL, or a longer one another client
// registered.
func (c *Client) lossTTL() time.Duration {
	return max(c.opts.maxTTL, time.Duration(c.mastersMaxTTL.Load()))
}

// LongestMaxTTL returns the longest max TTL this Client knows of on its
// masters: its own (WithMaxTTL), or a longer one another client registered
// (at most MaxTTLCeiling). A master that lost its data is kept out for up
// to that long when no quorum of lease horizons bounds the locks it lost,
// and at least that long after an operator's RepairFences.
func (c *Client) LongestMaxTTL() time.Duration { return c.lossTTL() }

// noteMastersMaxTTL records the longest max TTL (ms) a master's registry
// holds. It only grows: an entry that expired on one master may still be
// live on another.
func (c *Client) noteMastersMaxTTL(d time.Duration) {
	for {
		cur := c.mastersMaxTTL.Load()
		if int64(d) <= cur {
			return
		}
		if c.mastersMaxTTL.CompareAndSwap(cur, int64(d)) {
			break
		}
	}
	c.longerMaxTTLSeen(d)
	if d > c.opts.maxTTL && !c.maxTTLWarned.Swap(true) {
		c.opts.logger.Warn("another client of these masters allows locks longer than this client's max TTL: a master that loses its data is quarantined for up to that longer TTL",
			slog.Duration("max_ttl", c.opts.maxTTL), slog.Duration("longest_registered", d))
	}
}

// registeredMaxTTL takes the answer of a probe's registration (max_ttl.lua):
// the longest max TTL registered on m. A master that refuses the
// registration (an ACL without ZADD, say) is logged once: a lock granted
// with its vote by a client with a longer max TTL would not be known to a
// Client that repairs another master from it.
func (m *master) registeredMaxTTL(cmd *redis.Cmd) {
	d, odd, err := registryAnswer(cmd)
	if err != nil {
		if !m.maxTTLRefused.Swap(true) {
			m.c.opts.logger.Warn("master refused this client's max TTL registration; loss quarantines may not know a longer TTL another client uses", masterAttr(m), slog.Any("error", err))
		}
		return
	}
	m.maxTTLRefused.Store(false)
	if odd > 0 && !m.maxTTLOdd.Swap(true) {
		m.c.opts.logger.Warn("the max TTL registry on this master holds entries no client writes (not a number, ≤ 0, or above the ceiling): skipped, or counted as the ceiling",
			masterAttr(m), slog.String("key", m.c.opts.maxTTLKey), slog.Int64("entries", odd), slog.Duration("ceiling", MaxTTLCeiling))
	}
	m.c.noteMastersMaxTTL(d)
}

// maxTTLCeilingMS is MaxTTLCeiling in ms, max_ttl.lua's ARGV[2].
var maxTTLCeilingMS = MaxTTLCeiling.Milliseconds()

// registryAnswer reads a max_ttl.lua answer, {longest max TTL in ms, entries
// skipped or capped}, as a duration within [0, MaxTTLCeiling]: the one
// conversion for the probe's registration, a repair's read of the others
// and RepairFences. The script already caps; capping again here keeps
// lostAt + the answer from overflowing whatever a master returns.
func registryAnswer(cmd *redis.Cmd) (d time.Duration, odd int64, err error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return 0, 0, err
	}
	if len(v) != 2 {
		return 0, 0, errBadReply
	}
	ms := min(max(v[0], 0), maxTTLCeilingMS)
	return time.Duration(ms) * time.Millisecond, v[1], nil
}
