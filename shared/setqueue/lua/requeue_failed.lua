-- requeue_failed.lua: an operator's retry of dead-lettered jobs: failed -> todos with a fresh
-- attempt count. Ids not in failed are left alone.
--
-- KEYS[1] request      request record setqueue:{Q}:req:<request id>
-- KEYS[2] todos   KEYS[3] failed   KEYS[4] pending   KEYS[5] attempts   KEYS[6] errors   KEYS[7] wake
-- KEYS[8] finished     (hash: id -> "<enqueued ms>:<finished ms>:<attempts>" of ids in done or failed)
-- ARGV[1] record_ttl   request record TTL in ms
-- ARGV[2] wake_cap     wake list cap
-- ARGV[FIRST_ID..]     the ids
-- Returns a JSON string: [number of ids moved back to todos]
local request, todos, failed, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local attempts, errors, wake, finished = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local record_ttl, wake_cap = ARGV[1], ARGV[2]
local FIRST_ID = 3  -- ARGV[FIRST_ID..] the ids
-- @include "request_record"
-- @include "now_ms"
-- @include "wake"

local cached = recorded(request)
if cached then return cached end

local now = now_ms()
local moved = 0
for i = FIRST_ID, #ARGV do
  local id = ARGV[i]
  if redis.call('SMOVE', failed, todos, id) == 1 then
    redis.call('HDEL', attempts, id)
    redis.call('HDEL', errors, id)
    redis.call('HDEL', finished, id)
    redis.call('ZADD', pending, now, id)
    moved = moved + 1
  end
end

if moved > 0 then wake_workers(wake, 1, wake_cap) end

return record(request, cjson.encode({moved}), record_ttl)
