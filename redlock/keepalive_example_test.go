package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

func ExampleLock_KeepAlive() {
	c, err := New(exampleMasters())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	lock, err := c.Acquire(ctx, "example:job:export", 2*time.Second)
	if err != nil {
		panic(err)
	}
	lock.KeepAlive(ctx) // extends at about ttl/3 until released, lost or ctx ends
	select {
	case <-lock.Done(): // stop the work: the lock was lost
		fmt.Println("lost:", lock.Err())
	case <-time.After(3 * time.Second): // the work, longer than the TTL
		fmt.Println("held past its TTL:", lock.Err() == nil)
	}
	if err := lock.Release(ctx); err != nil {
		panic(err)
	}
	<-lock.Done()
	fmt.Println("released:", errors.Is(lock.Err(), ErrReleased))
	// Output:
	// held past its TTL: true
	// released: true
}
