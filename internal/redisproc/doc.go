// Package redisproc starts and controls real redis-server processes on
// loopback ports, for integration tests (started from TestMain) and for the
// `redlockd dev` command, which runs five local masters.
//
// Each Server is one redis-server child process listening on
// 127.0.0.1:<port> with its own directory holding its data dir and its log
// (stdout and stderr of the process). Servers run with `--save ""` and
// `--appendonly no`, so nothing is persisted unless Options.ExtraArgs says
// otherwise, and Restart always comes back with an empty dataset and a new
// run_id: the "master lost its data" case of the Redlock page.
//
// What is guaranteed:
//
//   - Start returns only once the process it started answered PING itself
//     (the process_id in INFO server is checked, so a foreign Redis that
//     grabbed the port is not mistaken for ours); it retries on a new port
//     when the chosen one was taken between picking and binding.
//   - Restart keeps the port, retrying the bind for a bounded time.
//   - Kill, Stop and Restart reap the process before returning; Kill and
//     Stop are idempotent. All methods are safe for concurrent use.
//   - On Linux the processes get SIGKILL when the process that started them
//     dies (Pdeathsig), even if the test binary crashes or is killed. Because
//     Linux ties Pdeathsig to the starting thread rather than the process,
//     children are started from one dedicated, locked OS thread that lives
//     while any of them does (golang/go#27505).
//
// What is NOT guaranteed:
//
//   - Outside Linux there is no death signal: a crashed parent leaves its
//     redis-servers running. Call StopAll (or Stop) on every path out.
//   - Free-port picking is best effort (listen on :0, close, reuse). Another
//     program can take a stopped or killed Server's port, in which case
//     Restart fails after its bound.
//   - Options.Binary must be redis-server itself or something that execs it:
//     signals go to the started process, and readiness checks its pid.
//   - Windows is not supported.
package redisproc
