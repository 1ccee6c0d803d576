// Package dockerdrill holds the Docker drill test: the fault drills of
// package chaos against a docker-compose deployment of redlockd that the
// test brings up itself (from the local images, built if missing) under a
// project name and ports of its own, and takes down afterwards. It is a
// package of its own so that `go test ./chaos/` stays short.
//
// Without a Docker engine (or docker-compose) the test skips, saying so;
// with REDLOCK_REQUIRE_DOCKER=1 (set in .ci/run) it fails instead.
// The redlockd image is rebuilt from this tree on every run;
// REDLOCK_DOCKER_REBUILD=1 rebuilds the Redis image too.
package dockerdrill
