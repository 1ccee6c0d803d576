package daemon

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawExchange writes raw to a new connection to ts in one write, then
// reads every answer until the server closes the connection (or 2 s).
func rawExchange(t *testing.T, ts *testServer, raw string) (answers []*http.Response, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(2*time.Second)))
	_, err = io.WriteString(c, raw)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			// EOF: the server closed the connection; a timeout: it kept
			// it open with nothing more to say.
			return answers, errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || strings.Contains(err.Error(), "connection reset")
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		answers = append(answers, resp)
	}
}

func rawLock(key string, framing ...string) string {
	body := `{"key":"` + key + `"}`
	h := "POST /v1/lock HTTP/1.1\r\nHost: redlockd\r\nX-API-Key: " + testKeyAcme + "\r\nContent-Type: application/json\r\n"
	chunked := false
	for _, f := range framing {
		h += f + "\r\n"
		chunked = chunked || strings.Contains(strings.ToLower(f), "chunked")
	}
	if len(framing) == 0 {
		h += "Content-Length: " + itoa(len(body)) + "\r\n"
	}
	h += "\r\n"
	if chunked {
		return h + strings.ToLower(itoaHex(len(body))) + "\r\n" + body + "\r\n0\r\n\r\n"
	}
	return h + body
}

func itoa(n int) string    { return strconv.Itoa(n) }
func itoaHex(n int) string { return strconv.FormatInt(int64(n), 16) }

// A request with both Content-Length and Transfer-Encoding (in either
// order, any case) is refused with 400 and its connection closed: the
// request pipelined after it is never served (RFC 9112 §6.1). Requests
// framed by Content-Length alone keep the connection; a chunked request is
// served and is the last one on its connection.
func TestSmugglingFramingRefused(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f)
	next := rawLock("smuggled-next")
	for _, both := range [][]string{
		{"Content-Length: 4", "Transfer-Encoding: chunked"},
		{"transfer-encoding: chunked", "content-length: 4"},
		{"Content-Length: 0", "Transfer-Encoding: chunked"},
	} {
		before := f.calls.Load()
		answers, closed := rawExchange(t, ts, rawLock("smuggle", both...)+next)
		require.Len(t, answers, 1, "%q: one answer, nothing pipelined after it served", both)
		assert.Equal(t, http.StatusBadRequest, answers[0].StatusCode, "%q", both)
		assert.True(t, answers[0].Close, "%q: Connection: close", both)
		assert.True(t, closed, "%q: connection closed", both)
		assert.Equal(t, before, f.calls.Load(), "%q: no Locker call, for either request", both)
	}
	// After a good request on the same connection: the first is served,
	// the second refused, the third never read.
	answers, closed := rawExchange(t, ts, rawLock("first")+rawLock("smuggle", "Content-Length: 4", "Transfer-Encoding: chunked")+next)
	require.Len(t, answers, 2)
	assert.Equal(t, http.StatusOK, answers[0].StatusCode)
	assert.False(t, answers[0].Close)
	assert.Equal(t, http.StatusBadRequest, answers[1].StatusCode)
	assert.True(t, closed)
	f.mu.Lock()
	_, served := f.locks[redisKey(testPrefix, "acme", "", "smuggled-next")]
	f.mu.Unlock()
	assert.False(t, served, "the pipelined request after the refused one was served")

	// Content-Length only: three pipelined requests, all served, the
	// connection kept (the negative control of the check above).
	answers, closed = rawExchange(t, ts, rawLock("cl-1")+rawLock("cl-2")+rawLock("cl-3"))
	require.Len(t, answers, 3)
	for _, a := range answers {
		assert.Equal(t, http.StatusOK, a.StatusCode)
	}
	assert.False(t, closed, "a keep-alive connection framed by Content-Length stays open")

	// Chunked alone (with chunk extensions and a trailer) is framed as
	// net/http frames it: served, and the connection kept for the next.
	chunkedExt := "POST /v1/lock HTTP/1.1\r\nHost: redlockd\r\nX-API-Key: " + testKeyAcme + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"5;ext=1\r\n{\"key\r\n" + "B\r\n\":\"chunky\"}\r\n" + "0\r\nX-Trailer: 1\r\n\r\n"
	answers, closed = rawExchange(t, ts, rawLock("chunked", "Transfer-Encoding: chunked")+chunkedExt+next)
	require.Len(t, answers, 3)
	for _, a := range answers {
		assert.Equal(t, http.StatusOK, a.StatusCode)
		assert.False(t, a.Close)
	}
	assert.False(t, closed)
	// … and a smuggling attempt after chunked requests is still caught.
	answers, closed = rawExchange(t, ts, rawLock("chunked-2", "Transfer-Encoding: chunked")+rawLock("smuggle", "Transfer-Encoding: chunked", "Content-Length: 4")+next)
	require.Len(t, answers, 2)
	assert.Equal(t, http.StatusOK, answers[0].StatusCode)
	assert.Equal(t, http.StatusBadRequest, answers[1].StatusCode)
	assert.True(t, closed)
	// A chunk longer than its size line says: the body fails (400), and
	// net/http reads on from where the chunk should have ended ("}\r\n…"),
	// refuses that as a request line (its own 400) and closes. The
	// request pipelined after it is not served.
	bad := "POST /v1/lock HTTP/1.1\r\nHost: redlockd\r\nX-API-Key: " + testKeyAcme + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"A\r\n{\"key\":\"x\"}\r\n0\r\n\r\n"
	answers, closed = rawExchange(t, ts, bad+rawLock("after-malformed"))
	require.NotEmpty(t, answers)
	for _, a := range answers {
		assert.Equal(t, http.StatusBadRequest, a.StatusCode)
	}
	assert.True(t, closed)
	f.mu.Lock()
	_, served = f.locks[redisKey(testPrefix, "acme", "", "after-malformed")]
	f.mu.Unlock()
	assert.False(t, served, "the request pipelined after a malformed chunked body was served")
}
