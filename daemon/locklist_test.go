package daemon

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// adminServer starts a daemon over d with an admin listener and returns it
// with the admin listener's URL.
func (d *deployment) adminServer(t *testing.T, opts ...func(*Options)) (*testServer, string) {
	t.Helper()
	ts := newTestServer(t, d.locker(t), append([]func(*Options){func(o *Options) {
		o.KeyPrefix = d.prefix
		o.AdminListen = "127.0.0.1:0"
	}}, opts...)...)
	return ts, adminURL(t, ts)
}

// acquireAll acquires every key (namespace, key) for the API key and
// returns the fences by namespace+"/"+key, once every running master holds
// every one of them: an acquire answers at quorum, and a SET landing on a
// master after a listing scanned it changes the lock's holders during the
// listing, which the listing does not promise to list.
func (d *deployment) acquireAll(t *testing.T, ts *testServer, apiKey string, ttl int, locks [][2]string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, l := range locks {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			body := fmt.Sprintf(`{"action":"acquire","namespace":%q,"key":%q,"ttl":%d}`, l[0], l[1], ttl)
			d := okData(t, ts.lock(t, apiKey, body))
			if assert.Equal(t, true, d["acquired"], body) {
				mu.Lock()
				out[l[0]+"/"+l[1]] = num(t, d, "fence")
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, out, len(locks))
	account := map[string]string{testKeyAcme: "acme", testKeyGlobex: "globex"}[apiKey]
	require.NotEmpty(t, account)
	keys := make([]string, len(locks))
	for i, l := range locks {
		keys[i] = redisKey(d.prefix, account, l[0], l[1])
	}
	d.waitPTTLAbove(t, 0, keys...)
	return out
}

func keyList(ns string, n int, format string) [][2]string {
	out := make([][2]string, n)
	for i := range out {
		out[i] = [2]string{ns, fmt.Sprintf(format, i)}
	}
	return out
}

// listPages pages through GET /admin/locks with query (cursor added) and
// returns the fences by namespace/key, failing on a duplicate or a page
// above limit.
func listPages(t *testing.T, ts *testServer, admin string, query url.Values, limit int) (map[string]int64, []listedLock) {
	t.Helper()
	got := map[string]int64{}
	var all []listedLock
	query.Set("limit", fmt.Sprint(limit))
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000)
		st, body, _ := ts.raw(t, http.MethodGet, admin+"/admin/locks?"+query.Encode(), nil)
		require.Equal(t, http.StatusOK, st, body)
		var page lockList
		require.NoError(t, json.Unmarshal([]byte(body), &page), body)
		require.LessOrEqual(t, len(page.Locks), limit, "page %d", pages)
		require.Equal(t, query.Get("account"), page.Account)
		for _, l := range page.Locks {
			k := l.Namespace + "/" + l.Key
			if l.Slot != nil {
				k += fmt.Sprintf(" slot %d", *l.Slot)
			}
			_, dup := got[k]
			require.False(t, dup, "listed twice: %s", k)
			got[k] = l.Fence
			all = append(all, l)
		}
		if page.NextCursor == "" {
			return got, all
		}
		query.Set("cursor", page.NextCursor)
	}
}

// TestLockList: locks of two namespaces over many pages, each listed once
// with its namespace, key, TTL and fence; another account's never; a
// namespace filter; the public listener does not serve it.
func TestLockList(t *testing.T) {
	d := newDeployment(t)
	ts, admin := d.adminServer(t)
	locks := append(keyList("", 90, "order:pay:%d"), keyList("shop", 40, "stock:sku_%d")...)
	locks = append(locks, [2]string{"a", "b:c"}, [2]string{"a:b", "c"}) // injective encoding
	want := d.acquireAll(t, ts, testKeyAcme, 60, locks)
	// Another account, with keys and namespaces that are acme's too.
	d.acquireAll(t, ts, testKeyGlobex, 60, append(keyList("", 20, "order:pay:%d"), keyList("shop", 5, "stock:sku_%d")...))

	got, all := listPages(t, ts, admin, url.Values{"account": {"acme"}}, 37)
	assert.Equal(t, want, got)
	for _, l := range all {
		assert.True(t, l.TTL >= 50 && l.TTL <= 60, "ttl %d", l.TTL)
		assert.Greater(t, l.ValidityMS, int64(50000))
		assert.LessOrEqual(t, l.ExpireAt, time.Now().Add(60*time.Second).Unix())
	}

	shop, _ := listPages(t, ts, admin, url.Values{"account": {"acme"}, "namespace": {"shop"}}, 100)
	assert.Len(t, shop, 40)
	for k := range shop {
		assert.Equal(t, want[k], shop[k], k)
	}
	def, _ := listPages(t, ts, admin, url.Values{"account": {"acme"}, "namespace": {""}}, MaxListLimit)
	assert.Len(t, def, 90, "namespace= is the default namespace only")
	ab, _ := listPages(t, ts, admin, url.Values{"account": {"acme"}, "namespace": {"a"}}, 10)
	assert.Equal(t, map[string]int64{"a/b:c": want["a/b:c"]}, ab)
	g, _ := listPages(t, ts, admin, url.Values{"account": {"globex"}}, 100)
	assert.Len(t, g, 25)

	st, body, _ := ts.raw(t, http.MethodGet, ts.URL+"/admin/locks?account=acme", nil)
	assert.Equal(t, http.StatusNotFound, st, "never on the public listener: %s", body)
}

// TestLockListExpiredAndReleased: a lock is listed while held, and not
// once it has expired or been released.
func TestLockListExpiredAndReleased(t *testing.T) {
	d := newDeployment(t)
	ts, admin := d.adminServer(t)
	d.acquireAll(t, ts, testKeyAcme, 60, keyList("", 3, "keep:%d"))
	short := d.acquireAll(t, ts, testKeyAcme, 1, keyList("", 3, "short:%d"))
	rel := okData(t, ts.lock(t, testKeyAcme, `{"key":"released","ttl":60}`))
	d.waitPTTLAbove(t, 0, redisKey(d.prefix, "acme", "", "released")) // see acquireAll
	got, _ := listPages(t, ts, admin, url.Values{"account": {"acme"}}, 50)
	assert.Len(t, got, 7)
	r := okData(t, ts.lock(t, testKeyAcme, `{"action":"release","key":"released","token":"`+rel["token"].(string)+`"}`))
	require.Equal(t, true, r["released"])
	require.Eventually(t, func() bool {
		got, _ = listPages(t, ts, admin, url.Values{"account": {"acme"}}, 50)
		return len(got) == 3
	}, 3*time.Second, 50*time.Millisecond, "the 1 s locks expire")
	for k := range short {
		assert.NotContains(t, got, k)
	}
	assert.NotContains(t, got, "/released")
}

// TestLockListMasterDown: with a master down the listing scans a quorum of
// the others and misses nothing.
func TestLockListMasterDown(t *testing.T) {
	d := newDeployment(t)
	d.kill(t, 0)
	ts, admin := d.adminServer(t)
	want := d.acquireAll(t, ts, testKeyAcme, 60, keyList("ns", 50, "k%d"))
	got, _ := listPages(t, ts, admin, url.Values{"account": {"acme"}}, 20)
	assert.Equal(t, want, got)
}

// TestLockListBadParameters: 400 naming the parameter and the limit.
func TestLockListBadParameters(t *testing.T) {
	d := newDeployment(t)
	ts, admin := d.adminServer(t)
	for query, want := range map[string]string{
		"":                                   "account: must not be empty",
		"account=nobody":                     `account: "nobody" is not a configured account`,
		"account=acme&limit=0":               "limit: must be an integer from 1 to 100, got \"0\"",
		"account=acme&limit=101":             "limit: must be an integer from 1 to 100",
		"account=acme&limit=abc":             "limit: must be an integer from 1 to 100",
		"account=acme&limit=":                "limit: must be an integer from 1 to 100",
		"account=acme&cursor=zzz":            "cursor: not a cursor of this listing",
		"account=acme&cursor=%21":            "cursor: not a cursor of this listing: it is not base64url; pass \"\" to start",
		"account=acme&cursor=YWJj":           "cursor: not a cursor of this listing: its contents are not a listing position; pass \"\" to start, then each page's cursor unchanged, with the same prefix",
		"account=acme&namespace=a%01":        "namespace: control character U+0001",
		"account=acme&namespace=" + longNS(): "namespace: 129 bytes is above the maximum of 128 bytes",
		"account=acme&account=globex":        "account: given more than once",
		"account=acme&page=2":                `unknown parameter "page"`,
		// The limit an account name has (MaxAccountBytes), not a looser one.
		"account=" + strings.Repeat("a", MaxAccountBytes+1): "account: 65 bytes is above the maximum of 64 bytes",
	} {
		st, body, _ := ts.raw(t, http.MethodGet, admin+"/admin/locks?"+query, nil)
		assert.Equal(t, http.StatusBadRequest, st, "%s: %s", query, body)
		var env envelope
		require.NoError(t, json.Unmarshal([]byte(body), &env), body)
		assert.True(t, strings.HasPrefix(env.Msg, want), "%s: %q does not start with %q", query, env.Msg, want)
		if assert.NotNil(t, env.Code, query) {
			assert.Equal(t, codeBadRequest, *env.Code, query)
		}
	}
	// A cursor of another account's listing is refused, not followed.
	d.acquireAll(t, ts, testKeyGlobex, 60, keyList("", 5, "k%d"))
	st, body, _ := ts.raw(t, http.MethodGet, admin+"/admin/locks?account=globex&limit=2", nil)
	require.Equal(t, http.StatusOK, st, body)
	var page lockList
	require.NoError(t, json.Unmarshal([]byte(body), &page))
	require.NotEmpty(t, page.NextCursor)
	st, body, _ = ts.raw(t, http.MethodGet, admin+"/admin/locks?account=acme&cursor="+page.NextCursor, nil)
	assert.Equal(t, http.StatusBadRequest, st, body)
	assert.Contains(t, body, "cursor:")
}

func longNS() string {
	b := make([]byte, maxNamespaceBytes+1)
	for i := range b {
		b[i] = 'n'
	}
	return string(b)
}

// TestLockListAdminToken: with admin_token set, the listing needs it.
func TestLockListAdminToken(t *testing.T) {
	const token = "admin-token-0123456789abcdef"
	d := newDeployment(t)
	ts, admin := d.adminServer(t, func(o *Options) { o.AdminToken = token })
	st, body, _ := ts.raw(t, http.MethodGet, admin+"/admin/locks?account=acme", nil)
	assert.Equal(t, http.StatusUnauthorized, st, body)
	st, body, _ = ts.raw(t, http.MethodGet, admin+"/admin/locks?account=acme", map[string]string{"Authorization": "Bearer " + token})
	assert.Equal(t, http.StatusOK, st, body)
	assert.Contains(t, body, `"account":"acme","locks":[]`)
}

// An account removed by a reload keeps its locks until their TTL ends:
// its clients' releases get 401 (the key is gone), and the operator still
// lists its locks, marked removed, until a reload adds it back.
func TestLockListRemovedAccount(t *testing.T) {
	d := newDeployment(t)
	ts, admin := d.adminServer(t)
	want := d.acquireAll(t, ts, testKeyGlobex, 60, keyList("", 3, "g%d"))
	acme := APIKey{Account: "acme", Hash: sha256.Sum256([]byte(testKeyAcme))}
	globex := APIKey{Account: "globex", Hash: sha256.Sum256([]byte(testKeyGlobex))}
	res, err := ts.Server.SetAPIKeys([]APIKey{acme})
	require.NoError(t, err)
	require.Equal(t, []string{"globex"}, res.Removed)

	r := ts.lock(t, testKeyGlobex, `{"action":"release","key":"g0","token":"`+goodToken+`"}`)
	assert.Equal(t, http.StatusUnauthorized, r.Status, r.Raw)
	st, body, _ := ts.raw(t, http.MethodGet, admin+"/admin/locks?account=globex", nil)
	require.Equal(t, http.StatusOK, st, body)
	var page lockList
	require.NoError(t, json.Unmarshal([]byte(body), &page), body)
	assert.True(t, page.Removed, body)
	got, _ := listPages(t, ts, admin, url.Values{"account": {"globex"}}, 100)
	assert.Equal(t, want, got, "the removed account's locks")
	st, body, _ = ts.raw(t, http.MethodGet, admin+"/admin/locks?account=initech", nil)
	assert.Equal(t, http.StatusBadRequest, st, body)
	assert.Contains(t, body, `account: \"initech\" is not a configured account, nor one a reload removed since this daemon started`)

	_, err = ts.Server.SetAPIKeys([]APIKey{acme, globex})
	require.NoError(t, err)
	st, body, _ = ts.raw(t, http.MethodGet, admin+"/admin/locks?account=globex", nil)
	require.Equal(t, http.StatusOK, st, body)
	assert.NotContains(t, body, `"removed"`, "added back")
}

// TestLockListShowsPermits: a semaphore's permits are listed under the
// semaphore's key, each with its slot and fence, beside plain locks and a
// multi-key set's keys; a plain lock named like a slot key is listed as
// the plain lock it is. Found by a helper: permits were never listed
// although they count against max_locks.
func TestLockListShowsPermits(t *testing.T) {
	d := newDeployment(t)
	ts, admin := d.adminServer(t)
	slots := map[int]int64{}
	for range 3 {
		data := okData(t, ts.lock(t, testKeyAcme, `{"action":"acquire","key":"lsem","permits":3,"ttl":60}`))
		require.Equal(t, true, data["acquired"])
		slots[int(num(t, data, "slot"))] = num(t, data, "fence")
	}
	require.Len(t, slots, 3)
	set := okData(t, ts.lock(t, testKeyAcme, `{"action":"acquire","keys":["lset1","lset2"],"ttl":60}`))
	require.Equal(t, true, set["acquired"])
	plain := d.acquireAll(t, ts, testKeyAcme, 60, [][2]string{{"", "plain"}, {"", "a#permit:1"}})

	_, all := listPages(t, ts, admin, url.Values{"account": {"acme"}}, 7)
	gotSlots := map[int]int64{}
	keys := map[string]int64{}
	for _, l := range all {
		if l.Slot != nil {
			assert.Equal(t, "lsem", l.Key)
			gotSlots[*l.Slot] = l.Fence
			continue
		}
		keys[l.Key] = l.Fence
	}
	assert.Equal(t, slots, gotSlots, "every permit, with its slot and fence")
	assert.Equal(t, plain["/plain"], keys["plain"])
	assert.Equal(t, plain["/a#permit:1"], keys["a#permit:1"], "a plain lock named like a slot key")
	assert.Contains(t, keys, "lset1")
	assert.Contains(t, keys, "lset2")
	assert.Len(t, all, 7)
}
