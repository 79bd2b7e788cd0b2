-- delete.lua: remove one job from the queue entirely, whatever state it is in, with its
-- bookkeeping; its claim's lock counts one job less. A worker still running it will find its
-- lease stale.
--
-- KEYS[1] request record  setqueue:{Q}:req:<request id>
-- KEYS[2] todos   KEYS[3] in_progress   KEYS[4] done   KEYS[5] failed
-- KEYS[6] pending   KEYS[7] attempts   KEYS[8] payloads   KEYS[9] errors   KEYS[10] done_log
-- KEYS[11] lock key setqueue:{Q}:lock:<token> of the claim that owned the id when the caller
--          read owners (any lock key of the queue if none did)   KEYS[12] owners
-- ARGV[1] request record TTL in ms
-- ARGV[2] the id
-- ARGV[3] the token of that claim ("" if none)
-- Returns a JSON string: [the state the id was in: "todos", "in_progress", "done", "failed", or false]
local cached = redis.call('GET', KEYS[1])
if cached then return cached end

local id = ARGV[2]
-- The lock counts the claim's jobs still held: one less, if that claim still owns this one.
if ARGV[3] ~= '' and redis.call('HGET', KEYS[12], id) == ARGV[3] and redis.call('EXISTS', KEYS[11]) == 1
    and redis.call('DECRBY', KEYS[11], 1) <= 0 then
  redis.call('DEL', KEYS[11])
end
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
redis.call('HDEL', KEYS[12], id)

local result = cjson.encode({state})
redis.call('SET', KEYS[1], result, 'PX', ARGV[1])
return result
