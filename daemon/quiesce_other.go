//go:build !linux

package daemon

import (
	"net"
	"time"
)

// quiesce does nothing outside Linux: closing the listener may reset the
// connections still in its accept queue.
func quiesce(net.Listener, time.Duration) {}
