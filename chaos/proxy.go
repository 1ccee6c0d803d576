package chaos

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy on a loopback port in front of one upstream (a Redis
// master or a daemon), through which network faults are injected. The
// faults live in user space, between the client and the server, so the
// drills need no tc netem (kernel module, root) on the host.
//
// Faults, each switchable at any time and applying to open connections:
//
//   - SetLatency(d): every chunk is delivered d after it was read, in order,
//     in both directions (a slow link; throughput is not limited).
//   - SetBlackhole(true): nothing is delivered, in either direction;
//     connections stay open, and new ones are accepted and wait (a firewall
//     DROP rule: the client only learns by timing out). What was sent
//     meanwhile is delivered, in order, when the blackhole is lifted, as
//     TCP's retransmissions deliver it once a partition heals: a request
//     may land long after its sender gave up on it.
//   - SetReject(true): open connections are reset (RST) and new ones are
//     reset as soon as they are accepted (an unreachable host answering
//     with a reject): the client learns at once.
//   - Reset(): open connections are reset once; new ones work.
//   - HoldReplies(true): bytes from the upstream are kept in order and
//     delivered when the hold is lifted (a server or a link frozen after the
//     server answered: the answer arrives, late). Requests still flow.
//
// Why not Shopify's toxiproxy as a library: its newest Go module version is
// v2.5.0 (2022), which would add eight modules
// (zerolog, gorilla/mux, tomb.v1, ...) for an API built around its HTTP
// server and metrics, and has no "hold replies" fault, which the drills
// need to freeze a daemon's answer deterministically. The faults above are
// a few hundred lines, tested in proxy_test.go.
type Proxy struct {
	ln       net.Listener
	upstream func() (string, error)

	mu      sync.Mutex
	latency time.Duration
	reject  bool
	flow    chan struct{} // closed unless blackholed; replaced by SetBlackhole(true)
	hold    chan struct{} // closed when replies flow; replaced by HoldReplies(true)
	held    int           // chunks waiting behind the hold
	links   map[*link]struct{}
	closed  bool

	wg sync.WaitGroup
}

// chunk is one read from one side, stamped with when it is due.
type chunk struct {
	b   []byte
	due time.Time
}

// link is one proxied connection: client side and upstream side.
type link struct {
	client net.Conn

	mu     sync.Mutex
	server net.Conn // nil until dialed
	closed bool
	rst    bool
}

// setServer attaches the upstream connection, or closes it and reports
// false if the link was closed meanwhile (a reset during the dial).
func (l *link) setServer(s net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		closeConn(s, l.rst)
		return false
	}
	l.server = s
	return true
}

// close closes both sides; with rst, as a reset (SO_LINGER 0).
func (l *link) close(rst bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed, l.rst = true, rst
	closeConn(l.client, rst)
	if l.server != nil {
		closeConn(l.server, rst)
	}
}

func closeConn(c net.Conn, rst bool) {
	if tc, ok := c.(*net.TCPConn); ok && rst {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// NewProxy listens on a free 127.0.0.1 port and forwards to the address
// that upstream returns, resolved anew for every connection (a container
// that was replaced may have a new address).
func NewProxy(upstream func() (string, error)) (*Proxy, error) {
	return ListenProxy("127.0.0.1:0", upstream)
}

// ListenProxy is NewProxy on a listen address of the caller's choosing
// (":6379" in a container of the drill overlay, see `redlock-chaos
// proxy`).
func ListenProxy(addr string, upstream func() (string, error)) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("chaos: proxy listen: %w", err)
	}
	p := &Proxy{ln: ln, upstream: upstream, links: map[*link]struct{}{}, hold: make(chan struct{}), flow: make(chan struct{})}
	close(p.hold)
	close(p.flow)
	p.wg.Go(p.accept)
	return p, nil
}

// NewStaticProxy is NewProxy to a fixed address.
func NewStaticProxy(addr string) (*Proxy, error) {
	return NewProxy(func() (string, error) { return addr, nil })
}

// Addr returns the proxy's own address, 127.0.0.1:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk read from now on by d (0: none).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = max(d, 0)
	p.mu.Unlock()
}

// SetBlackhole stops (on) or resumes (off) all delivery; what waits is
// delivered in order when it is lifted.
func (p *Proxy) SetBlackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flow = toggle(p.flow, on)
}

// toggle returns gate closed (flowing) when stop is false, or a new open
// one (stopped) when stop is true and gate was flowing.
func toggle(gate chan struct{}, stop bool) chan struct{} {
	select {
	case <-gate: // flowing
		if stop {
			return make(chan struct{})
		}
	default: // stopped
		if !stop {
			close(gate)
		}
	}
	return gate
}

// gates returns the current gates (under mu).
func (p *Proxy) gates() (flow, hold chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flow, p.hold
}

// SetReject resets open connections and, while on, every new one.
func (p *Proxy) SetReject(on bool) {
	p.mu.Lock()
	p.reject = on
	p.mu.Unlock()
	if on {
		p.Reset()
	}
}

// Reset resets every open connection.
func (p *Proxy) Reset() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close(true)
	}
}

// HoldReplies stops (on) or resumes (off) the delivery of bytes from the
// upstream; held bytes are delivered in order when the hold is lifted.
func (p *Proxy) HoldReplies(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = toggle(p.hold, on)
}

// Held returns how many chunks from the upstream wait behind HoldReplies.
func (p *Proxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.HoldReplies(false)
	p.SetBlackhole(false)
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		reject := p.reject
		l := &link{client: c}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		if reject {
			p.drop(l, true)
			continue
		}
		p.wg.Go(func() { p.serve(l) })
	}
}

func (p *Proxy) drop(l *link, rst bool) {
	l.close(rst)
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// serve dials the upstream (once no blackhole is in the way) and pumps both
// directions until either side closes.
func (p *Proxy) serve(l *link) {
	flow, _ := p.gates()
	<-flow
	addr, err := p.upstream()
	if err == nil {
		var s net.Conn
		s, err = net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil && !l.setServer(s) {
			p.drop(l, true)
			return
		}
	}
	if err != nil {
		p.drop(l, true) // the client sees a reset, as if the server refused
		return
	}
	var pumps sync.WaitGroup
	pumps.Go(func() { p.pump(l, l.client, l.server, false) })
	pumps.Go(func() { p.pump(l, l.server, l.client, true) })
	pumps.Wait()
	p.drop(l, false)
}

// pump copies src to dst through a queue, so that latency delays chunks
// without reordering them; replies is the upstream-to-client direction,
// which HoldReplies stops. When either side fails the whole link closes.
func (p *Proxy) pump(l *link, src, dst net.Conn, replies bool) {
	q := make(chan chunk, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		broken := false // after a failed write, drain q so the reader never blocks
		for c := range q {
			if d := time.Until(c.due); d > 0 && !broken {
				time.Sleep(d)
			}
			for !broken { // wait while a gate is shut to this direction
				flow, hold := p.gates()
				var shut chan struct{}
				switch {
				case !isOpen(flow):
					shut = flow
				case replies && !isOpen(hold):
					shut = hold
				}
				if shut == nil {
					break
				}
				<-shut
			}
			if replies {
				p.mu.Lock()
				p.held--
				p.mu.Unlock()
			}
			if broken {
				continue
			}
			if _, err := dst.Write(c.b); err != nil {
				broken = true
				l.close(false)
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			lat := p.latency
			if replies {
				p.held++
			}
			p.mu.Unlock()
			q <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(lat)}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
				l.close(true)
			}
			break
		}
	}
	close(q)
	<-done
	// The reader saw EOF or an error: the data queued before it has been
	// delivered (or the link is already closed); now close the whole link.
	l.close(false)
}

func isOpen(gate chan struct{}) bool {
	select {
	case <-gate:
		return true
	default:
		return false
	}
}

// ProxyState is what a Proxy is doing now.
type ProxyState struct {
	// Addr is the proxy's listen address.
	Addr string `json:"addr"`
	// Latency is the delay of every chunk, as time.Duration's String.
	Latency   string `json:"latency"`
	Blackhole bool   `json:"blackhole"`
	Reject    bool   `json:"reject"`
	// Links is how many client connections are open.
	Links int `json:"links"`
}

// State returns the proxy's faults in force and its open connections.
func (p *Proxy) State() ProxyState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return ProxyState{
		Addr: p.Addr(), Latency: p.latency.String(), Blackhole: !isOpen(p.flow),
		Reject: p.reject, Links: len(p.links),
	}
}
