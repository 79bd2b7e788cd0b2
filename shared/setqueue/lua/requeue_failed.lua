#!lua
-- requeue_failed.lua: an operator's retry of dead-lettered jobs: failed -> the back of their
-- priority's line, attempts reset, a history line each. Ids not in failed are left alone.
-- KEYS[1] request KEYS[2] todos KEYS[3] failed KEYS[4] pending KEYS[5] attempts KEYS[6] errors
-- KEYS[7] wake KEYS[8] finished KEYS[9] seq KEYS[10] priorities KEYS[11] history KEYS[12] limits
-- KEYS[13] grouped KEYS[14] group_lines KEYS[15] group_of KEYS[16] groups_ready
-- KEYS[17] enqueued (the first enqueue time, from finished: pending says now)
-- ARGV[1] record_ttl ms  ARGV[2] wake_cap  ARGV[3] who (host:pid)  ARGV[FIRST_ID..] the ids
-- Returns a JSON string: [number of ids moved back to todos]
local request, todos, failed, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local attempts, errors, wake, finished = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local seq, priorities, history = KEYS[9], KEYS[10], KEYS[11]
local limits, grouped, group_lines, group_of, groups_ready = KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16]
local enqueued = KEYS[17]
local record_ttl, wake_cap, who = ARGV[1], ARGV[2], ARGV[3]
local FIRST_ID = 4  -- ARGV[FIRST_ID..] the ids
-- @include "request_record"
-- @include "now_ms"
-- @include "wake"
-- @include "groups"
-- @include "history"

local cached = recorded(request)
if cached then return cached end

local now = now_ms()
local moved, ids, priority, scored, first = 0, {}, {}, {}, {}
for i = FIRST_ID, #ARGV do
  local id = ARGV[i]
  if redis.call('SREM', failed, id) == 1 then
    moved = moved + 1
    ids[moved] = id
    priority[moved] = tonumber(redis.call('HGET', priorities, id)) or 0
    scored[2 * moved - 1], scored[2 * moved] = now, id
    local record = redis.call('HGET', finished, id)  -- "<enqueued ms>:<finished ms>:<attempts>"
    local at = record and string.match(record, '^(%d+):')
    if at then
      first[#first + 1] = id
      first[#first + 1] = at
    end
    remember(history, id, now, 'requeued', who, 'from the dead letters')
  end
end
if moved > 0 then
  redis.call('HDEL', attempts, unpack(ids))
  redis.call('HDEL', errors, unpack(ids))
  redis.call('HDEL', finished, unpack(ids))
  redis.call('HDEL', priorities, unpack(ids))
  if #first > 0 then redis.call('HSET', enqueued, unpack(first)) end
  local G = {limits = limits, grouped = grouped, lines = group_lines, group_of = group_of, ready = groups_ready}
  join_back(G, todos, seq, ids, priority)
  redis.call('ZADD', pending, unpack(scored))
end

if moved > 0 then wake_workers(wake, 1, wake_cap) end

return record(request, cjson.encode({moved}), record_ttl)
