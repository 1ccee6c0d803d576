package redlock

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// listAll pages through List with count, checking each page's bound, and
// returns every listed lock and the number of pages.
func listAll(t *testing.T, c *Client, prefix string, count int) ([]ListedLock, int) {
	t.Helper()
	var all []ListedLock
	cursor, pages := "", 0
	for {
		p, err := c.List(context.Background(), prefix, cursor, count)
		require.NoError(t, err)
		pages++
		require.LessOrEqual(t, len(p.Locks), count, "page %d", pages)
		all = append(all, p.Locks...)
		if p.Cursor == "" {
			return all, pages
		}
		cursor = p.Cursor
		require.Less(t, pages, 10000, "the listing must end")
	}
}

// acquireMany acquires n locks named prefix+i and returns their fences by
// key, once every master has run every SET (settle): Acquire answers at
// quorum, and a SET landing on a master after a listing scanned it changes
// the lock's holders during the listing, which List does not promise to
// list.
func acquireMany(t *testing.T, c *Client, prefix string, n int, ttl time.Duration) map[string]int64 {
	t.Helper()
	out := make(map[string]int64, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			k := fmt.Sprintf("%s%d", prefix, i)
			l, err := c.Acquire(context.Background(), k, ttl)
			if !assert.NoError(t, err, k) {
				return
			}
			mu.Lock()
			out[k] = l.Fence()
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Len(t, out, n)
	settle(t, c, slices.Collect(maps.Keys(out))...)
	return out
}

// TestList: many locks over many pages, each listed once with its fence
// and validity, pages never above count; locks of another prefix, keys
// held on too few masters, released locks and the Client's own keys never
// listed.
func TestList(t *testing.T) {
	c := newClient(t)
	rdbs := direct(t)
	ctx := context.Background()
	base := newKey(t) + ":"
	want := acquireMany(t, c, base+"a:", 300, time.Minute)
	acquireMany(t, c, base+"b:", 20, time.Minute) // another prefix
	// Held on two masters only (an acquire that failed, leftovers): not held.
	for _, r := range rdbs[:2] {
		require.NoError(t, r.Set(ctx, base+"a:minority", "0123456789abcdef0123456789abcdef", time.Minute).Err())
	}
	// Released: not held.
	gone, err := c.Acquire(ctx, base+"a:released", time.Minute)
	require.NoError(t, err)
	require.NoError(t, gone.Release(ctx))

	for _, count := range []int{1, 37, MaxListCount} {
		t.Run(fmt.Sprint(count), func(t *testing.T) {
			all, pages := listAll(t, c, base+"a:", count)
			got := map[string]ListedLock{}
			for _, l := range all {
				_, dup := got[l.Key]
				require.False(t, dup, "listed twice: %s", l.Key)
				got[l.Key] = l
			}
			assert.Len(t, got, len(want), "pages: %d", pages)
			for k, fence := range want {
				l, ok := got[k]
				if assert.True(t, ok, "missing: %s", k) {
					assert.Equal(t, fence, l.Fence, k)
					assert.Greater(t, l.Validity, 50*time.Second, k)
					assert.LessOrEqual(t, l.Validity, time.Minute, k)
				}
			}
			assert.GreaterOrEqual(t, pages, len(want)/count, "count bounds every page")
		})
	}
}

// TestListPrefixIsLiteral: glob characters in the prefix match only
// themselves, and the Client's own keys are never listed even when the
// prefix covers them.
func TestListPrefixIsLiteral(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	base := newKey(t)
	all := []string{base + "x*y", base + "x[a]", base + "xz", base + `x\`}
	for _, k := range all {
		_, err := c.Acquire(ctx, k, time.Minute)
		require.NoError(t, err)
	}
	settle(t, c, all...) // see acquireMany
	keys := func(prefix string) []string {
		all, _ := listAll(t, c, prefix, 50)
		var out []string
		for _, l := range all {
			out = append(out, l.Key)
		}
		return out
	}
	assert.Equal(t, []string{base + "x*y"}, keys(base+"x*"))
	assert.Equal(t, []string{base + "x[a]"}, keys(base+"x["))
	assert.Equal(t, []string{base + `x\`}, keys(base+`x\`))
	assert.Len(t, keys(base+"x"), 4)

	// The marker, horizon, fencing counter and fence records share "redlock:"
	// (the default fence key) or the test's marker key: never listed.
	for _, l := range func() []ListedLock { all, _ := listAll(t, c, "redlock:", MaxListCount); return all }() {
		assert.False(t, c.reservedKey(l.Key), l.Key)
	}
	for _, l := range func() []ListedLock { all, _ := listAll(t, c, c.opts.markerKey, MaxListCount); return all }() {
		assert.False(t, c.reservedKey(l.Key), l.Key)
	}
}

// TestListExpired: locks whose TTL ran out are not listed.
func TestListExpired(t *testing.T) {
	c := newClient(t)
	rdbs := direct(t)
	base := newKey(t) + ":"
	keep := acquireMany(t, c, base+"keep:", 5, time.Minute)
	short := acquireMany(t, c, base+"short:", 5, 300*time.Millisecond)
	require.Eventually(t, func() bool {
		for k := range short {
			for _, r := range rdbs {
				if r.Exists(context.Background(), k).Val() != 0 {
					return false
				}
			}
		}
		return true
	}, 2*time.Second, 10*time.Millisecond)
	all, _ := listAll(t, c, base, 10)
	var got []string
	for _, l := range all {
		got = append(got, l.Key)
	}
	assert.ElementsMatch(t, keysOf(keep), got)
}

func keysOf(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestListMasterDown: with a master down from the start the listing scans
// a quorum of the others and misses nothing; a scanned master that goes
// down during the listing makes the next page fail with
// ErrQuorumUnavailable rather than end early.
func TestListMasterDown(t *testing.T) {
	for _, down := range []int{0, 2, 4} {
		t.Run(fmt.Sprint(down), func(t *testing.T) {
			withMasters(t, "kill", down)
			c := newClient(t)
			base := newKey(t) + ":"
			want := acquireMany(t, c, base, 60, time.Minute)
			all, _ := listAll(t, c, base, 25)
			got := map[string]int64{}
			for _, l := range all {
				_, dup := got[l.Key]
				require.False(t, dup, l.Key)
				got[l.Key] = l.Fence
			}
			assert.Equal(t, want, got)
		})
	}
	t.Run("during", func(t *testing.T) {
		c := newClient(t)
		base := newKey(t) + ":"
		acquireMany(t, c, base, 30, time.Minute)
		p, err := c.List(context.Background(), base, "", 10)
		require.NoError(t, err)
		require.NotEmpty(t, p.Cursor)
		withMasters(t, "kill", 0) // the first scanned master
		_, err = c.List(context.Background(), base, p.Cursor, 10)
		require.ErrorIs(t, err, ErrQuorumUnavailable)
		// Once it is marked down, the error says so, not "quarantined"
		// (which says a master answered and was not counted).
		require.Eventually(t, func() bool { return c.Masters()[0].State == MasterDown }, 10*time.Second, 20*time.Millisecond)
		_, err = c.List(context.Background(), base, p.Cursor, 10)
		require.ErrorIs(t, err, ErrMasterDown)
		require.NotErrorIs(t, err, ErrMasterQuarantined)
	})
}

// TestListBadArguments: a count out of range or a cursor that is not this
// listing's is ErrInvalid, naming the argument.
func TestListBadArguments(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	for _, n := range []int{0, -1, MaxListCount + 1} {
		_, err := c.List(ctx, "p:", "", n)
		require.ErrorIs(t, err, ErrInvalid)
		assert.Contains(t, err.Error(), "count:")
	}
	good := (&listCursor{masters: []int{0, 1, 2}, pos: 1, scan: 7, prefix: prefixSum("p:")}).encode()
	_, err := c.List(ctx, "p:", good, 10)
	require.NoError(t, err)
	for _, cur := range []string{
		"x", "!!!", strings.Repeat("A", 300),
		good + "A",
		(&listCursor{masters: []int{0, 1, 2}, prefix: prefixSum("other:")}).encode(),
		(&listCursor{masters: []int{0, 1}, prefix: prefixSum("p:")}).encode(),
		(&listCursor{masters: []int{0, 1, 1}, prefix: prefixSum("p:")}).encode(),
		(&listCursor{masters: []int{0, 1, 5}, prefix: prefixSum("p:")}).encode(),
		(&listCursor{masters: []int{0, 1, 2}, pos: 3, prefix: prefixSum("p:")}).encode(),
		(&listCursor{masters: []int{0, 1, 2}, skip: 3, prefix: prefixSum("p:")}).encode(),
	} {
		_, err := c.List(ctx, "p:", cur, 10)
		require.ErrorIs(t, err, ErrInvalid, cur)
		assert.Contains(t, err.Error(), "cursor:", cur)
	}
}

// TestListEveryQuorum: a lock held on exactly one quorum of masters, for
// every quorum of the five, is listed exactly once: from the first scanned
// master that holds it. Negative controls: a listing that scanned one
// master would miss the quorums without it; one that did not leave out
// what an earlier scanned master holds would list most of them twice.
func TestListEveryQuorum(t *testing.T) {
	c := newClient(t)
	rdbs := direct(t)
	ctx := context.Background()
	base := newKey(t) + ":"
	want := map[string]bool{}
	for mask := range 1 << 5 {
		on := bits(mask)
		if len(on) != c.Quorum() {
			continue
		}
		k := fmt.Sprintf("%s%v", base, on)
		want[k] = true
		for _, i := range on {
			require.NoError(t, rdbs[i].Set(ctx, k, fmt.Sprintf("%032x", mask), time.Minute).Err())
		}
	}
	require.Len(t, want, 10)
	for _, count := range []int{1, 3, 10} {
		all, _ := listAll(t, c, base, count)
		got := map[string]bool{}
		for _, l := range all {
			require.False(t, got[l.Key], "count %d: listed twice: %s", count, l.Key)
			got[l.Key] = true
			assert.Zero(t, l.Fence, "planted without a fence record")
		}
		assert.Equal(t, want, got, "count %d", count)
	}
}
