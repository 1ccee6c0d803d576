package main

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/config"
	"github.com/redlockd/redlockd/internal/redisproc"
)

// TestDaemonsOnOtherMastersDoNotBothGrant: two daemons of one deployment
// (one key prefix) listing other masters, three of five against all five
// (a rolling restart that adds masters, or replaces one), are two layouts
// for the gate: the one that registered first grants, the other refuses
// (503, naming the other masters) while the first one's registration and
// the max TTL run. Before, the registry compared group names only, and
// both were the one layout "default": a black-box pass got both daemons
// to grant one key at once with the same fence in 20–34 pairs of 500 (a
// quorum of three of five needs only one of the three). Both orders.
func TestDaemonsOnOtherMastersDoNotBothGrant(t *testing.T) {
	for _, firstFive := range []bool{true, false} {
		t.Run(fmt.Sprintf("five masters first: %v", firstFive), func(t *testing.T) {
			srvs, err := redisproc.StartN(5, redisproc.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = redisproc.StopAll(srvs) })
			var five []string
			for _, s := range srvs {
				five = append(five, s.Addr())
			}
			three := five[:3]
			prefix := fmt.Sprintf("ml%d:", prefixSeq.Add(1))
			common := func(c *config.Config) { c.KeyPrefix, c.MaxTTL, c.DefaultTTL = prefix, 30, 10 }
			first, second := five, three
			if !firstFive {
				first, second = three, five
			}
			dFirst := daemonURL(t, common, func(c *config.Config) { c.Masters = first })
			code, env, _ := post(t, lockURL(dFirst), keyA, `{"key":"shared","ttl":30}`)
			require.Equal(t, http.StatusOK, code, env.Msg)
			require.Equal(t, true, env.Data["acquired"], env.Msg)

			dSecond := daemonURL(t, common, func(c *config.Config) { c.Masters = second })
			for _, key := range []string{"shared", "other"} {
				code, env, _ = post(t, lockURL(dSecond), keyA, fmt.Sprintf(`{"key":%q,"ttl":30}`, key))
				assert.Equal(t, http.StatusServiceUnavailable, code, "%s: %s", key, env.Msg)
				assert.Contains(t, env.Msg, "on other masters", key)
			}
			// The first daemon keeps granting.
			code, env, _ = post(t, lockURL(dFirst), keyA, `{"key":"other","ttl":30}`)
			require.Equal(t, http.StatusOK, code, env.Msg)
			assert.Equal(t, true, env.Data["acquired"], env.Msg)
		})
	}
}
