-- fence.lua for a multi-key lock: raise the counter to ARGV[2] and store
-- the fence in every key's fence record, only where this token holds every
-- key of the set and this master still has the deployment's state.
-- KEYS[1] the first lock key, KEYS[2] marker, KEYS[3] lease horizon,
-- KEYS[4] fencing counter, then
-- from KEYS[5] ARGV[3] keys per lock key: the lock key, its fence record[,
-- its delay record (read, not written)]
-- ARGV[1] token, ARGV[2] fencing token, ARGV[3] keys per lock key, ARGV[4]
-- '1' when the lock has a lock-delay: each fence record then lives as long
-- as its delay record (fence.lua)
-- Returns "code sec usec" as fence.lua: 1 written, 0 the token does not
-- hold every key here, -2 this master lost its data.
-- now, nowms: this master's TIME (expiry.lua, which opens this script).
local function reply(code)
  return code .. ' ' .. now[1] .. ' ' .. now[2]
end
local stride = tonumber(ARGV[3])
local s = redis.call('MGET', KEYS[2], KEYS[3], KEYS[4])
if not (s[1] and s[2] and s[3]) then
  return reply(-2)
end
local locks = {}
for i = 5, #KEYS, stride do
  locks[#locks + 1] = KEYS[i]
end
local holders = redis.call('MGET', unpack(locks))
for j = 1, #holders do
  if holders[j] ~= ARGV[1] then
    return reply(0)
  end
end
if tonumber(s[3] or '0') < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[4], ARGV[2])
end
local record = ARGV[2] .. ' ' .. ARGV[1]
local delayed = stride == 3 and ARGV[4] == '1'
for i = 5, #KEYS, stride do
  local left = pttl(KEYS[i])
  if left > 0 then
    if delayed then
      -- As fence.lua: the record lives as long as this token's delay record.
      local rd = pttl(KEYS[i + 2])
      if rd > left and redis.call('GET', KEYS[i + 2]) == ARGV[1] then
        left = rd
      end
    end
    redis.call('SET', KEYS[i + 1], record, 'PXAT', at(left))
  end
end
return reply(1)
