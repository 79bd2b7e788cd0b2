#!lua
-- periodic.lua: the cleaner's periodic jobs. periodic keeps each schedule's latest slot (ms); a run
-- is created only for a later slot, in the step that records it, so once however many cleaners
-- call. A schedule seen first gets its slot recorded, no run; a known id is not added again.
-- KEYS[1] request KEYS[2] todos KEYS[3] in_progress KEYS[4] done KEYS[5] failed KEYS[6] scheduled
-- KEYS[7] pending KEYS[8] payloads KEYS[9] wake KEYS[10] periodic KEYS[11] seq KEYS[12] cancelled
-- KEYS[13] grouped
-- ARGV[1] record_ttl ms  ARGV[2] wake_cap  ARGV[FIRST_RUN..] per schedule: name, slot_ms, id, payload ("" none)
-- Returns a JSON string: [[names whose run was created], [names seen for the first time]]
local request, todos, in_progress, done, failed = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local scheduled, pending, payloads, wake, periodic = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local seq, cancelled, grouped = KEYS[11], KEYS[12], KEYS[13]
local record_ttl, wake_cap = ARGV[1], ARGV[2]
local FIRST_RUN = 3  -- ARGV[FIRST_RUN..] 4 args per schedule
-- @include "request_record"
-- @include "now_ms"
-- @include "fields"
-- @include "wake"
-- @include "rank"
-- @include "known"

local cached = recorded(request)
if cached then return cached end

local now = now_ms()
local runs, count = read_fields(FIRST_RUN, 4)
local names, slots, ids, given = runs[1], runs[2], runs[3], runs[4]

local created, first_seen = {}, {}
for j = 1, count do
  local name, slot, id = names[j], tonumber(slots[j]), ids[j]
  local last = redis.call('HGET', periodic, name)
  if not last then
    redis.call('HSET', periodic, name, slot)
    first_seen[#first_seen + 1] = name
  elseif slot > tonumber(last) then
    redis.call('HSET', periodic, name, slot)
    if not is_known(id, todos, in_progress, done, failed, scheduled, cancelled, grouped) then
      join_line(todos, seq, {id}, 0)
      redis.call('ZADD', pending, now, id)
      if given[j] ~= '' then redis.call('HSET', payloads, id, given[j]) end
      created[#created + 1] = name
    end
  end
end

if #created > 0 then wake_workers(wake, #created, wake_cap) end

-- cjson writes an empty table as {}: Python reads either as no names.
return record(request, cjson.encode({created, first_seen}), record_ttl)
