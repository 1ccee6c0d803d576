package chaos

// The client of a proxy process's control API, used by DockerTarget.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ProxyClient calls the control API of one `redlock-chaos proxy`.
type ProxyClient struct {
	base string
	hc   *http.Client
}

// NewProxyClient returns a client of the control API at base
// (http://host:port); hc nil uses a client with a 5s timeout.
func NewProxyClient(base string, hc *http.Client) *ProxyClient {
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	return &ProxyClient{base: strings.TrimSuffix(base, "/"), hc: hc}
}

// State returns the state of every listener.
func (c *ProxyClient) State(ctx context.Context) (ProxyControlState, error) {
	return c.call(ctx, http.MethodGet, "/state", nil)
}

// SetLatency delays every chunk through listener (or AllListeners) by d.
func (c *ProxyClient) SetLatency(ctx context.Context, listener int, d time.Duration) error {
	_, err := c.call(ctx, http.MethodPost, "/latency", url.Values{"d": {d.String()}}, listener)
	return err
}

// SetBlackhole turns the blackhole of listener (or AllListeners) on or off.
func (c *ProxyClient) SetBlackhole(ctx context.Context, listener int, on bool) error {
	_, err := c.call(ctx, http.MethodPost, "/blackhole", url.Values{"on": {strconv.FormatBool(on)}}, listener)
	return err
}

// SetReject turns rejection by listener (or AllListeners) on or off.
func (c *ProxyClient) SetReject(ctx context.Context, listener int, on bool) error {
	_, err := c.call(ctx, http.MethodPost, "/reject", url.Values{"on": {strconv.FormatBool(on)}}, listener)
	return err
}

// Reset resets the open connections of listener (or AllListeners) once.
func (c *ProxyClient) Reset(ctx context.Context, listener int) error {
	_, err := c.call(ctx, http.MethodPost, "/reset", url.Values{}, listener)
	return err
}

// Heal lifts every fault of listener (or AllListeners).
func (c *ProxyClient) Heal(ctx context.Context, listener int) error {
	_, err := c.call(ctx, http.MethodPost, "/heal", url.Values{}, listener)
	return err
}

func (c *ProxyClient) call(ctx context.Context, method, path string, q url.Values, listener ...int) (ProxyControlState, error) {
	var st ProxyControlState
	if len(listener) > 0 && listener[0] != AllListeners {
		q.Set("listener", strconv.Itoa(listener[0]))
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return st, fmt.Errorf("chaos: proxy control: %w", err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return st, fmt.Errorf("chaos: proxy control: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return st, fmt.Errorf("chaos: proxy control %s %s: %s: %s", method, u, resp.Status, strings.TrimSpace(string(msg)))
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("chaos: proxy control %s %s: %w", method, u, err)
	}
	return st, nil
}
