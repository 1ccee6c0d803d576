package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
)

// Request framing (RFC 9112 §6): a request with both Content-Length and
// Transfer-Encoding may be an attempt at request smuggling — a proxy in
// front that frames by Content-Length and this server, which frames by
// Transfer-Encoding, disagree where the next request starts — and
// §6.1 says the server MUST close the connection after answering it.
// net/http serves such a request by its Transfer-Encoding and deletes the
// Content-Length header before the handler runs, so the daemon reads the
// framing headers off the wire itself: framingConn scans the header
// section of each request on a connection as net/http reads it.
//
// The scan follows the requests of a connection as net/http frames them.
// A request with both headers is refused (400) and its connection closed;
// what the client pipelined after it is never read. Where the scan cannot
// follow (a chunked body net/http would refuse too), the request it
// stopped at is the last one the connection serves: it is answered with
// Connection: close. A connection whose first byte is a TLS handshake is
// not scanned (the bytes are encrypted).

// framingConn is an accepted connection whose request framing is scanned.
type framingConn struct {
	net.Conn
	mu     sync.Mutex
	scan   framingScan
	served int // requests handed to the handler so far
}

func (c *framingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.scan.feed(p[:n])
		c.mu.Unlock()
	}
	if err != nil {
		answerPlainHTTP(err)
	}
	return n, err
}

// answerPlainHTTP answers a plain HTTP request sent to a TLS listener as
// net/http does for its own TLS connections (which it no longer sees as
// such behind framingConn): 400 "Client sent an HTTP request to an HTTPS
// server.", so that curl http://… and the clients say what is wrong
// instead of an empty reply.
func answerPlainHTTP(err error) {
	var re tls.RecordHeaderError
	if !errors.As(err, &re) || re.Conn == nil {
		return
	}
	switch string(re.RecordHeader[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		_, _ = io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		_ = re.Conn.Close()
	}
}

// CloseWrite lets net/http half-close the connection before closing it
// (so that the client reads the last answer rather than a reset), as it
// does on a *net.TCPConn.
func (c *framingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// framing is what the handler learns about the request it serves.
type framing uint8

const (
	framingOK     framing = iota
	framingLast           // past what the scan could follow: close after answering
	framingBoth           // Content-Length and Transfer-Encoding: refuse and close
	framingNoScan         // not scanned (TLS)
)

// next returns the framing of the next request the handler serves on c.
// net/http serves the requests of one connection one after the other, in
// the order they were read, so the n-th call is about the n-th request.
func (c *framingConn) next() framing {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.served
	c.served++
	switch {
	case c.scan.off:
		return framingNoScan
	case c.scan.stopped && i == c.scan.stopAt && c.scan.both:
		return framingBoth
	case c.scan.stopped && i >= c.scan.stopAt:
		return framingLast
	}
	return framingOK
}

type framingConnKey struct{}

// framingListener wraps the accepted connections in framingConn.
type framingListener struct{ net.Listener }

func (l framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c}, nil
}

// framingContext is the http.Server's ConnContext: it makes the
// connection's framingConn reachable from its requests.
func framingContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, framingConnKey{}, fc)
	}
	return ctx
}

// framingOf returns the framing of the request whose context is ctx:
// framingNoScan when it did not arrive through a framingListener.
func framingOf(ctx context.Context) framing {
	fc, ok := ctx.Value(framingConnKey{}).(*framingConn)
	if !ok {
		return framingNoScan
	}
	return fc.next()
}

// framingScan is the state of the scan of one connection's bytes: it
// follows the requests' framing as net/http parses it (header section;
// body by Content-Length, or chunked with its trailer section).
type framingScan struct {
	started, off, stopped bool
	stopAt                int  // the index of the request the scan stopped at
	both                  bool // that request had both framing headers
	requests              int  // header sections completed

	state    scanState
	bodyLeft int64 // bytes of a Content-Length body or of a chunk still to come

	// The current line: its length, the first bytes of a header's name
	// (lower case), whether the ':' was seen, and its value as a number
	// (Content-Length in decimal, a chunk size in hex).
	lineLen   int
	name      [len("transfer-encoding") + 1]byte
	nameLen   int
	colon     bool
	value     int64
	valueBad  bool // not digits between optional whitespace
	valueSeen bool // a digit was seen
	valueEnd  bool // whitespace or a chunk extension after the digits

	// The header section so far.
	hasCL, hasTE, clConflict, clSeen bool
	contentLength                    int64
}

type scanState uint8

const (
	scanRequestLine scanState = iota
	scanHeaders
	scanBody      // bodyLeft bytes of a Content-Length body
	scanChunkSize // a chunk-size line
	scanChunkData // bodyLeft bytes of chunk data
	scanChunkCRLF // the CRLF after chunk data: bodyLeft bytes of it left
	scanTrailer   // the trailer section after the last chunk
)

// maxFramedLength bounds the numbers the scan reads; net/http refuses
// larger ones anyway.
const maxFramedLength = 1 << 50

func (s *framingScan) feed(p []byte) {
	if !s.started {
		s.started = true
		if p[0] == 0x16 { // a TLS handshake record
			s.off = true
		}
	}
	for len(p) > 0 && !s.off && !s.stopped {
		switch s.state {
		case scanBody, scanChunkData:
			n := min(int64(len(p)), s.bodyLeft)
			s.bodyLeft -= n
			p = p[n:]
			if s.bodyLeft == 0 {
				if s.state == scanBody {
					s.state = scanRequestLine
				} else {
					s.state, s.bodyLeft = scanChunkCRLF, 2
				}
			}
			continue
		case scanChunkCRLF:
			// net/http wants exactly CRLF after chunk data.
			want := byte('\r')
			if s.bodyLeft == 1 {
				want = '\n'
			}
			if p[0] != want {
				s.stop(s.requests, false)
				return
			}
			p = p[1:]
			if s.bodyLeft--; s.bodyLeft == 0 {
				s.state = scanChunkSize
			}
			continue
		}
		b := p[0]
		p = p[1:]
		switch b {
		case '\n':
			s.endLine()
			continue
		case '\r':
			continue
		}
		s.lineLen++
		switch s.state {
		case scanHeaders:
			s.headerByte(b)
		case scanChunkSize:
			s.hexByte(b)
		}
	}
}

func (s *framingScan) headerByte(b byte) {
	switch {
	case !s.colon && b == ':':
		s.colon = true
	case !s.colon:
		if s.nameLen < len(s.name) {
			if 'A' <= b && b <= 'Z' {
				b += 'a' - 'A'
			}
			s.name[s.nameLen] = b
		}
		s.nameLen++
	case b == ' ' || b == '\t':
		s.valueEnd = s.valueSeen
	case '0' <= b && b <= '9' && !s.valueEnd && s.value < maxFramedLength:
		s.valueSeen = true
		s.value = s.value*10 + int64(b-'0')
	default:
		s.valueBad = true
	}
}

func (s *framingScan) hexByte(b byte) {
	if s.valueEnd {
		return // a chunk extension, or whitespace before one
	}
	var d byte
	switch {
	case '0' <= b && b <= '9':
		d = b - '0'
	case 'a' <= b && b <= 'f':
		d = b - 'a' + 10
	case 'A' <= b && b <= 'F':
		d = b - 'A' + 10
	case b == ';' || b == ' ' || b == '\t':
		s.valueEnd = true
		return
	default:
		s.valueBad = true
		return
	}
	if s.value >= maxFramedLength {
		s.valueBad = true
		return
	}
	s.valueSeen = true
	s.value = s.value<<4 | int64(d)
}

// endLine ends the current line: the request line, a header, the empty
// line that ends the header section, a chunk size, or a trailer line.
func (s *framingScan) endLine() {
	defer func() {
		s.lineLen, s.nameLen, s.colon = 0, 0, false
		s.value, s.valueBad, s.valueSeen, s.valueEnd = 0, false, false, false
	}()
	switch s.state {
	case scanRequestLine:
		if s.lineLen == 0 {
			// net/http refuses an empty request line and closes.
			s.stop(s.requests, false)
			return
		}
		s.state = scanHeaders
	case scanHeaders:
		if s.lineLen == 0 {
			s.endHeaders()
			return
		}
		s.header()
	case scanChunkSize:
		switch {
		case s.valueBad || !s.valueSeen:
			s.stop(s.requests, false) // net/http fails the body
		case s.value == 0:
			s.state = scanTrailer
		default:
			s.state, s.bodyLeft = scanChunkData, s.value
		}
	case scanTrailer:
		if s.lineLen == 0 {
			s.state = scanRequestLine
		}
	}
}

func (s *framingScan) header() {
	name := string(s.name[:min(s.nameLen, len(s.name))])
	switch {
	case s.nameLen == len("content-length") && name == "content-length":
		s.hasCL = true
		if s.valueBad || !s.valueSeen || (s.clSeen && s.value != s.contentLength) {
			s.clConflict = true
		}
		s.contentLength, s.clSeen = s.value, true
	case s.nameLen == len("transfer-encoding") && name == "transfer-encoding":
		s.hasTE = true
	}
}

func (s *framingScan) endHeaders() {
	i := s.requests
	s.requests++
	switch {
	case s.hasTE && s.hasCL:
		s.stop(i, true)
	case s.hasTE:
		s.state = scanChunkSize
	case s.clConflict:
		// net/http refuses it (400) and closes; nothing after it counts.
		s.stop(i, false)
	case s.hasCL && s.contentLength > 0:
		s.state, s.bodyLeft = scanBody, s.contentLength
	default:
		s.state = scanRequestLine
	}
	s.hasCL, s.hasTE, s.clConflict, s.clSeen, s.contentLength = false, false, false, false, 0
}

// stop ends the scan at request at: it and the requests after it are
// the last the connection serves.
func (s *framingScan) stop(at int, both bool) {
	s.stopped, s.stopAt, s.both = true, at, both
}
