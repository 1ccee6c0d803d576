#!/usr/bin/env bash
# mkrootfs.sh — assemble the root filesystem of the local Prometheus image
# from the host's Debian prometheus package, as docker/redis/mkrootfs.sh
# does for Redis, for hosts that reach no image registry (so no FROM
# prom/prometheus).
#
# Usage: docker/prometheus/mkrootfs.sh --tar FILE OUTDIR
#
# OUTDIR receives /bin/prometheus and /bin/promtool (copied from
# $PROMETHEUS, default /usr/bin/prometheus, and $PROMTOOL), every shared
# library they link at the path ldd resolves (Debian's build links libc
# only), /etc/passwd and /etc/group with nobody (65534), /prometheus for
# the TSDB, owned by nobody, and /etc/redlockd-rootfs.manifest (what was
# copied, from which package; it also marks OUTDIR as ours so a rerun may
# replace it). FILE is OUTDIR as a tar with fixed owners and mtimes,
# which docker/prometheus/Dockerfile ADDs to scratch.
set -euo pipefail

prog=${0##*/}
die() { printf '%s: %s\n' "$prog" "$*" >&2; exit 1; }

[ "${1-}" = --tar ] && [ $# -eq 3 ] || die "usage: $prog --tar FILE OUTDIR"
tarfile=$2
out=$3
[ -n "$out" ] && [ "$out" != / ] || die "refusing OUTDIR '$out'"
prometheus=${PROMETHEUS:-/usr/bin/prometheus}
promtool=${PROMTOOL:-/usr/bin/promtool}
manifest_rel=etc/redlockd-rootfs.manifest

command -v ldd >/dev/null || die "ldd not found"
[ -x "$prometheus" ] || die "$prometheus not found; install the Debian package prometheus"
[ -x "$promtool" ] || die "$promtool not found; install the Debian package prometheus"

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

install_file() {
	mkdir -p "$out/$(dirname "$2")"
	cp -L "$1" "$out/$2"
	chmod "$3" "$out/$2"
	manifest+=("$2 <- $(readlink -f "$1")")
}

install_deps() {
	local line path lddout
	lddout=$(ldd "$1" 2>&1) || {
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

install_file "$prometheus" bin/prometheus 0755
install_deps "$prometheus"
install_file "$promtool" bin/promtool 0755
install_deps "$promtool"

mkdir -p "$out/etc/prometheus" "$out/prometheus" "$out/tmp"
chmod 1777 "$out/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$out/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$out/etc/group"
chmod 0644 "$out/etc/passwd" "$out/etc/group"

{
	echo "# made by docker/prometheus/mkrootfs.sh; do not edit"
	"$prometheus" --version 2>&1 | head -1
	if command -v dpkg-query >/dev/null; then
		pkg=$(dpkg-query -S "$(readlink -f "$prometheus")" 2>/dev/null | cut -d: -f1 || true)
		[ -z "$pkg" ] || echo "package: $pkg $(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)"
	fi
	printf '%s\n' "${manifest[@]}"
} >"$out/$manifest_rel"
chmod 0644 "$out/$manifest_rel"

echo "$prog: rootfs in $out ($(du -sh "$out" | cut -f1))"
mkdir -p "$(dirname "$tarfile")"
rm -f "$tarfile"
common=(--format=gnu --sort=name --mtime=@0 --numeric-owner -C "$out")
tar -cf "$tarfile" "${common[@]}" --owner=0 --group=0 --exclude=./prometheus .
tar -rf "$tarfile" "${common[@]}" --owner=65534 --group=65534 ./prometheus
echo "$prog: packed into $tarfile"
