package chaos

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redlockd/redlockd/internal/testmasters"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // dial failures to killed masters are the point here
	os.Exit(testmasters.Run(m, 0, nil))
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
