-- Write one master's copy of an idempotency record, ordered by fence: a
-- copy is never replaced by one with a lower fence, and a COMPLETED copy
-- is never replaced by an IN_PROGRESS one. Follows vote_prelude.lua.
-- KEYS[1] record key, KEYS[2..] as in the prelude.
-- ARGV[1] op: 'begin', 'complete', 'abort' (delete the attempt's copy, or
--         put back the earlier attempt's it took over),
--         'undo' (put back the copy the attempt's begin replaced) or
--         'extend' (keep the attempt's IN_PROGRESS copy at least twice
--         ARGV[9] more: the lease is being extended to ARGV[9])
-- ARGV[2] token (the lease's), ARGV[3] fence (the lease's)
-- ARGV[4] fingerprint ('' on complete when not known: then a master
--         without the token's copy is not filled in: 4 when it has none,
--         0 when it has another attempt's)
-- ARGV[5] attempts at least (begin, fill), ARGV[6] started, unix ms
-- ARGV[7] answer (complete), ARGV[8] retention ms, ARGV[9] lease ms
--         (begin, extend)
-- ARGV[10] completed, unix ms (complete: the caller's clock, so that every
--          copy says the same)
-- ARGV[11], ARGV[12] the answer's size (Answer.Size) and HTTP status
--          (complete; absent from older clients: list_read.lua then
--          reads the answer itself); on begin: the account's record budget
--          set (BeginRequest.Budget: '' or absent for none) and its cap in
--          bytes (0: counted, not capped)
-- Every reply's extra is the copy before the script (cjson of HGETALL, ''
-- when none). Codes:
--    1  written (begin: value = the attempt count written; abort: deleted;
--       extend: value = the copy's TTL now, ms)
--    0  refused: another attempt's copy is here (begin: one with a fence
--       at least this one's; complete: see ARGV[4]; abort, undo, extend:
--       any)
--    2  refused: a COMPLETED copy of another attempt is here
--    3  refused (begin): the copy here has another fingerprint
--    4  no copy here and none written (complete without fingerprint,
--       abort, extend)
--    5  refused (complete): this attempt already completed here with
--       another answer, which is kept
--    6  refused (begin): a new record would take the account's records
--       on this master past its budget (value = ms until its oldest
--       record ends)
--   -2  this master lost its data: nothing written
if not intact then
  return reply(-2, 0)
end
-- The account's record budget: a sorted set S (record key -> when its
-- copy here ends, unix ms by this master's clock) and a sorted set
-- S..':sz' (record key -> the bytes counted for it, '#total' -> their
-- sum), sorted sets both so that the budget needs no command the lock
-- scripts do not already call (the ACL the docs give, the startup check).
-- A copy names its S in its 'bud' field, so that complete, extend, abort
-- and undo keep the count without being told. Copies that ended leave the
-- count at the next begin of the account here (sweep: at most 64 a call;
-- the rest at the next ones, so the count errs high, never low).
local function total(H)
  return tonumber(redis.call('ZSCORE', H, '#total') or '0')
end
local function sweep(S, H)
  local gone = redis.call('ZRANGE', S, '-inf', nowms, 'BYSCORE', 'LIMIT', 0, 64)
  if #gone > 0 then
    local freed = 0
    for i = 1, #gone do
      freed = freed + tonumber(redis.call('ZSCORE', H, gone[i]) or '0')
    end
    redis.call('ZREM', H, unpack(gone))
    redis.call('ZREM', S, unpack(gone))
    redis.call('ZADD', H, total(H) - freed, '#total')
  end
end
-- track counts size bytes for this record, its copy here ending at exp
-- (size nil: as counted before); S and its sizes last as long as their
-- longest record.
local function track(S, size, exp)
  local H = S .. ':sz'
  if size then
    local old = tonumber(redis.call('ZSCORE', H, KEYS[1]) or '0')
    local t = total(H)
    redis.call('ZADD', H, size, KEYS[1], t + size - old, '#total')
  end
  redis.call('ZADD', S, exp, KEYS[1])
  local ttl = exp - nowms
  if redis.call('PTTL', S) < ttl then
    redis.call('PEXPIRE', S, ttl)
  end
  if redis.call('PTTL', H) < ttl then
    redis.call('PEXPIRE', H, ttl)
  end
end
local function untrack(S)
  local H = S .. ':sz'
  local old = redis.call('ZSCORE', H, KEYS[1])
  if old then
    local t = total(H)
    redis.call('ZREM', H, KEYS[1])
    redis.call('ZADD', H, t - tonumber(old), '#total')
  end
  redis.call('ZREM', S, KEYS[1])
end
-- What a copy costs beyond its answer: its fields and key (about 200
-- bytes) and the budget's own entries.
local base = 256 + 2 * #KEYS[1]
local op, tok, fence = ARGV[1], ARGV[2], tonumber(ARGV[3])
local f = redis.call('HGETALL', KEYS[1])
local prior = ''
local p = {}
local kept = {} -- the copy without its 'prev' field
if #f > 0 then
  for i = 1, #f, 2 do
    p[f[i]] = f[i + 1]
    if f[i] ~= 'prev' then
      kept[#kept + 1] = f[i]
      kept[#kept + 1] = f[i + 1]
    end
  end
  prior = cjson.encode(kept)
end
local pfence = tonumber(p.fence or '-1')
if op == 'begin' then
  if p.st == 'COMPLETED' then
    return reply(2, 0, prior)
  end
  if p.fp and p.fp ~= ARGV[4] then
    return reply(3, 0, prior)
  end
  if pfence >= fence then
    return reply(0, 0, prior)
  end
  local S = ARGV[11] or ''
  if S ~= '' then
    sweep(S, S .. ':sz')
    local cap = tonumber(ARGV[12] or '0')
    if cap > 0 and #f == 0 then
      -- A new record on this master: within the account's budget, or
      -- refused until its oldest record ends.
      if math.max(total(S .. ':sz'), 0) + base > cap then
        local first = redis.call('ZRANGE', S, 0, 0, 'WITHSCORES')
        local wait = 1000
        if first[2] then
          wait = math.max(tonumber(first[2]) - nowms, 1)
        end
        return reply(6, wait, prior)
      end
    end
  end
  local att = math.max(tonumber(ARGV[5]), tonumber(p.att or '0') + 1)
  -- A take-over never shortens the record (as extend never does): it keeps
  -- the longest retention an attempt was granted ('ret', counted again
  -- from a complete) and the copy's time left here, whichever is longer
  -- than its own. Shortened, a take-over with a short retention ended the
  -- record inside the earlier attempt's retention, and the next begin was
  -- a blind Started for work that attempt may have done.
  local ret = math.max(tonumber(ARGV[8]), tonumber(p.ret or '0'))
  local left = ret
  if #f > 0 then
    left = math.max(left, redis.call('PTTL', KEYS[1]))
  end
  redis.call('DEL', KEYS[1])
  -- 'prev' keeps the copy replaced (an earlier attempt's IN_PROGRESS), for
  -- an undo: a begin that fails must not erase the evidence of an earlier
  -- attempt that may have done its work.
  redis.call('HSET', KEYS[1], 'fp', ARGV[4], 'st', 'IN_PROGRESS', 'tok', tok, 'fence', ARGV[3],
    'att', att, 't0', ARGV[6], 'ret', string.format('%d', ret), 'prev', prior)
  redis.call('PEXPIRE', KEYS[1], left)
  if S ~= '' then
    redis.call('HSET', KEYS[1], 'bud', S)
    track(S, base, nowms + left)
  end
  -- The record's lease is a lock granted with this master's vote or
  -- another's: the horizon bounds it too (redlock/horizon.go).
  raiseHorizon(tonumber(ARGV[9]))
  return reply(1, att, prior)
end
if op == 'complete' then
  if p.st == 'COMPLETED' then
    if p.tok == tok then
      if p.ans == ARGV[7] then
        return reply(1, 0, prior) -- the same complete again: a retry
      end
      return reply(5, 0, prior)
    end
    return reply(2, 0, prior)
  end
  if #f > 0 and p.tok ~= tok then
    -- Another attempt's IN_PROGRESS copy: replaced only when filling in
    -- (ARGV[4] set) and it is an older attempt's, which this master kept
    -- because it missed this attempt's begin.
    if ARGV[4] == '' or pfence >= fence then
      return reply(0, 0, prior)
    end
    redis.call('DEL', KEYS[1])
    f = {}
  end
  if #f == 0 then
    if ARGV[4] == '' then
      return reply(4, 0, prior)
    end
    redis.call('HSET', KEYS[1], 'fp', ARGV[4], 'tok', tok, 'fence', ARGV[3], 'att', ARGV[5], 't0', ARGV[6], 'ret', ARGV[8])
  end
  local ret = redis.call('HGET', KEYS[1], 'ret')
  redis.call('HSET', KEYS[1], 'st', 'COMPLETED', 'ans', ARGV[7], 'tc', ARGV[10])
  if ARGV[12] then
    -- The answer's size and status, for listings that do not read it.
    redis.call('HSET', KEYS[1], 'asz', ARGV[11], 'ast', ARGV[12])
  end
  redis.call('PEXPIRE', KEYS[1], ret)
  -- A copy filled in here (none before) has no 'bud': the account's
  -- budget is kept on the masters its begin reached, a quorum.
  local bud = redis.call('HGET', KEYS[1], 'bud')
  if bud and bud ~= '' then
    track(bud, base + #ARGV[7], nowms + tonumber(ret))
  end
  return reply(1, 0, prior)
end
if op == 'extend' then
  if #f == 0 then
    return reply(4, 0, prior)
  end
  if p.st == 'COMPLETED' then
    return reply(2, 0, prior)
  end
  if p.tok ~= tok then
    return reply(0, 0, prior)
  end
  -- Never shortened: the copy lasts at least two leases from now, so it
  -- outlives the extended lease by a lease (safety.go, 3; Store.keepRecord).
  local want = 2 * tonumber(ARGV[9])
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < want then
    redis.call('PEXPIRE', KEYS[1], want)
    pttl = want
    if p.bud and p.bud ~= '' then
      track(p.bud, nil, nowms + pttl)
    end
  end
  return reply(1, pttl, prior)
end
-- abort, undo
if #f == 0 then
  return reply(4, 0, prior)
end
if p.st == 'COMPLETED' then
  return reply(2, 0, prior)
end
if p.tok ~= tok then
  return reply(0, 0, prior)
end
local pttl = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1])
-- Both put back the copy the attempt's begin replaced: an undo because the
-- begin failed, an abort because the attempt it took over may have done
-- its work, and the next begin must still say so (ExpiredInProgress), not
-- start afresh.
if p.prev and p.prev ~= '' then
  redis.call('HSET', KEYS[1], unpack(cjson.decode(p.prev)))
  if pttl > 0 then
    redis.call('PEXPIRE', KEYS[1], pttl)
  end
  if p.bud and p.bud ~= '' and pttl > 0 then
    track(p.bud, base, nowms + pttl)
  end
elseif p.bud and p.bud ~= '' then
  untrack(p.bud)
end
return reply(1, 0, prior)
