-- The slots read of a semaphore attempt (redlock/semaphore.go, grantedSlots):
-- for each slot lock key KEYS[2i-1] and its fence record KEYS[2i], the
-- key's PTTL (-2 when absent) and whether its holder is granted here (1:
-- the fence record holds "<fence> <the holder's token>", as acquire.lua's
-- granted() reads it; 0 otherwise).
-- Returns {pttl1, g1, pttl2, g2, …}. Writes nothing and reads no
-- deployment state: the client uses it only to skip slots an Acquire could
-- not win; every slot it tries is decided by an Acquire, with every check.
-- One MGET for every key (one command, not one per slot: the read of a
-- full semaphore of 1,000 permits cost each master about 10 ms, and its
-- callers starved every other key's votes of their per-master timeout),
-- then a PTTL only for a slot granted here, the one whose end the client
-- reads; a slot held but not granted reports -1 (present, no end known).
local hf = redis.call('MGET', unpack(KEYS))
local out = {}
for i = 1, #KEYS, 2 do
  local holder, f = hf[i], hf[i + 1]
  local pttl, g = -2, 0
  if holder then
    pttl = -1
    local sp = f and string.find(f, ' ', 1, true)
    if sp and string.sub(f, sp + 1) == holder then
      g = 1
      pttl = redis.call('PTTL', KEYS[i])
    end
  end
  out[#out + 1] = pttl
  out[#out + 1] = g
end
return out
