package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/config"
	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/redlockd/redlockd/redlock"
)

// TestMultiKeyAcrossGroupsOverHTTP: a daemon over two master groups takes
// a set whose keys live on both groups all or none: with a key of group b
// held through the other daemon, the set is refused and leaves nothing on
// group a; once free, it is granted with one token, each key on its own
// group's masters, held for the other daemon, and released by that token
// through the other daemon.
func TestMultiKeyAcrossGroupsOverHTTP(t *testing.T) {
	srvs, err := redisproc.StartN(6, redisproc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = redisproc.StopAll(srvs) })
	prefix := fmt.Sprintf("gmk%d:", prefixSeq.Add(1))
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
	var onA, onB string
	for i := 0; onA == "" || onB == ""; i++ {
		k := fmt.Sprintf("account:%d", i)
		if place.Group(lockRedisKey(prefix, "acme", k)) == 0 {
			onA = k
		} else {
			onB = k
		}
	}
	ra := redis.NewClient(&redis.Options{Addr: srvs[0].Addr()})
	defer ra.Close()
	ctx := context.Background()

	code, env, _ := post(t, lockURL(d2), keyA, fmt.Sprintf(`{"key":%q,"ttl":30}`, onB))
	require.Equal(t, http.StatusOK, code, env.Msg)
	require.Equal(t, true, env.Data["acquired"])
	heldB := env.Data["token"].(string)
	set := fmt.Sprintf(`[%q,%q]`, onA, onB)
	code, env, _ = post(t, lockURL(d1), keyA, `{"keys":`+set+`,"ttl":30}`)
	require.Equal(t, http.StatusOK, code, env.Msg)
	require.Equal(t, false, env.Data["acquired"], "a key of the set is held on group b")
	assert.Zero(t, ra.Exists(ctx, lockRedisKey(prefix, "acme", onA)).Val(), "nothing left on group a")
	code, env, _ = post(t, lockURL(d2), keyA, fmt.Sprintf(`{"action":"release","key":%q,"token":%q}`, onB, heldB))
	require.Equal(t, http.StatusOK, code, env.Msg)

	code, env, _ = post(t, lockURL(d1), keyA, `{"keys":`+set+`,"ttl":30}`)
	require.Equal(t, http.StatusOK, code, env.Msg)
	require.Equal(t, true, env.Data["acquired"], env.Msg)
	tok := env.Data["token"].(string)
	assert.Equal(t, int64(1), ra.Exists(ctx, lockRedisKey(prefix, "acme", onA)).Val(), "the key of group a on group a's masters")
	for _, k := range []string{onA, onB} {
		code, env, _ = post(t, lockURL(d2), keyA, fmt.Sprintf(`{"key":%q,"ttl":30}`, k))
		require.Equal(t, http.StatusOK, code, env.Msg)
		assert.Equal(t, false, env.Data["acquired"], "%s is held for the other daemon", k)
	}
	code, env, _ = post(t, lockURL(d2), keyA, `{"action":"status","keys":`+set+`}`)
	require.Equal(t, http.StatusOK, code, env.Msg)
	assert.Equal(t, true, env.Data["held"])
	code, env, _ = post(t, lockURL(d2), keyA, `{"action":"release","keys":`+set+`,"token":"`+tok+`"}`)
	require.Equal(t, http.StatusOK, code, env.Msg)
	assert.Equal(t, true, env.Data["released"], env.Msg)
	code, env, _ = post(t, lockURL(d2), keyA, `{"keys":`+set+`,"ttl":30}`)
	require.Equal(t, http.StatusOK, code, env.Msg)
	assert.Equal(t, true, env.Data["acquired"], "free again after the release")
}
