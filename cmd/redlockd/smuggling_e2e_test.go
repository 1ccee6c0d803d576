package main

import (
	"bufio"
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

// The real daemon on real masters, spoken to over a raw TCP connection: a
// request with both Content-Length and Transfer-Encoding, with a second
// request pipelined behind it, is answered 400 and the connection closed;
// the second request is never served — its lock key is on no master —
// while the same pair framed by Content-Length alone is served in full.
func TestSmugglingRefusedOnRealDaemon(t *testing.T) {
	base := daemonURL(t)
	addr := strings.TrimPrefix(base, "http://")
	req := func(key string, framing string) string {
		body := `{"key":"` + key + `"}`
		h := "POST /v1/lock HTTP/1.1\r\nHost: redlockd\r\nX-API-Key: " + keyA + "\r\nContent-Type: application/json\r\n"
		if framing == "both" {
			return h + "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n" +
				strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
		}
		return h + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	exchange := func(raw string) (statuses []int, closed bool) {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(3*time.Second)))
		_, err = io.WriteString(c, raw)
		require.NoError(t, err)
		br := bufio.NewReader(c)
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return statuses, !strings.Contains(err.Error(), "timeout")
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses = append(statuses, resp.StatusCode)
		}
	}

	statuses, closed := exchange(req("smuggle-carrier", "both") + req("smuggled-e2e", "cl"))
	assert.Equal(t, []int{http.StatusBadRequest}, statuses)
	assert.True(t, closed, "the connection is closed after the refusal")
	assert.Zero(t, keysContaining(t, "smuggled-e2e"), "the pipelined request was served")
	assert.Zero(t, keysContaining(t, "smuggle-carrier"))

	// The control: the same pipeline framed by Content-Length is served.
	statuses, _ = exchange(req("pipelined-1", "cl") + req("pipelined-2", "cl"))
	assert.Equal(t, []int{http.StatusOK, http.StatusOK}, statuses)
	assert.Positive(t, keysContaining(t, "pipelined-2"))
}
