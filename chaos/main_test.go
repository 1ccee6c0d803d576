package chaos

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // dial failures to killed masters are the point here
	code := m.Run()
	if code == 0 {
		// go-redis re-dials a down master from a goroutine that sleeps 1s
		// between tries and notices a closed pool only when it wakes.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
