package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// The HTTP client that calls the daemon runs in the bench process, on the
// same two cores as the daemon and the masters: every microsecond it
// spends is one the daemon does not get. -httpclient picks it:
//
//   - fasthttp (default): github.com/valyala/fasthttp's HostClient, a
//     keep-alive HTTP/1.1 client that writes a request and reads its
//     answer on the calling goroutine, reusing its buffers — what a
//     lean client in any language does;
//   - net: net/http's Client (a read and a write goroutine per
//     connection, channels between them and the caller, a fresh
//     Request and Response per call), kept to compare.
//
// The daemon, its settings and the requests' bytes are the same either way.
var httpClientKind = flag.String("httpclient", "fasthttp", `the bench's HTTP client for the http and httpq targets: "fasthttp" or "net" (net/http)`)

// lockPoster sends one POST of body to the daemon's /v1/lock and hands
// the answer's status and body to read, whose bytes are valid only during
// the call.
type lockPoster interface {
	post(ctx context.Context, body string, read func(status int, b []byte) error) error
	close()
}

// newLockPoster returns the -httpclient client for d, able to keep conc
// connections open.
func newLockPoster(d *daemonProc, conc int) (lockPoster, error) {
	switch *httpClientKind {
	case "fasthttp":
		return newFastPoster(d, conc), nil
	case "net":
		return &netPoster{c: newHTTPClient(conc), url: d.url + "/v1/lock", apiKey: d.apiKey}, nil
	}
	return nil, fmt.Errorf(`-httpclient %q: want "fasthttp" or "net"`, *httpClientKind)
}

type netPoster struct {
	c           *http.Client
	url, apiKey string
}

func (p *netPoster) post(ctx context.Context, body string, read func(int, []byte) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", p.apiKey)
	resp, err := p.c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	buf := bodyBufs.Get().(*bytes.Buffer)
	defer bodyBufs.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return err
	}
	return read(resp.StatusCode, buf.Bytes())
}

func (p *netPoster) close() { p.c.CloseIdleConnections() }

type fastPoster struct {
	c           *fasthttp.HostClient
	url, apiKey string
}

func newFastPoster(d *daemonProc, conc int) *fastPoster {
	return &fastPoster{
		c: &fasthttp.HostClient{
			Addr:     strings.TrimPrefix(d.url, "http://"),
			MaxConns: conc + 16,
			// Idle connections are kept as long as net/http's are.
			MaxIdleConnDuration: 90 * time.Second,
			// Past MaxConns a call waits for a connection (as with
			// net/http) instead of failing with ErrNoFreeConns.
			MaxConnWaitTimeout: fastCallTimeout,
		},
		url:    d.url + "/v1/lock",
		apiKey: d.apiKey,
	}
}

// fastCallTimeout bounds a call whose context has no deadline (every
// cell's has one: its hard limit).
const fastCallTimeout = 30 * time.Second

func (p *fastPoster) post(ctx context.Context, body string, read func(int, []byte) error) error {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(p.url)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("X-API-Key", p.apiKey)
	req.SetBodyString(body)
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(fastCallTimeout)
	}
	if err := p.c.DoDeadline(req, resp, deadline); err != nil {
		if ok && errors.Is(err, fasthttp.ErrTimeout) {
			// The call ran into ctx's deadline (a cell's hard limit):
			// report it as net/http does, as the context's error.
			<-ctx.Done()
			return ctx.Err()
		}
		return err
	}
	return read(resp.StatusCode(), resp.Body())
}

func (p *fastPoster) close() { p.c.CloseIdleConnections() }

// bodyBufs recycles net/http answers' buffers.
var bodyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}
