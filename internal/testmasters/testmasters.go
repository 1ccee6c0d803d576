// Package testmasters is the TestMain shared by the packages whose tests
// run against real redis-server masters: start them, run the tests, stop
// them, and check that no goroutine leaked. Import it from _test.go files
// only.
package testmasters

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/redlockd/redlockd/internal/redisproc"
)

// IgnoreRedial is the goleak option for go-redis's re-dial goroutine: it
// sleeps 1s between dials to a down master and notices a closed pool only
// when it wakes, wherever time.Sleep leaves it on the stack.
var IgnoreRedial = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")

// Run starts n masters into *servers (none when n is 0), runs m, stops the
// masters and, if the tests passed, fails the run on a leaked goroutine.
// It returns the exit code for os.Exit.
func Run(m *testing.M, n int, servers *[]*redisproc.Server) int {
	if n > 0 {
		s, err := redisproc.StartN(n, redisproc.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "these tests need redis-server:", err)
			return 1
		}
		*servers = s
	}
	code := m.Run()
	if n > 0 {
		if err := redisproc.StopAll(*servers); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	if code == 0 {
		if err := goleak.Find(IgnoreRedial); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}
