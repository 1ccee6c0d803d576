#!/usr/bin/env python3
"""Hold a redlockd lock from Python for as long as the work takes.

Standard library only (urllib, threading). A keep-alive thread extends the
lock at about a third of its TTL; `lost` is set the moment the lock is lost:
an extend refused, or validity about to end without a confirmed extend.
The work checks `lock.lost` between steps and stops.

    REDLOCKD_URL=http://127.0.0.1:7070 REDLOCKD_API_KEY=dev-key-0123456789abcdef \\
      python3 examples/python/hold_lock.py --key job:export --ttl 30 --work 120

Exit status: 0 done, 2 busy, 3 lock lost (work stopped), 1 anything else.
"""
import argparse
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request


class Busy(Exception):
    """Another owner holds the lock; retry_after is its remaining seconds."""

    def __init__(self, retry_after):
        super().__init__(f"held by another owner for {retry_after}s more")
        self.retry_after = retry_after


class Unavailable(Exception):
    """503 (no quorum of masters) or the daemon could not be reached."""


def call(url, api_key, body, timeout=10):
    """POST body to /v1/lock; return (HTTP status, envelope)."""
    req = urllib.request.Request(
        url.rstrip("/") + "/v1/lock",
        data=json.dumps(body).encode(),
        headers={"X-API-Key": api_key, "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:  # 4xx/5xx still carry the envelope
        return e.code, json.load(e)
    except (urllib.error.URLError, OSError) as e:
        raise Unavailable(str(e)) from e


class Lock:
    """One held lock with a keep-alive thread. Use as a context manager."""

    def __init__(self, url, api_key, key, ttl):
        self.url, self.api_key, self.key, self.ttl = url, api_key, key, ttl
        self.lost = threading.Event()
        self.reason = None
        self._stop = threading.Event()

    def __enter__(self):
        sent = time.monotonic()
        status, env = call(self.url, self.api_key, {"action": "acquire", "key": self.key, "ttl": self.ttl})
        if status == 503:
            raise Unavailable(env["msg"])
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {env['msg']}")
        data = env["data"]
        if not data["acquired"]:
            raise Busy(data.get("retry_after"))
        self.token, self.fence = data["token"], data["fence"]
        # Validity counts from before the request was sent plus the time the daemon
        # spent on it (elapsed_ms, a wait included): never later than the truth.
        self.valid_until = sent + (data.get("elapsed_ms", 0) + data["validity_ms"]) / 1000
        self._thread = threading.Thread(target=self._keep_alive, daemon=True)
        self._thread.start()
        return self

    def _lose(self, reason):
        self.reason = reason
        self.lost.set()

    def _keep_alive(self):
        margin = min(self.ttl / 10, 1.0)  # lost this long before validity ends
        wait = self.ttl / 3
        last_error = None
        while not self._stop.wait(wait):
            loss_at = self.valid_until - margin
            if time.monotonic() >= loss_at:
                return self._lose(f"validity about to end without a confirmed extend (last error: {last_error})")
            sent = time.monotonic()
            try:
                status, env = call(self.url, self.api_key,
                                   {"action": "extend", "key": self.key, "token": self.token, "ttl": self.ttl},
                                   timeout=max(loss_at - sent, 0.05))
            except Unavailable as e:
                status, env = 0, {"msg": str(e)}
            if status == 200 and env["data"]["extended"]:
                d = env["data"]
                self.valid_until = max(self.valid_until, sent + (d.get("elapsed_ms", 0) + d["validity_ms"]) / 1000)
                wait = self.ttl / 3
            elif status == 200:
                return self._lose(f"extend refused: {env['msg']}")
            else:
                last_error = f"HTTP {status}: {env['msg']}" if status else env["msg"]
                # Retry soon, but wake in time to declare the loss.
                wait = max(min(self.ttl / 10, self.valid_until - margin - time.monotonic()), 0.01)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        try:
            call(self.url, self.api_key, {"action": "release", "key": self.key, "token": self.token})
        except Unavailable:
            pass  # the lock ends with its TTL
        return False


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--key", default="job:export")
    p.add_argument("--ttl", type=int, default=30, help="seconds")
    p.add_argument("--work", type=float, default=120, help="seconds of work")
    args = p.parse_args()
    url, api_key = os.environ["REDLOCKD_URL"], os.environ["REDLOCKD_API_KEY"]
    try:
        with Lock(url, api_key, args.key, args.ttl) as lock:
            print(f"locked {args.key} fence {lock.fence}", flush=True)
            end = time.monotonic() + args.work
            while time.monotonic() < end:
                if lock.lost.is_set():
                    print(f"lock lost, work stopped: {lock.reason}", file=sys.stderr)
                    return 3
                time.sleep(0.1)  # one step of work, passing lock.fence to the resource
        print("done")
        return 0
    except Busy as e:
        print(f"busy: {e}", file=sys.stderr)
        return 2
    except Unavailable as e:
        print(f"unavailable: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
