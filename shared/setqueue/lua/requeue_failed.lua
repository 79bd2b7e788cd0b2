-- requeue_failed.lua: an operator's retry of dead-lettered jobs: failed -> todos with a fresh
-- attempt count. Ids not in failed are left alone.
--
-- KEYS[1] request record  setqueue:{Q}:req:<request id>
-- KEYS[2] todos   KEYS[3] failed   KEYS[4] pending   KEYS[5] attempts   KEYS[6] errors   KEYS[7] wake
-- ARGV[1] request record TTL in ms
-- ARGV[2] wake list cap
-- ARGV[3..] ids
-- Returns a JSON string: [number of ids moved back to todos]
local cached = redis.call('GET', KEYS[1])
if cached then return cached end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local moved = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call('SMOVE', KEYS[3], KEYS[2], id) == 1 then
    redis.call('HDEL', KEYS[5], id)
    redis.call('HDEL', KEYS[6], id)
    redis.call('ZADD', KEYS[4], now, id)
    moved = moved + 1
  end
end

if moved > 0 then
  redis.call('LPUSH', KEYS[7], '1')
  redis.call('LTRIM', KEYS[7], 0, tonumber(ARGV[2]) - 1)
end

local result = cjson.encode({moved})
redis.call('SET', KEYS[1], result, 'PX', ARGV[1])
return result
