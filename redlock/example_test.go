package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The five masters' addresses; the tests start real redis-server processes.
func exampleMasters() []*redis.Options { return masterOptions() }

func ExampleClient_Acquire() {
	c, err := New(exampleMasters()) // five independent masters: quorum 3
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()

	lock, err := c.Acquire(ctx, "example:job:daily_report", 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("held:", lock.Validity() > 29*time.Second, "fenced:", lock.Fence() > 0)

	// A second owner is told who holds it and for how long.
	_, err = c.Acquire(ctx, "example:job:daily_report", 30*time.Second)
	var oe *OutcomeError
	fmt.Println(errors.Is(err, ErrLockHeld), errors.As(err, &oe) && oe.RetryAfter > 29*time.Second)

	// Pass the fence to the resource with every write, finish the work
	// within lock.Validity(), then release.
	fmt.Println(lock.Release(ctx))
	// Output:
	// held: true fenced: true
	// true true
	// <nil>
}

func ExampleClient_Acquire_wait() {
	c, err := New(exampleMasters())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()

	first, _ := c.Acquire(ctx, "example:stock:sku_1001", time.Second)
	// Retry with jittered backoff for up to 3s; the first lock expires after 1s.
	second, err := c.Acquire(ctx, "example:stock:sku_1001", time.Second, WithWait(3*time.Second))
	fmt.Println(err == nil, second.Fence() > first.Fence())
	// Output: true true
}
