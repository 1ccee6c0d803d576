#!/usr/bin/env bash
# mkrootfs.sh — assemble a minimal root filesystem for the local Redis image.
#
# Usage: docker/redis/mkrootfs.sh [--tar FILE] OUTDIR [EXTRA_FILE...]
#
# This machine reaches no image registry, so the Redis image cannot start
# FROM redis or FROM debian. Instead this script copies the host's Debian
# redis-server (and redis-cli, used by the compose healthcheck and for
# debugging) plus every shared library they link, at the paths ldd reports,
# together with the dynamic loader. docker/redis/Dockerfile then does
# `FROM scratch` + `ADD rootfs.tar /`.
#
# --tar FILE also packs OUTDIR into FILE, which is what the Dockerfile uses:
# files owned by 0:0 except /data, owned by redis (999:999), with fixed
# mtimes and order so an unchanged rootfs gives the same image layer. A tar
# because Dockerfile COPY cannot do this: it makes everything root-owned, and
# `COPY --chown` does not change a directory that already exists, so /data
# would stay unwritable for redis (and FROM scratch has no RUN to fix it).
#
# OUTDIR receives:
#   /usr/bin/redis-server, /usr/bin/redis-cli   (dereferenced: on Debian
#                       redis-server is a symlink to redis-check-rdb, and Redis
#                       picks its mode from argv[0], so it must be a real file
#                       named redis-server)
#   /lib/x86_64-linux-gnu/*.so.*, /lib64/ld-linux-x86-64.so.2
#                       (each library copied as a regular file to the path ldd
#                       resolved, so no ld.so.cache or usrmerge symlinks needed)
#   /usr/local/bin/docker-entrypoint
#                       static Go shim (docker/redis/entrypoint) so compose can
#                       pass `redis-server --flags...` exactly as to redis:7
#   /etc/passwd, /etc/group (root, and redis uid/gid 999 as in redis:7),
#   /etc/nsswitch.conf, /data, /tmp (1777)
#   /etc/redlockd-rootfs.manifest  what was copied, from which package; also
#                       marks OUTDIR as ours so a rerun may replace it
#
# EXTRA_FILE (optional, any number): copied to /usr/lib/redlock/<basename>,
# together with any shared libraries it links. This is the hook for a later
# LD_PRELOAD clock shim for drills (not built here); a container would use it
# with e.g. `environment: LD_PRELOAD=/usr/lib/redlock/libclockshim.so`. The
# entrypoint shim is static and ignores it; redis-server gets it, and so does
# anything run with `docker exec` (the healthcheck's redis-cli included),
# since exec inherits the container's environment.
#
# Environment: REDIS_SERVER (default /usr/bin/redis-server), REDIS_CLI
# (default /usr/bin/redis-cli; set to empty to leave it out, but then the
# docker-compose.yml healthcheck cannot work), GO (default go).
#
# OUTDIR must not exist, be empty, or be a previous output of this script
# (recognised by its manifest); anything else is refused rather than deleted.
set -euo pipefail

prog=${0##*/}
die() { printf '%s: %s\n' "$prog" "$*" >&2; exit 1; }

tarfile=
if [ "${1-}" = --tar ]; then
	[ $# -ge 2 ] || die "--tar needs a FILE"
	tarfile=$2
	shift 2
fi
[ $# -ge 1 ] || die "usage: $prog [--tar FILE] OUTDIR [EXTRA_FILE...]"
out=$1
shift
[ -n "$out" ] && [ "$out" != / ] || die "refusing OUTDIR '$out'"

repo=$(cd "$(dirname "$0")/../.." && pwd)
redis_server=${REDIS_SERVER-/usr/bin/redis-server}
redis_cli=${REDIS_CLI-/usr/bin/redis-cli}
go=${GO:-go}
manifest_rel=etc/redlockd-rootfs.manifest

command -v ldd >/dev/null || die "ldd not found"
command -v "$go" >/dev/null || die "$go not found (needed to build the entrypoint shim)"
[ -x "$redis_server" ] || die "$redis_server not found; install the Debian package redis-server"
[ -z "$redis_cli" ] || [ -x "$redis_cli" ] || die "$redis_cli not found; install redis-tools or set REDIS_CLI="
for f in "$@"; do [ -f "$f" ] || die "extra file $f not found"; done

if [ -e "$out" ]; then
	[ -d "$out" ] || die "$out exists and is not a directory"
	if [ -n "$(ls -A "$out")" ] && [ ! -f "$out/$manifest_rel" ]; then
		die "$out is not empty and was not made by $prog; remove it yourself"
	fi
	rm -rf "$out"
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

manifest=()

# install_file SRC DEST MODE: copy SRC (following symlinks) to OUTDIR/DEST.
install_file() {
	mkdir -p "$out/$(dirname "$2")"
	cp -L "$1" "$out/$2"
	chmod "$3" "$out/$2"
	manifest+=("$2 <- $(readlink -f "$1")")
}

# install_deps FILE: copy the loader and every library FILE links, at the
# paths ldd resolves them to.
install_deps() {
	local line path
	local lddout
	lddout=$(ldd "$1" 2>&1) || {
		# A static executable or an object ldd cannot handle has no deps.
		case $lddout in *"not a dynamic executable"*|*"statically linked"*) return 0 ;; esac
		die "ldd $1 failed: $lddout"
	}
	while IFS= read -r line; do
		case $line in
		*"not found"*) die "$1: missing library: $line" ;;
		*linux-vdso.so*|*linux-gate.so*) continue ;;
		*" => "/*) path=${line#*=> }; path=${path%% (*} ;;
		*/*) path=${line#"${line%%/*}"}; path=${path%% (*} ;;
		*) continue ;;
		esac
		[ -e "$out$path" ] || install_file "$path" "${path#/}" 0755
	done <<<"$lddout"
}

install_file "$redis_server" usr/bin/redis-server 0755
install_deps "$redis_server"
if [ -n "$redis_cli" ]; then
	install_file "$redis_cli" usr/bin/redis-cli 0755
	install_deps "$redis_cli"
fi

for f in "$@"; do
	install_file "$f" "usr/lib/redlock/$(basename "$f")" 0755
	install_deps "$f"
done

mkdir -p "$out/usr/local/bin"
(cd "$repo" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 "$go" build -trimpath -buildvcs=false -ldflags='-s -w' \
	-o "$out/usr/local/bin/docker-entrypoint" ./docker/redis/entrypoint)
manifest+=("usr/local/bin/docker-entrypoint <- ./docker/redis/entrypoint (go build, static)")

mkdir -p "$out/etc" "$out/data" "$out/tmp"
chmod 0755 "$out/data"
chmod 1777 "$out/tmp"
cat >"$out/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
redis:x:999:999:redis:/data:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
EOF
cat >"$out/etc/group" <<'EOF'
root:x:0:
redis:x:999:
nogroup:x:65534:
EOF
# getaddrinfo in redis-cli (`-h redis1`): glibc >= 2.34 has files/dns built in;
# Docker bind-mounts /etc/hosts and /etc/resolv.conf at run time.
cat >"$out/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
hosts: files dns
EOF
chmod 0644 "$out/etc/passwd" "$out/etc/group" "$out/etc/nsswitch.conf"

{
	echo "# made by docker/redis/mkrootfs.sh; do not edit"
	echo "redis-server: $("$redis_server" --version)"
	# On Debian redis-server (the symlink) and redis-tools (the binary it
	# points to) are both involved; record every owning package.
	if command -v dpkg-query >/dev/null; then
		for p in "$redis_server" "$(readlink -f "$redis_server")" ${redis_cli:+"$redis_cli"}; do
			dpkg-query -S "$p" 2>/dev/null | cut -d: -f1 || true
		done | sort -u | while read -r pkg; do
			echo "package: $pkg $(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)"
		done
	fi
	printf '%s\n' "${manifest[@]}"
} >"$out/$manifest_rel"
chmod 0644 "$out/$manifest_rel"

# Prove the tree is self-contained when we can (chroot needs root).
if [ "$(id -u)" = 0 ] && command -v chroot >/dev/null; then
	chroot "$out" /usr/bin/redis-server --version >/dev/null ||
		die "redis-server does not run inside $out (missing library?)"
fi

echo "$prog: rootfs in $out ($(du -sh "$out" | cut -f1))"

if [ -n "$tarfile" ]; then
	[ ! -d "$tarfile" ] || die "--tar $tarfile is a directory"
	mkdir -p "$(dirname "$tarfile")"
	rm -f "$tarfile"
	common=(--format=gnu --sort=name --mtime=@0 --numeric-owner -C "$out")
	tar -cf "$tarfile" "${common[@]}" --owner=0 --group=0 --exclude=./data .
	tar -rf "$tarfile" "${common[@]}" --owner=999 --group=999 ./data
	echo "$prog: packed into $tarfile"
fi
