package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/config"
)

// loadClient is one of the clients of TestShutdownUnderLoad: its own
// keep-alive connection pool, acquire then release of its own key, over
// and over, until stop says so or a connection is refused.
type loadClient struct {
	url    string
	key    string
	client *http.Client
	cycles atomic.Int64
	failed atomic.Bool // lost is not empty
	// refused counts dials refused once the listener closed: nothing was
	// sent, so the caller knows the request did not happen.
	refused int
	// unreleased counts acquires whose release never ran: its dial was
	// refused, or its connection reset before the daemon accepted it.
	unreleased int
	// reset counts requests on connections the kernel had queued for the
	// listener when it closed: reset before the daemon accepted them, so
	// the request never ran.
	reset int
	// noQuorum counts 503 answers, each followed by a retry.
	noQuorum int
	// lost are requests sent that got no answer, or a wrong one.
	lost []string
}

// errNoQuorum is a 503 quorum_unavailable: an answer (nothing was lost),
// after which the client tries again, as it would in production. On a
// loaded test machine the daemon may, rightly, not count masters whose
// clocks it could not verify precisely enough for a moment.
var errNoQuorum = errors.New("503 quorum_unavailable")

// call sends one request; a 503 answer is errNoQuorum.
func (c *loadClient) call(body string) (map[string]any, error) {
	req, err := http.NewRequest(http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-Key", keyA)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var env envelope
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return nil, fmt.Errorf("status %d, body not JSON: %w", resp.StatusCode, err)
	}
	if resp.StatusCode == http.StatusServiceUnavailable && env.Code == "quorum_unavailable" {
		c.noQuorum++
		return nil, errNoQuorum
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, env.Msg)
	}
	return env.Data, nil
}

// isRefused reports a dial that failed: the request was never sent.
func isRefused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// isReset reports a connection reset by the daemon's kernel: seen as
// ECONNRESET when the reset came after the request was written, or as
// EPIPE (broken pipe) when it came first and the write itself failed (the
// request never left: CI saw one among 2,020 cycles, its lock then counted
// as left unreleased, as the masters showed).
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func (c *loadClient) run(stop *atomic.Bool) {
	for !stop.Load() {
		d, err := c.call(`{"key":"` + c.key + `","ttl":60}`)
		if errors.Is(err, errNoQuorum) {
			continue
		}
		if isRefused(err) {
			c.refused++
			return
		}
		if isReset(err) {
			c.reset++
			return
		}
		if err != nil {
			c.lose("acquire: " + err.Error())
			return
		}
		if d["acquired"] != true {
			c.lose(fmt.Sprintf("acquire not granted: %v", d))
			return
		}
		release := `{"action":"release","key":"` + c.key + `","token":"` + d["token"].(string) + `"}`
		d, err = c.call(release)
		for errors.Is(err, errNoQuorum) {
			d, err = c.call(release)
		}
		if isRefused(err) {
			c.refused++
			c.unreleased++
			return
		}
		if isReset(err) {
			c.reset++
			c.unreleased++
			return
		}
		if err != nil {
			c.lose("release: " + err.Error())
			return
		}
		if d["released"] != true {
			c.lose(fmt.Sprintf("release refused: %v", d))
			return
		}
		c.cycles.Add(1)
	}
}

func (c *loadClient) lose(what string) {
	c.lost = append(c.lost, what)
	c.failed.Store(true)
}

// lockKeys counts the distinct lock keys under prefix on the masters.
func lockKeys(t *testing.T, prefix string) int {
	t.Helper()
	seen := map[string]bool{}
	for _, s := range servers {
		r := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		keys, err := r.Keys(context.Background(), prefix+"lock:*").Result()
		r.Close()
		require.NoError(t, err)
		for _, k := range keys {
			seen[k] = true
		}
	}
	return len(seen)
}

// TestShutdownUnderLoad: SIGTERM while 50 clients acquire and release over
// keep-alive connections.
//
// Behind a load balancer (here: a poller of /readyz that stops new work as
// soon as /readyz turns 503, as a balancer takes a backend out), the drain
// delay lets every cycle in progress finish: no request goes unanswered
// and no lock is left behind to expire by TTL.
//
// Without one (the clients keep going until they are refused), every
// request the daemon accepted gets its answer: each answer tells the
// keep-alive client with Connection: close to reconnect, connections
// already accepted are served after the listener closed, and a client
// then learns of the closed listener from a refused dial, which sends
// nothing. What remains are connections the kernel had queued for the
// listener at the instant it closed: they are reset before the daemon
// sees them, so their requests never ran (counted, not failed: no
// server closing a TCP listener can answer them).
func TestShutdownUnderLoad(t *testing.T) {
	const clients = 50
	for _, lb := range []bool{true, false} {
		t.Run(fmt.Sprintf("load_balancer=%v", lb), func(t *testing.T) {
			var prefix string
			base, stop := startDaemon(t, func(c *config.Config) {
				c.DrainDelay = config.Duration(3 * time.Second)
				prefix = c.KeyPrefix
			})
			var stopWork atomic.Bool
			lbDone := make(chan struct{})
			go func() {
				defer close(lbDone)
				if !lb {
					return
				}
				poll := &http.Client{Timeout: time.Second}
				for {
					resp, err := poll.Get(base + "/readyz")
					if err == nil {
						resp.Body.Close()
					}
					if err != nil || resp.StatusCode != http.StatusOK {
						stopWork.Store(true)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}()
			cs := make([]*loadClient, clients)
			var wg sync.WaitGroup
			for i := range cs {
				tr := &http.Transport{MaxIdleConnsPerHost: 1}
				t.Cleanup(tr.CloseIdleConnections)
				cs[i] = &loadClient{url: lockURL(base), key: fmt.Sprintf("shutdown:%d", i), client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
				wg.Go(func() { cs[i].run(&stopWork) })
			}
			// SIGTERM once every client has finished a cycle or two.
			require.Eventually(t, func() bool {
				for _, c := range cs {
					if c.cycles.Load() < 2 && !c.failed.Load() {
						return false
					}
				}
				return true
			}, 60*time.Second, 10*time.Millisecond)
			require.NoError(t, stop(), "a clean shutdown")
			stopWork.Store(true)
			wg.Wait()
			<-lbDone

			var cycles, refused, reset, unreleased, noQuorum int
			for _, c := range cs {
				noQuorum += c.noQuorum
				cycles += int(c.cycles.Load())
				refused += c.refused
				reset += c.reset
				unreleased += c.unreleased
				assert.Empty(t, c.lost, "client %s: a request sent got no answer", c.key)
			}
			t.Logf("%d clients, %d acquire/release cycles, %d refused dials, %d resets of queued connections, %d locks left unreleased, %d answers 503 (retried)", clients, cycles, refused, reset, unreleased, noQuorum)
			if lb {
				assert.Zero(t, refused+reset, "behind a balancer, no client reaches the closed listener")
				assert.Zero(t, lockKeys(t, prefix), "every acquired lock was released")
			} else {
				assert.Equal(t, unreleased, lockKeys(t, prefix), "only the locks whose release found the listener closed are left")
				assert.Less(t, reset, clients, "at most a few connections were queued at the instant the listener closed")
			}
		})
	}
}

// TestSlowClientCutAtShutdown runs the real binary: a client that sends its
// body one byte a second holds a connection at SIGTERM. It is cut off at
// the shutdown timeout, the daemon exits 0, and its log says how many
// connections were cut.
func TestSlowClientCutAtShutdown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	masters := make([]string, len(servers))
	for i, s := range servers {
		masters[i] = s.Addr()
	}
	cmd := exec.Command(binary, "serve", "--listen", addr, "--masters", strings.Join(masters, ","),
		"--key-prefix", fmt.Sprintf("e2e%d:", prefixSeq.Add(1)), "--per-master-timeout", "500ms",
		"--drain-delay", "0s", "--shutdown-timeout", "500ms")
	cmd.Env = append(os.Environ(), "REDLOCKD_API_KEYS=acme:"+keyA)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	require.Eventually(t, func() bool {
		resp, err := httpClient.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 20*time.Millisecond, "daemon not ready: %s", &logs)

	slow, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer slow.Close()
	_, err = fmt.Fprintf(slow, "POST /v1/lock HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\nContent-Length: 100\r\n\r\n{", addr, keyA)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		resp, err := httpClient.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(raw), "\nredlockd_requests_in_flight 2\n")
	}, 10*time.Second, 10*time.Millisecond, "the slow request is in its handler")
	go func() {
		for {
			time.Sleep(time.Second)
			if _, err := slow.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err = cmd.Wait()
	require.NoError(t, err, "exit 0 after cutting off a slow client; log:\n%s", &logs)
	var cut map[string]any
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(line, "cut off") {
			require.NoError(t, json.Unmarshal([]byte(line), &cut), line)
		}
	}
	require.NotNil(t, cut, "a log line says connections were cut off:\n%s", &logs)
	assert.EqualValues(t, 1, cut["connections_cut"])
	assert.Equal(t, "warn", cut["level"])
}
