package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/config"
	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/redlockd/redlockd/redlock"
)

// lockRedisKey is the daemon's Redis key of (account, no namespace, key),
// written out as docs/configuration.md documents it for placement.
func lockRedisKey(prefix, account, key string) string {
	return fmt.Sprintf("%slock:%d:%s:0::%d:%s", prefix, len(account), account, len(key), key)
}

type readyGroupsBody struct {
	Status string `json:"status"`
	Ready  bool   `json:"ready"`
	Quorum struct {
		Available bool `json:"available"`
		Masters   int  `json:"masters"`
	} `json:"quorum"`
	Masters []struct {
		Group string `json:"group"`
	} `json:"masters"`
	Groups []struct {
		Name   string `json:"name"`
		Quorum struct {
			Needed    int  `json:"needed"`
			Counting  int  `json:"counting"`
			Available bool `json:"available"`
		} `json:"quorum"`
		Ops     map[string]int64 `json:"ops"`
		Masters []struct {
			Addr  string `json:"addr"`
			State string `json:"state"`
		} `json:"masters"`
	} `json:"groups"`
}

func readyGroups(t *testing.T, base string) (int, readyGroupsBody) {
	t.Helper()
	resp, err := httpClient.Get(base + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	var b readyGroupsBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&b))
	return resp.StatusCode, b
}

func metricsText(t *testing.T, base string) string {
	t.Helper()
	resp, err := httpClient.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// TestMasterGroupsOverHTTP: two daemons over two groups of three real
// masters (master_groups). Keys spread over both groups, each exactly
// where the documented placement puts it, and the two daemons agree (a
// lock taken through one is held for the other). /readyz and /metrics show
// each group. When group a loses its quorum, group b's keys still lock
// through either daemon, a's keys get 503 naming group a, and /readyz
// answers 200 "partial".
func TestMasterGroupsOverHTTP(t *testing.T) {
	srvs, err := redisproc.StartN(6, redisproc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = redisproc.StopAll(srvs) })
	prefix := fmt.Sprintf("grp%d:", prefixSeq.Add(1))
	groupsOf := func(c *config.Config) {
		c.Masters = nil
		c.MasterGroups = []config.MasterGroup{
			{Name: "a", Masters: []string{srvs[0].Addr(), srvs[1].Addr(), srvs[2].Addr()}},
			{Name: "b", Masters: []string{srvs[3].Addr(), srvs[4].Addr(), srvs[5].Addr()}},
		}
		c.KeyPrefix = prefix
		c.MaxTTL = 60
	}
	d1 := daemonURL(t, groupsOf)
	d2 := daemonURL(t, groupsOf)
	place, err := redlock.NewPlacement("a", "b")
	require.NoError(t, err)
	direct := make([]*redis.Client, len(srvs))
	for i, s := range srvs {
		direct[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer direct[i].Close()
	}
	ctx := context.Background()

	byGroup := map[int][]string{}
	tokens := map[string]string{}
	for i := range 24 {
		key := fmt.Sprintf("job:%d", i)
		code, env, _ := post(t, lockURL(d1), keyA, fmt.Sprintf(`{"key":%q,"ttl":30}`, key))
		require.Equal(t, http.StatusOK, code, env.Msg)
		require.Equal(t, true, env.Data["acquired"], key)
		tokens[key] = env.Data["token"].(string)
		// Held for the other daemon: it places the key on the same group.
		code, env, _ = post(t, lockURL(d2), keyA, fmt.Sprintf(`{"key":%q,"ttl":30}`, key))
		require.Equal(t, http.StatusOK, code, env.Msg)
		require.Equal(t, false, env.Data["acquired"], "%s is held through the other daemon", key)

		rk := lockRedisKey(prefix, "acme", key)
		g := place.Group(rk)
		byGroup[g] = append(byGroup[g], key)
		on := 0
		for m, r := range direct {
			n := r.Exists(ctx, rk).Val()
			if m/3 != g {
				require.Zero(t, n, "%s (group %d) found on master %d of the other group", rk, g, m)
			}
			on += int(n)
		}
		require.GreaterOrEqual(t, on, 2, "%s on a quorum of its group", rk)
	}
	require.NotEmpty(t, byGroup[0], "keys on group a")
	require.NotEmpty(t, byGroup[1], "keys on group b")

	code, rb := readyGroups(t, d1)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ready", rb.Status)
	require.Len(t, rb.Groups, 2)
	require.Equal(t, 6, rb.Quorum.Masters)
	require.Len(t, rb.Masters, 6)
	require.Equal(t, "a", rb.Masters[0].Group)
	require.Equal(t, "b", rb.Masters[5].Group)
	for gi, g := range rb.Groups {
		require.Equal(t, []string{"a", "b"}[gi], g.Name)
		require.Equal(t, 2, g.Quorum.Needed)
		require.True(t, g.Quorum.Available)
		require.Equal(t, int64(len(byGroup[gi])), g.Ops["acquire"], "acquires d1 sent to group %s", g.Name)
	}
	m := metricsText(t, d1)
	require.Contains(t, m, `redlock_group_quorum_available{group="a"} 1`)
	require.Contains(t, m, `redlock_group_quorum_needed{group="b"} 2`)
	require.Contains(t, m, `redlock_group_quorum_writable{group="b"} 3`)
	require.Contains(t, m, fmt.Sprintf(`redlock_group_operations_total{group="b",operation="acquire"} %d`, len(byGroup[1])))
	require.Contains(t, m, "redlock_quorum_available 1")

	// Group a loses its quorum.
	require.NoError(t, srvs[0].Kill())
	require.NoError(t, srvs[1].Kill())
	require.Eventually(t, func() bool {
		code, rb := readyGroups(t, d2)
		return code == http.StatusOK && rb.Status == "partial" && !rb.Groups[0].Quorum.Available && rb.Groups[1].Quorum.Available
	}, 10*time.Second, 20*time.Millisecond, "d2's /readyz: partial, a without a quorum, b with one")
	require.Eventually(t, func() bool {
		return strings.Contains(metricsText(t, d2), `redlock_group_quorum_available{group="a"} 0`)
	}, 10*time.Second, 20*time.Millisecond)
	m = metricsText(t, d2)
	require.Contains(t, m, `redlock_group_quorum_available{group="b"} 1`)
	require.Contains(t, m, `redlock_group_masters{group="a",state="down"} 2`)
	require.Contains(t, m, "redlock_quorum_available 0")

	for _, key := range byGroup[1] {
		code, env, _ := post(t, lockURL(d2), keyA, fmt.Sprintf(`{"key":%q,"action":"release","token":%q}`, key, tokens[key]))
		require.Equal(t, http.StatusOK, code, env.Msg)
		require.Equal(t, true, env.Data["released"], key)
		code, env, _ = post(t, lockURL(d2), keyA, fmt.Sprintf(`{"key":%q,"ttl":5}`, key))
		require.Equal(t, http.StatusOK, code, "group b's %s while a has no quorum: %s", key, env.Msg)
		require.Equal(t, true, env.Data["acquired"], key)
	}
	fresh := ""
	for i := 0; fresh == ""; i++ {
		if k := fmt.Sprintf("fresh:%d", i); place.Group(lockRedisKey(prefix, "acme", k)) == 0 {
			fresh = k
		}
	}
	code, env, hdr := post(t, lockURL(d1), keyA, fmt.Sprintf(`{"key":%q,"ttl":5}`, fresh))
	require.Equal(t, http.StatusServiceUnavailable, code, "group a's %s: %s", fresh, env.Msg)
	require.Equal(t, "quorum_unavailable", env.Code)
	require.Contains(t, env.Msg, "master group a: ")
	require.NotEmpty(t, hdr.Get("Retry-After"))
	code, env, _ = post(t, lockURL(d1), keyA, fmt.Sprintf(`{"key":%q,"action":"status"}`, byGroup[0][0]))
	require.Equal(t, http.StatusServiceUnavailable, code, "group a's key: %s", env.Msg)
	require.Contains(t, env.Msg, "master group a: ")
}
