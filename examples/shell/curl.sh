#!/bin/sh
# The action API from a shell with curl: acquire, status, extend, release.
#
#   REDLOCKD_URL=http://127.0.0.1:7070 REDLOCKD_API_KEY=dev-key-0123456789abcdef \
#     sh examples/shell/curl.sh order:pay:10086
#
# Exit status: 0 done, 2 busy, 1 anything else.
set -eu
key=${1:-order:pay:10086}
lock() {
	curl -sS -X POST "$REDLOCKD_URL/v1/lock" \
		-H "X-API-Key: $REDLOCKD_API_KEY" -H 'Content-Type: application/json' -d "$1"
}
field() { # field NAME JSON: a string, number or boolean member of the data object
	printf '%s' "$2" | sed -n 's/.*"'"$1"'":"\{0,1\}\([^",}]*\).*/\1/p'
}

answer=$(lock '{"action":"acquire","key":"'"$key"'","ttl":30}')
if [ "$(field acquired "$answer")" != true ]; then
	echo "busy: $answer" >&2
	exit 2
fi
token=$(field token "$answer")
echo "locked $key fence $(field fence "$answer")"

lock '{"action":"status","key":"'"$key"'"}'; echo
lock '{"action":"extend","key":"'"$key"'","token":"'"$token"'","ttl":60}'; echo
answer=$(lock '{"action":"release","key":"'"$key"'","token":"'"$token"'"}')
echo "$answer"
[ "$(field released "$answer")" = true ]
