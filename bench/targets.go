package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/redlock"
	"github.com/valyala/fasthttp"
)

// target is one way of taking and giving back a lock. acquire returns the
// function that releases what it took.
type target struct {
	name    string
	acquire func(ctx context.Context, key string) (release func(context.Context) error, err error)
}

// libTarget: redlockd's library in-process.
func libTarget(c *redlock.Client, ttl time.Duration) target {
	return target{name: "lib", acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
		l, err := c.Acquire(ctx, key, ttl)
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}}
}

// httpTarget: the daemon over keep-alive HTTP, POST /v1/lock, through the
// bench's HTTP client (httpclient.go).
func httpTarget(name string, client lockPoster, ttl time.Duration) target {
	ttlS := strconv.FormatInt(int64(ttl/time.Second), 10)
	call := func(ctx context.Context, body string) (*lockResponse, error) {
		var lr *lockResponse
		err := client.post(ctx, body, func(status int, b []byte) error {
			var err error
			if lr, err = scanLockResponse(b); err != nil {
				return fmt.Errorf("http %d: %w", status, err)
			}
			if status != http.StatusOK || lr.Ret != "ok" {
				return fmt.Errorf("http %d %s", status, lr.Code)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		return lr, nil
	}
	return target{name: name, acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
		lr, err := call(ctx, `{"key":"`+key+`","action":"acquire","ttl":`+ttlS+`}`)
		if err != nil {
			return nil, err
		}
		if !lr.Data.Acquired {
			return nil, errNotAcquired
		}
		body := `{"key":"` + key + `","action":"release","token":"` + lr.Data.Token + `"}`
		return func(ctx context.Context) error {
			lr, err := call(ctx, body)
			if err != nil {
				return err
			}
			if !lr.Data.Released {
				return errors.New("http 200 released:false")
			}
			return nil
		}, nil
	}}
}

// scanLockResponse reads the fields the bench needs from a success answer
// without decoding the whole document ("ret":"ok" and the acquired,
// released and token fields, which the daemon writes without spaces); any
// other answer is decoded in full, for its error code.
func scanLockResponse(b []byte) (*lockResponse, error) {
	lr := &lockResponse{}
	if !bytes.Contains(b, []byte(`"ret":"ok"`)) {
		if err := json.Unmarshal(b, lr); err != nil {
			return nil, fmt.Errorf("bad JSON: %w", err)
		}
		return lr, nil
	}
	lr.Ret = "ok"
	lr.Data.Acquired = bytes.Contains(b, []byte(`"acquired":true`))
	lr.Data.Released = bytes.Contains(b, []byte(`"released":true`))
	if _, rest, ok := bytes.Cut(b, []byte(`"token":"`)); ok {
		if end := bytes.IndexByte(rest, '"'); end >= 0 {
			lr.Data.Token = string(rest[:end])
		}
	}
	return lr, nil
}

type lockResponse struct {
	Ret  string `json:"ret"`
	Code string `json:"code"`
	Data struct {
		Acquired bool   `json:"acquired"`
		Released bool   `json:"released"`
		Token    string `json:"token"`
	} `json:"data"`
}

// redsyncTarget: go-redsync v4, one Mutex per acquire, Tries 1, otherwise
// its defaults, over go-redis clients with their defaults.
func redsyncTarget(rdbs []*redis.Client, ttl time.Duration) target {
	pools := make([]rsredis.Pool, len(rdbs))
	for i, r := range rdbs {
		pools[i] = goredis.NewPool(r)
	}
	rs := redsync.New(pools...)
	return target{name: "redsync", acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
		m := rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			ok, err := m.UnlockContext(ctx)
			if !ok && err == nil {
				err = errors.New("redsync: unlock reported not released")
			}
			return err
		}, nil
	}}
}

// floorTarget: one master, SET key token NX PX ttl and a Lua
// compare-and-delete; the cost of a single-Redis lock, the floor under any
// quorum lock.
func floorTarget(rdb *redis.Client, ttl time.Duration) target {
	del := redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	px := ttl.Milliseconds()
	return target{name: "floor", acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		token := hex.EncodeToString(b[:])
		if err := rdb.Do(ctx, "SET", key, token, "NX", "PX", px).Err(); err != nil {
			if errors.Is(err, redis.Nil) {
				return nil, errors.New("floor: key held")
			}
			return nil, err
		}
		return func(ctx context.Context) error {
			n, err := del.Run(ctx, rdb, []string{key}, token).Int64()
			if err == nil && n != 1 {
				err = errors.New("floor: token no longer held")
			}
			return err
		}, nil
	}}
}

var addrRE = regexp.MustCompile(`127\.0\.0\.1:[0-9]+|node [0-9]+`)

// errClass turns an error into a short label for counting.
func errClass(err error) string {
	var taken *redsync.ErrTaken
	switch {
	case errors.Is(err, redlock.ErrLockHeld):
		return "lock held"
	case errors.Is(err, redlock.ErrQuorumUnavailable):
		return "quorum unavailable"
	case errors.Is(err, redlock.ErrNotHeld):
		return "not held"
	case errors.As(err, &taken):
		return "redsync: taken"
	case errors.Is(err, fasthttp.ErrConnectionClosed):
		return "EOF" // net/http's word for the same
	}
	msg := err.Error()
	for _, s := range []string{"i/o timeout", "context deadline exceeded", "context canceled", "connection refused", "connection reset", "pool timeout", "EOF"} {
		if strings.Contains(msg, s) {
			return s
		}
	}
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	msg = addrRE.ReplaceAllString(msg, "<master>") // one class for every master
	if len(msg) > 80 {
		msg = msg[:80]
	}
	return msg
}
