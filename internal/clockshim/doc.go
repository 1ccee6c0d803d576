// Package clockshim fakes the wall clock of a real redis-server, for clock
// fault drills: a master whose clock jumps (forward or back), or runs fast or
// slow. It has two halves:
//
//   - csrc/shim.c, an LD_PRELOAD library that Build compiles with the system
//     C compiler (it sits in a directory of its own because the go tool
//     refuses .c files in a package that does not use cgo), and
//   - Clock, the control file the library reads, whose path the process gets
//     in $REDLOCK_CLOCK_FILE (Clock.Env).
//
// Use it with internal/redisproc:
//
//	so, err := clockshim.Build(cacheDir)
//	clk, err := clockshim.NewClock(filepath.Join(dir, "clock"))
//	srv, err := redisproc.Start(redisproc.Options{LDPreload: so, Env: clk.Env()})
//	clk.Jump(5 * time.Second) // the master's keys are now 5 s closer to expiry
//	clk.SetRate(1.1)          // and from now on its clock runs 10% fast
//
// # What is faked
//
// gettimeofday, time, and clock_gettime for CLOCK_REALTIME and
// CLOCK_REALTIME_COARSE; nothing else. For a real time t the process sees
//
//	fake(t) = t + offset + skew + (t - anchor) * (rate - 1)
//
// where offset is the sum of all Jumps, rate the last SetRate, and skew the
// drift that earlier rates accumulated up to anchor, the moment of the last
// SetRate. The monotonic clocks (CLOCK_MONOTONIC, _COARSE, _RAW,
// CLOCK_BOOTTIME) and the CPU clocks are left alone, on purpose: a machine
// whose wall clock is stepped or slewed still has a steady monotonic clock.
//
// What that does to Redis 7.0 (checked against the 7.0 source and by
// counting calls of a preloaded redis-server 7.0.15): ustime() and mstime()
// are gettimeofday, and they are the clock of key expiry (the expire time
// stored by SET PX/EX and PEXPIRE is mstime()+ttl, and both the lazy check in
// keyIsExpired and the active expire cycle compare against mstime() or the
// command-start snapshot server.mstime taken from ustime()), of PTTL/TTL, of
// TIME, and of the log timestamps. time() is used for a few statistics
// (start time, last save). The event loop, serverCron's cadence and other
// timers run on getMonotonicUs(), which is clock_gettime(CLOCK_MONOTONIC)
// ("monotonic clock: POSIX clock_gettime" in the start-up log), so they keep
// real time; Redis 7.0 makes no CLOCK_REALTIME call at all. So a Jump(+5s)
// expires every key with less than 5 s to live at the next access or cron
// cycle, and SetRate(2) makes a 1000 ms PX key vanish after about 500 ms of
// real time — exactly the clock faults the Redlock analysis worries about.
//
// The control file is re-read at most every 10 ms of real time, on the next
// time call, so a change takes effect within about 10 ms (Redis asks for the
// time on every command and on every cron tick, at least 10 times a second).
// Writes are atomic (a temp file renamed into place). A rate change never
// makes the process's clock step back: if the process saw the new rate late
// and adopting the file's clock would go backwards, it carries on from its
// current time instead. Jump and Reset are deliberate steps and are applied
// exactly, backwards too. A process that starts (or restarts) later adopts
// the file's clock exactly, accumulated skew included, as a restarted
// process on a machine with a fast clock would.
//
// # Why not libfaketime
//
// Debian's libfaketime hangs or crashes Debian's redis-server, which is
// linked with jemalloc (wolfcw/libfaketime#130, #327, #478, still open
// upstream): jemalloc calls clock_gettime while it initialises; libfaketime's
// clock_gettime then initialises itself, whose dlsym calls (for symbols that
// do not exist) allocate, which re-enters jemalloc's half-done
// initialisation; libfaketime breaks the recursion by making clock_gettime
// fail, which jemalloc does not expect. libfaketime also intercepts far more
// than we need (sleeps, timers, file times, pthread waits) and is configured
// in an absolute-or-relative date syntax. Our shim overrides three functions,
// looks up exactly one symbol that exists (clock_gettime, with
// dlsym(RTLD_NEXT)), and while that lookup is in progress answers every
// clock_gettime with the raw system call, which needs no initialisation and
// cannot recurse. The hot path allocates nothing, takes no lock that can
// block, reads the control file with bare open/read/close system calls, and
// preserves errno.
//
// # Limits
//
//   - Linux only (LD_PRELOAD, /proc); glibc or musl. A statically linked
//     program, or one that reads the vDSO or issues the clock syscalls
//     itself, does not see the fake clock. Go programs do not use libc's
//     clock functions and are unaffected.
//   - Only processes started with LD_PRELOAD and $REDLOCK_CLOCK_FILE are
//     affected; the test process, and every other process, keeps the real
//     clock.
//   - Absolute-time waits computed from the fake clock end early after a
//     forward jump and late after a backward one, since the kernel waits on
//     the real clock. In redis-server that is jemalloc's background purge
//     thread (gettimeofday + pthread_cond_timedwait): harmless.
//   - A child forked while another thread was re-reading the control file
//     keeps the clock it had and stops following the file (Redis's
//     BGSAVE children are short-lived and never exec).
//   - Across threads, times read within ~a microsecond of a rate change are
//     ordered only approximately; each thread's clock is monotone as long as
//     only the rate changes.
//   - The control file path must be absolute (NewClock makes it so), because
//     redis-server runs in its own directory.
package clockshim
