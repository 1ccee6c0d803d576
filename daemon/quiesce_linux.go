package daemon

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// quiesce makes the kernel stop completing new TCP handshakes on ln, then
// waits, up to limit, until the connections it already queued for accept
// have been accepted. Closing a listener resets the connections still in
// its accept queue, and their clients have already sent a request; after
// quiesce, a client that connects meanwhile sees its SYN go unanswered
// and, once the listener is closed, a refused connection: an error that
// says nothing was sent.
//
// A socket filter that drops every packet does the first part (the
// listener is closed right after, so nothing else needs its packets);
// TCP_INFO's unacked field is a listener's accept queue length. Any
// failure leaves ln as it was: then closing it may reset queued
// connections, as it would without quiesce.
func quiesce(ln net.Listener, limit time.Duration) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		drop := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
		ferr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: 1, Filter: &drop[0]})
	}); err != nil || ferr != nil {
		return
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		var queued uint32
		var qerr error
		if err := rc.Control(func(fd uintptr) {
			var info *unix.TCPInfo
			info, qerr = unix.GetsockoptTCPInfo(int(fd), unix.SOL_TCP, unix.TCP_INFO)
			if qerr == nil {
				queued = info.Unacked
			}
		}); err != nil || qerr != nil || queued == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
