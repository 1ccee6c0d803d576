// Command docker-entrypoint is the entrypoint of the locally built Redis image
// (docker/redis/Dockerfile). That image is FROM scratch: it has no shell, so
// this is a static Go binary (CGO_ENABLED=0) that only rewrites its arguments
// and replaces itself with the real program via execve.
//
// It accepts the same command lines as the public redis image's
// docker-entrypoint.sh, so docker-compose.yml can use one `command:` for both:
//
//	redis-server --bind 0.0.0.0 ...   exec /usr/bin/redis-server --bind 0.0.0.0 ...
//	--bind 0.0.0.0 ...                 same (leading flag or *.conf: redis-server is implied)
//	redis-cli -h redis1 ping           exec redis-cli found on PATH (debugging, healthchecks)
//	(no arguments)                     exec /usr/bin/redis-server
//
// Unlike the public image it never starts as root and drops privileges: the
// image already runs as the unprivileged redis user (USER in the Dockerfile).
// Because this binary is static, an LD_PRELOAD set on the container (for
// example a clock shim under /usr/lib/redlock/) does not affect it and is
// passed unchanged to redis-server through the environment.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// redisServer is where mkrootfs.sh puts the Debian redis-server binary.
const redisServer = "/usr/bin/redis-server"

func main() {
	path, argv, err := resolve(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "docker-entrypoint: %v\n", err)
		os.Exit(127)
	}
	// Same default as the public image: a private umask unless one was set.
	if old := syscall.Umask(0o077); old != 0o022 {
		syscall.Umask(old)
	}
	err = syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "docker-entrypoint: exec %s: %v\n", path, err)
	os.Exit(126)
}

// resolve maps the container's command line to the program to exec and its
// argv (argv[0] included).
func resolve(args []string) (string, []string, error) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") || strings.HasSuffix(args[0], ".conf") {
		return redisServer, append([]string{redisServer}, args...), nil
	}
	if filepath.Base(args[0]) == "redis-server" {
		return redisServer, append([]string{redisServer}, args[1:]...), nil
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		return "", nil, err
	}
	return path, args, nil
}
