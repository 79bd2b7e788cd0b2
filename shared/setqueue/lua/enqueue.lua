-- enqueue.lua: add job ids to todos; an id the queue already knows is left alone.
--
-- KEYS[1] request record  setqueue:{Q}:req:<request id>  (holds this call's result for a while,
--         so a command resent after a connection error returns it instead of applying again)
-- KEYS[2] todos        KEYS[3] in_progress   KEYS[4] done       KEYS[5] failed
-- KEYS[6] pending      (zset: id -> enqueue time in ms, for ids in todos or in_progress)
-- KEYS[7] payloads     (hash: id -> payload)
-- KEYS[8] wake         (list that idle workers block on)
-- ARGV[1] request record TTL in ms
-- ARGV[2] wake list cap (how many idle workers one call may wake)
-- ARGV[3] "1" when every id is followed by its payload, "0" when no payloads are given
-- ARGV[4..] id [payload], id [payload], ...
-- Returns a JSON string: [number of ids added]
local cached = redis.call('GET', KEYS[1])
if cached then return cached end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local step = 1
if ARGV[3] == '1' then step = 2 end

local added = 0
for i = 4, #ARGV, step do
  local id = ARGV[i]
  if redis.call('SISMEMBER', KEYS[3], id) == 0 and redis.call('SISMEMBER', KEYS[4], id) == 0
      and redis.call('SISMEMBER', KEYS[5], id) == 0 and redis.call('SADD', KEYS[2], id) == 1 then
    added = added + 1
    redis.call('ZADD', KEYS[6], now, id)
    if step == 2 then redis.call('HSET', KEYS[7], id, ARGV[i + 1]) end
  end
end

if added > 0 then
  local cap = tonumber(ARGV[2])
  local tokens = {}
  for i = 1, math.min(added, cap) do tokens[i] = '1' end
  redis.call('LPUSH', KEYS[8], unpack(tokens))
  redis.call('LTRIM', KEYS[8], 0, cap - 1)
end

local result = cjson.encode({added})
redis.call('SET', KEYS[1], result, 'PX', ARGV[1])
return result
