<?php
// A payment callback that must not run twice at once, in the shape of the
// hosted lock API's PHP example: one distlock() call per action against
// /gateway/distlock. Standard PHP only (streams, json).
//
//   REDLOCKD_URL=http://127.0.0.1:7070 REDLOCKD_API_KEY=dev-key-0123456789abcdef \
//     php examples/php/distlock.php 10086 [steps] [ttl seconds]
//
// Exit status: 0 done, 2 busy, 3 lock lost (work stopped), 1 anything else.

/**
 * One call of the action API. Returns [HTTP status, decoded envelope].
 * Throws RuntimeException when the daemon cannot be reached.
 */
function distlock(string $action, string $key, array $extra = []): array
{
    $url = rtrim(getenv('REDLOCKD_URL'), '/') . '/gateway/distlock';
    $body = json_encode(['action' => $action, 'key' => $key] + $extra);
    $ctx = stream_context_create(['http' => [
        'method' => 'POST',
        'header' => "Content-Type: application/json\r\nX-API-Key: " . getenv('REDLOCKD_API_KEY') . "\r\n",
        'content' => $body,
        'timeout' => 10,
        'ignore_errors' => true, // 4xx and 503 carry the JSON envelope too
    ]]);
    $raw = @file_get_contents($url, false, $ctx);
    if ($raw === false) {
        throw new RuntimeException("redlockd unreachable at $url");
    }
    $status = (int) explode(' ', $http_response_header[0])[1];
    return [$status, json_decode($raw, true)];
}

$orderId = $argv[1] ?? '10086';
$steps = (int) ($argv[2] ?? 3);
$key = "order:pay:$orderId";
$ttl = (int) ($argv[3] ?? 10); // seconds

$sent = microtime(true);
[$status, $res] = distlock('acquire', $key, ['ttl' => $ttl]);
if ($status !== 200) {
    fwrite(STDERR, "HTTP $status {$res['code']}: {$res['msg']}\n"); // 503: retry after Retry-After
    exit(1);
}
if (!$res['data']['acquired']) {
    fwrite(STDERR, "busy: {$res['msg']}, retry in {$res['data']['retry_after']}s\n");
    exit(2);
}
$token = $res['data']['token'];
$fence = $res['data']['fence'];
// Counted from before the request was sent plus the time the daemon spent
// on it (elapsed_ms, a wait included): never later than the truth.
$validUntil = $sent + (($res['data']['elapsed_ms'] ?? 0) + $res['data']['validity_ms']) / 1000;
echo "locked $key fence $fence\n";

$lost = null;
for ($i = 0; $i < $steps && $lost === null; $i++) {
    // One step of the work; pass $fence to what it writes, e.g.
    // UPDATE orders SET paid = 1, last_fence = :fence WHERE id = :id AND last_fence < :fence
    usleep(200000);
    // Long work: extend between steps, and stop when the lock is gone.
    $sent = microtime(true);
    [$status, $res] = distlock('extend', $key, ['token' => $token, 'ttl' => $ttl]);
    if ($status === 200 && $res['data']['extended']) {
        $validUntil = max($validUntil, $sent + (($res['data']['elapsed_ms'] ?? 0) + $res['data']['validity_ms']) / 1000);
    } elseif ($status === 200) {
        $lost = $res['msg']; // refused: another owner may hold it now
    } elseif (microtime(true) >= $validUntil - 1) {
        $lost = "validity ends without a confirmed extend (HTTP $status)";
    }
}
[, $rel] = distlock('release', $key, ['token' => $token]);
if ($lost !== null) {
    fwrite(STDERR, "lock lost, work stopped: $lost\n");
    exit(3);
}
echo "paid order $orderId\n";
echo ($rel['data']['released'] ?? false) ? "released\n" : "not released: {$rel['msg']}\n";
