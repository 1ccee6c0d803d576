#!/bin/sh
# A cron job's work, run by `redlockd lock run` while it holds the lock:
#
#   redlockd lock run --key job:daily_report --ttl 30s -- examples/shell/job.sh
#
# REDLOCK_KEY, REDLOCK_FENCE and REDLOCK_VALID_UNTIL come from lock run.
# Pass REDLOCK_FENCE to what you write, so a resource can refuse a stale
# holder. JOB_SECONDS sets how long the work takes (default 5); JOB_LOG,
# when set, receives a start and an end line with nanosecond timestamps.
set -eu
log() { [ -z "${JOB_LOG:-}" ] || echo "$1 $(date +%s%N) fence=$REDLOCK_FENCE" >>"$JOB_LOG"; }
trap 'log term; exit 143' TERM
log start
echo "working on $REDLOCK_KEY with fence $REDLOCK_FENCE"
end=$(($(date +%s) + ${JOB_SECONDS:-5}))
while [ "$(date +%s)" -lt "$end" ]; do
	sleep 0.1 # a step of the work
done
log end
