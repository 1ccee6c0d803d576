package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The vote scripts answer with one string (vote_prelude.lua); the marker
// and a quorum script's extra may hold any bytes. Found by a review: with
// string.format's %s they were cut at a NUL byte, and every vote of a
// deployment whose marker nonce held one (a TokenGenerator of raw bytes)
// was refused as an unexpected reply.

// quorumExtra answers with ARGV[1] as its extra, whatever its bytes.
var quorumExtra = NewQuorumScript("if not intact then return reply(-2, 0) end\nreturn reply(1, 7, ARGV[1])")

func TestVoteReplyIsBinarySafe(t *testing.T) {
	ctx := context.Background()
	t.Run("a marker with a NUL byte and spaces", func(t *testing.T) {
		marker := fmt.Sprintf("marker:%s:%d", t.Name(), keySeq.Add(1))
		v := fmt.Sprintf("redlockd %d ab\x00cd ef\ngh", time.Now().UnixMilli())
		for _, r := range direct(t) {
			require.NoError(t, r.Set(ctx, marker+":horizon", "0", 0).Err())
			require.NoError(t, r.SetNX(ctx, "redlock:fence", "0", 0).Err())
			require.NoError(t, r.Set(ctx, marker, v, 0).Err())
		}
		c, err := New(masterOptions(), WithPerMasterTimeout(500*time.Millisecond), WithMarkerKey(marker))
		require.NoError(t, err)
		defer c.Close()
		l, err := c.Acquire(ctx, newKey(t), 5*time.Second)
		require.NoError(t, err, "every master's vote counts")
		require.NoError(t, l.Release(ctx))
	})
	t.Run("a quorum script's extra with NUL bytes, spaces and newlines", func(t *testing.T) {
		c := newClient(t)
		extra := "a\x00b c\nd  \x00"
		answers := 0
		err := c.RunQuorumScript(ctx, quorumExtra, newKey(t), []any{extra}, func(a MasterAnswer) bool {
			require.NoError(t, a.Err)
			assert.Equal(t, int64(1), a.Code)
			assert.Equal(t, int64(7), a.Value)
			assert.Equal(t, extra, a.Extra, "master %d: the extra, every byte", a.Index)
			answers++
			return false
		})
		require.NoError(t, err)
		assert.Equal(t, len(c.masters), answers)
	})
}

func TestParseVote(t *testing.T) {
	v, ok := parseVote("1 -5 1764770000 250 10 20 -1 0 ")
	require.True(t, ok)
	assert.Equal(t, voteReply{code: 1, value: -5, time: time.Unix(1764770000, 250_000), horizon: 10, raised: 20, counter: -1}, v, "an empty marker and extra")
	v, ok = parseVote("0 3 1764770000 0 1 2 3 4 m  xa b\n")
	require.True(t, ok)
	assert.Equal(t, "m  x", v.marker, "the marker is its length in bytes, spaces and all")
	assert.Equal(t, "a b\n", v.extra, "extra is the rest")
	for _, bad := range []any{
		"1 2 3 4 5 6 7 9 short", // marker longer than what is left
		"1 2 3 4 5 6 7 -1 x",    // negative length
		"1 2 0 4 5 6 7 0 ",      // no clock
		"1 2 3 4 5 6 7",         // fields missing
		"1 x 3 4 5 6 7 0 ",      // not a number
		[]any{int64(1), int64(2)},
		int64(1),
	} {
		_, ok := parseVote(bad)
		assert.False(t, ok, "%q", bad)
	}
}

func TestParseFenceReply(t *testing.T) {
	code, at := parseFenceReply("1 1764770000 250")
	assert.Equal(t, int64(1), code)
	assert.Equal(t, time.Unix(1764770000, 250_000), at)
	code, _ = parseFenceReply("-2 1764770000 0")
	assert.Equal(t, codeLost, code)
	for _, bad := range []any{"1 1764770000 250 ", "1 1764770000", "1 x 250", "", []any{int64(1)}} {
		code, _ := parseFenceReply(bad)
		assert.Zero(t, code, "%q", bad)
	}
}
