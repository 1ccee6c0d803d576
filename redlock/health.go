package redlock

import (
	"context"
	"sync"
	"time"
)

// MasterStatus is a snapshot of what the Client knows about one master.
type MasterStatus struct {
	Index     int
	Addr      string
	Up        bool          // answered its last probe and accepts connections
	Latency   time.Duration // round trip of the last probe
	CheckedAt time.Time     // when the last probe finished; zero before the first
	LastError string        // the last probe or connection error, "" if none yet
}

// Masters returns a snapshot of every master's health, in configuration order.
func (c *Client) Masters() []MasterStatus {
	out := make([]MasterStatus, len(c.masters))
	for i, m := range c.masters {
		st := MasterStatus{Index: i, Addr: m.addr, Up: m.up.Load(), Latency: time.Duration(m.latencyNS.Load())}
		if t := m.checkedAt.Load(); t != 0 {
			st.CheckedAt = time.Unix(0, t)
		}
		if e := m.lastErr.Load(); e != nil {
			st.LastError = *e
		}
		out[i] = st
	}
	return out
}

// QuorumAvailable reports whether at least a quorum of masters is up.
func (c *Client) QuorumAvailable() bool {
	up := 0
	for _, m := range c.masters {
		if m.up.Load() {
			up++
		}
	}
	return up >= c.quorum
}

// healthLoop probes every master at once, every health interval, until Close.
// A master that fails its probe is marked down: the lanes then answer for it
// at once instead of waiting, so a lost quorum fails fast.
func (c *Client) healthLoop() {
	t := time.NewTicker(c.opts.healthInterval)
	defer t.Stop()
	for {
		c.probeAll()
		select {
		case <-c.closed:
			return
		case <-t.C:
		}
	}
}

func (c *Client) probeAll() {
	var wg sync.WaitGroup
	for _, m := range c.masters {
		wg.Go(func() { m.probeOnce() })
	}
	wg.Wait()
}

func (m *master) probeOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), m.c.opts.healthTimeout)
	defer cancel()
	start := time.Now()
	err := m.probe.Ping(ctx).Err()
	d := time.Since(start)
	m.checkedAt.Store(time.Now().UnixNano())
	if m.c.opts.observer != nil {
		m.c.opts.observer.ObserveProbe(m.idx, err == nil, d)
	}
	if err != nil {
		m.setDown(err)
		return
	}
	m.latencyNS.Store(int64(d))
	m.setUp()
}
