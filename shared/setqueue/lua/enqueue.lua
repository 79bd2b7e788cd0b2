-- enqueue.lua: add job ids to todos; an id the queue already knows is left alone.
--
-- KEYS[1] request   request record setqueue:{Q}:req:<request id>  (holds this call's result for a
--                   while, so a command resent after a connection error returns it instead of applying again)
-- KEYS[2] todos     KEYS[3] in_progress   KEYS[4] done   KEYS[5] failed
-- KEYS[6] pending   (zset: id -> enqueue time in ms, for ids in todos or in_progress)
-- KEYS[7] payloads  (hash: id -> payload)
-- KEYS[8] wake      (list that idle workers block on)
-- ARGV[1] record_ttl     request record TTL in ms
-- ARGV[2] wake_cap       wake list cap (how many idle workers one call may wake)
-- ARGV[3] with_payloads  "1" when every id is followed by its payload, "0" when no payloads are given
-- ARGV[FIRST_JOB..]      id [payload], id [payload], ...
-- Returns a JSON string: [number of ids added]
local request, todos, in_progress, done, failed = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local pending, payloads, wake = KEYS[6], KEYS[7], KEYS[8]
local record_ttl, wake_cap, with_payloads = ARGV[1], ARGV[2], ARGV[3]
local FIRST_JOB = 4  -- ARGV[FIRST_JOB..] the jobs: id, or id and payload when with_payloads is "1"
-- @include "request_record"
-- @include "now_ms"
-- @include "fields"
-- @include "wake"

local cached = recorded(request)
if cached then return cached end

local now = now_ms()
local width = 1
if with_payloads == '1' then width = 2 end
local jobs = read_fields(FIRST_JOB, width)
local ids, given = jobs[1], jobs[2]

local added = 0
for j = 1, #ids do
  local id = ids[j]
  if redis.call('SISMEMBER', in_progress, id) == 0 and redis.call('SISMEMBER', done, id) == 0
      and redis.call('SISMEMBER', failed, id) == 0 and redis.call('SADD', todos, id) == 1 then
    added = added + 1
    redis.call('ZADD', pending, now, id)
    if given then redis.call('HSET', payloads, id, given[j]) end
  end
end

if added > 0 then wake_workers(wake, added, wake_cap) end

return record(request, cjson.encode({added}), record_ttl)
