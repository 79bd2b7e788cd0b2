-- delete.lua: remove one job from the queue entirely, whatever state it is in, with its lock
-- and bookkeeping. A worker still running it will find its lease stale.
--
-- KEYS[1] request record  setqueue:{Q}:req:<request id>
-- KEYS[2] todos   KEYS[3] in_progress   KEYS[4] done   KEYS[5] failed
-- KEYS[6] pending   KEYS[7] attempts   KEYS[8] payloads   KEYS[9] errors   KEYS[10] done_log
-- KEYS[11] lock key of the id   KEYS[12] owners
-- ARGV[1] request record TTL in ms
-- ARGV[2] the id
-- Returns a JSON string: [the state the id was in: "todos", "in_progress", "done", "failed", or false]
local cached = redis.call('GET', KEYS[1])
if cached then return cached end

local id = ARGV[2]
local names = {'todos', 'in_progress', 'done', 'failed'}
local state = false
for i = 1, 4 do
  if redis.call('SREM', KEYS[i + 1], id) == 1 then state = names[i] end
end
redis.call('ZREM', KEYS[6], id)
redis.call('HDEL', KEYS[7], id)
redis.call('HDEL', KEYS[8], id)
redis.call('HDEL', KEYS[9], id)
redis.call('ZREM', KEYS[10], id)
redis.call('DEL', KEYS[11])
redis.call('HDEL', KEYS[12], id)

local result = cjson.encode({state})
redis.call('SET', KEYS[1], result, 'PX', ARGV[1])
return result
