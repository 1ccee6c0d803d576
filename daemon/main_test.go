package daemon

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// testMainSetup runs before the package's tests, in order; each returns the
// teardown to run after them (in reverse order, before the goroutine-leak
// check). Other test files add to it from init, e.g. e2e_test.go starting
// the Redis masters:
//
//	func init() { testMainSetup = append(testMainSetup, startMasters) }
var testMainSetup []func() (teardown func(), err error)

// withSetup runs the tests between the setups and their teardowns, so that
// goleak sees the state after everything was stopped.
type withSetup struct{ m *testing.M }

func (w withSetup) Run() int {
	var teardowns []func()
	defer func() {
		for i := len(teardowns) - 1; i >= 0; i-- {
			teardowns[i]()
		}
	}()
	for _, setup := range testMainSetup {
		td, err := setup()
		if err != nil {
			fmt.Fprintln(os.Stderr, "TestMain setup:", err)
			return 1
		}
		if td != nil {
			teardowns = append(teardowns, td)
		}
	}
	return w.m.Run()
}

func TestMain(m *testing.M) {
	// go-redis retries a failed dial from a goroutine that sleeps 1 s
	// between attempts and ends at its next wake-up once the client is
	// closed: a test that kills a master can end while it sleeps.
	goleak.VerifyTestMain(withSetup{m}, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
