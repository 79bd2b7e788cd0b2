#!lua
-- enqueue.lua: add ids at the back of their priority's line (todos or their group's), in order, or
-- to scheduled if due later; a known id is left alone.
-- KEYS[1] request KEYS[2] todos KEYS[3] in_progress KEYS[4] done KEYS[5] failed KEYS[6] pending
-- KEYS[7] payloads KEYS[8] wake KEYS[9] scheduled KEYS[10] seq KEYS[11] priorities KEYS[12] options
-- KEYS[13] cancelled KEYS[14] limits KEYS[15] grouped KEYS[16] group_lines KEYS[17] group_of
-- KEYS[18] groups_ready KEYS[19] enqueued (first enqueue time of a job scheduled at once)
-- ARGV[1] record_ttl ms  ARGV[2] wake_cap  ARGV[3] with_payloads ("1": each id is followed by its payload)
-- ARGV[4] delay_ms (by the Redis clock)  ARGV[5] at_ms (Unix ms; "": use delay_ms; past means now)
-- ARGV[6] priority (-10..10, higher first)  ARGV[7] job_options ("<max attempts>|<timeout ms>" or "")
-- ARGV[8] group ("": none)  ARGV[FIRST_JOB..] id [payload], ...
-- Returns a JSON string: [number of ids added]
local request, todos, in_progress, done, failed = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local pending, payloads, wake, scheduled = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local seq, priorities, options, cancelled = KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local limits, grouped, group_lines, group_of, groups_ready = KEYS[14], KEYS[15], KEYS[16], KEYS[17], KEYS[18]
local enqueued = KEYS[19]
local record_ttl, wake_cap, with_payloads = ARGV[1], ARGV[2], ARGV[3]
local delay_ms, at_ms, priority, job_options = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), ARGV[7]
local group = ARGV[8]
local FIRST_JOB = 9  -- ARGV[FIRST_JOB..] the jobs: id, or id and payload when with_payloads is "1"
-- @include "request_record"
-- @include "now_ms"
-- @include "fields"
-- @include "wake"
-- @include "groups"
-- @include "known"

local cached = recorded(request)
if cached then return cached end

local now = now_ms()
local width = 1
if with_payloads == '1' then width = 2 end
local jobs = read_fields(FIRST_JOB, width)
local ids, given = jobs[1], jobs[2]

local due = now + delay_ms
if at_ms ~= '' then due = tonumber(at_ms) end
local later = due > now

local added, new_ids, scored, seen = 0, {}, {}, {}
for j = 1, #ids do
  local id = ids[j]
  if not seen[id] and not is_known(id, todos, in_progress, done, failed, scheduled, cancelled, grouped) then
    seen[id] = true
    added = added + 1
    new_ids[added] = id
    scored[2 * added - 1], scored[2 * added] = due, id
    if given then redis.call('HSET', payloads, id, given[j]) end
  end
end

if added > 0 and job_options ~= '' then
  local own = {}
  for j = 1, added do own[2 * j - 1], own[2 * j] = new_ids[j], job_options end
  redis.call('HSET', options, unpack(own))
end

-- A job's group is kept from the start: a scheduled one joins its group's line when due.
local groups = {}
if added > 0 then
  local kept = {}
  for j = 1, added do
    groups[j] = group ~= '' and group
    kept[2 * j - 1], kept[2 * j] = new_ids[j], group
  end
  if group ~= '' then
    redis.call('HSET', group_of, unpack(kept))
    redis.call('HSET', limits, 'grouped', '1')
  end
end

if added > 0 then
  if later then
    redis.call('ZADD', scheduled, unpack(scored))
    local first = {}  -- pending will say when it joins the line; this, when it was enqueued
    for j = 1, added do first[2 * j - 1], first[2 * j] = new_ids[j], now end
    redis.call('HSET', enqueued, unpack(first))
    if priority ~= 0 then
      local kept = {}
      for j = 1, added do kept[2 * j - 1], kept[2 * j] = new_ids[j], priority end
      redis.call('HSET', priorities, unpack(kept))
    end
  else
    for j = 1, added do scored[2 * j - 1] = now end
    local G = {limits = limits, grouped = grouped, lines = group_lines, group_of = group_of, ready = groups_ready}
    join_back(G, todos, seq, new_ids, priority, groups)
    redis.call('ZADD', pending, unpack(scored))
  end
end

-- Jobs due later wake one idle worker: its empty claim learns the due time.
if added > 0 then
  if later then wake_workers(wake, 1, wake_cap) else wake_workers(wake, added, wake_cap) end
end

return record(request, cjson.encode({added}), record_ttl)
