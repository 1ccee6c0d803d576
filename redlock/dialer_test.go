package redlock

import (
	"context"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLaneDialerNeverOpensTheCircuit: the lanes' dialer (refusedAsConn)
// hands every failed dial — timed out here, as behind a partition — to
// go-redis as a failing connection, so go-redis's dial circuit breaker
// never opens: once the master is reachable again, the first command
// after the redial wait (otherRedial) connects. Found by a review: only
// refused dials were handed over, and a master back from a partition went
// unheard for up to a second. Negative control: the plain dialer, whose
// failures open the breaker after PoolSize of them; the command after the
// partition ends still fails.
func TestLaneDialerNeverOpensTheCircuit(t *testing.T) {
	for _, wrapped := range []bool{true, false} {
		t.Run(map[bool]string{true: "refusedAsConn", false: "negative control: plain dialer"}[wrapped], func(t *testing.T) {
			ctx := context.Background()
			var partitioned atomic.Bool
			partitioned.Store(true)
			var dials atomic.Int64
			dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				if partitioned.Load() {
					return nil, &net.OpError{Op: "dial", Net: network, Err: os.ErrDeadlineExceeded}
				}
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}
			o := &redis.Options{Addr: servers[0].Addr(), MaxRetries: -1, DialerRetries: 1, PoolSize: 2, Protocol: 2, DisableIdentity: true}
			m := &master{}
			if wrapped {
				o.Dialer = refusedAsConn(m, dial, o)
			} else {
				o.Dialer = dial
			}
			rdb := redis.NewClient(o)
			t.Cleanup(func() { rdb.Close() })
			for range 3 { // more failures than PoolSize, each after the redial wait
				err := rdb.Ping(ctx).Err()
				require.Error(t, err)
				assert.True(t, isDialError(err), "a dial error: %v", err)
				time.Sleep(otherRedial + 10*time.Millisecond)
			}
			if wrapped {
				assert.EqualValues(t, 3, dials.Load(), "one dial per command after each wait")
				require.Nil(t, m.recentRefusal(time.Now()), "the wait after the last failure is over")
			}
			partitioned.Store(false)
			err := rdb.Ping(ctx).Err()
			if !wrapped {
				require.Error(t, err, "negative control: the breaker answers with the old failure")
				return
			}
			require.NoError(t, err, "reachable again: the next command connects")
		})
	}
}
