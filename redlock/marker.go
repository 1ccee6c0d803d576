package redlock

// The steps after each probe round: the marker rule for masters seen for
// the first time, fencing-counter repairs and catch-up, and writing
// missing markers.

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// afterProbes runs after every probe round: it applies the marker rule to
// masters seen for the first time, writes missing markers, and repairs
// fencing counters.
func (c *Client) afterProbes() {
	c.probeMu.Lock()
	defer c.probeMu.Unlock()
	withMarker, answered := 0, 0
	for _, m := range c.masters {
		m.st.mu.Lock()
		if m.up.Load() {
			answered++
			if m.st.hasMarker {
				withMarker++
			}
		}
		m.st.mu.Unlock()
	}
	for _, m := range c.masters {
		if !m.up.Load() {
			continue
		}
		m.st.mu.Lock()
		first, has := !m.st.seen, m.st.hasMarker
		m.st.mu.Unlock()
		if !first {
			continue
		}
		// The marker rule, for a master seen for the first time:
		//   - with our marker: it kept its data since a redlockd wrote it;
		//   - without, while a quorum of the others have theirs: it
		//     restarted without its data while no redlockd was watching;
		//     quarantined, and its fencing counter repaired from that quorum;
		//   - without, while some but fewer than a quorum have theirs: a
		//     majority lost its data. The same, but no quorum can repair its
		//     fencing counter, so it counts only after an operator runs
		//     `redlockd repair-fences` (see repairFence);
		//   - no marker on any master, and every master answered: a
		//     brand-new deployment, which starts serving at once;
		//   - no marker on any master that answered, and some did not: the
		//     silent ones may hold the markers (and the fencing counters) of
		//     a deployment whose other masters all lost their data. Wait for
		//     every master to answer; meanwhile none of them votes.
		switch {
		case has:
			if !m.restoredFromSnapshot() {
				m.repairedRecently()
			}
		case withMarker >= c.quorum:
			m.lostData("marker key missing while a quorum of the other masters have theirs (restarted without data while unwatched)")
		case withMarker > 0:
			m.lostData(fmt.Sprintf("marker key missing on %d of %d masters: a majority lost its data; its fencing counter cannot be repaired from a quorum, run `redlockd repair-fences`", len(c.masters)-withMarker, len(c.masters)))
			c.opts.logger.Error("a majority of masters lost their data: they vote again only after `redlockd repair-fences` raises their fencing counters", masterAttr(m))
		case answered < len(c.masters):
			if !m.st.waitLogged.Swap(true) {
				c.opts.logger.Warn("no master has the marker yet and not all answered: waiting for every master before treating this as a new deployment", masterAttr(m), slog.Int("answered", answered), slog.Int("masters", len(c.masters)))
			}
			continue // not seen: the rule runs again next round
		}
		m.st.mu.Lock()
		m.st.seen = true
		m.st.mu.Unlock()
		defer m.st.probed.Store(true) // after the repairs and markers below
	}
	for _, m := range c.masters {
		if m.up.Load() && m.st.repairPending.Load() {
			c.repairFence(m)
		}
	}
	c.spreadFence()
	for _, m := range c.masters {
		m.st.mu.Lock()
		need := m.up.Load() && !m.st.hasMarker
		m.st.mu.Unlock()
		// Not in a server's first two seconds: its start time, derived from
		// INFO's whole-second uptime, may be up to a second late, and the
		// marker's time must come after it (see restoredFromSnapshot).
		if need && m.counts() && m.startedAgo() >= 2*time.Second {
			ctx, cancel := context.WithTimeout(context.Background(), c.opts.healthTimeout)
			if v, err := markerScript.Run(ctx, m.probe, []string{c.opts.markerKey}).Text(); err == nil {
				m.st.mu.Lock()
				m.st.hasMarker, m.st.markerValue = true, v
				m.st.mu.Unlock()
			}
			cancel()
		}
	}
}

// spreadFence copies the highest fencing counter the last probe round read
// from a counting master to every counting master below it (max-assign).
// The fence proof does not need it (fence.go); it bounds how far the
// masters that keep their data can lag the newest fence — a master whose
// votes come late never receives write-backs — which is what an operator's
// RepairFences after the loss of a majority relies on.
func (c *Client) spreadFence() {
	if c.opts.fenceKey == "" {
		return
	}
	var highest int64
	behind := make([]*master, 0, len(c.masters))
	read := make([]int64, len(c.masters))
	for i, m := range c.masters {
		m.st.mu.Lock()
		v, ok := m.st.fenceCounter, m.st.fenceRead
		m.st.mu.Unlock()
		read[i] = -1
		if ok && m.counts() {
			read[i] = v
			highest = max(highest, v)
		}
	}
	for i, m := range c.masters {
		if read[i] >= 0 && read[i] < highest {
			behind = append(behind, m)
		}
	}
	if len(behind) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.healthTimeout)
	defer cancel()
	target := strconv.FormatInt(highest, 10)
	for _, m := range behind {
		if err := fenceRepairScript.Run(ctx, m.probe, []string{c.opts.fenceKey}, target).Err(); err != nil {
			c.opts.logger.Debug("fencing counter catch-up failed", masterAttr(m), slog.Any("error", err))
		}
	}
}
