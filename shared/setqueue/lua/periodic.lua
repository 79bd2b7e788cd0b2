#!lua
-- periodic.lua: the cleaner's periodic jobs. For each schedule, the run of its latest slot is created
-- at most once, however many cleaners call this at the same moment: the periodic hash keeps, per
-- schedule, the slot (ms) of its latest run created, and a run is created only for a later slot, in
-- the same step that records it. A schedule seen for the first time gets its slot recorded and no run
-- (its first run is its next slot). A run whose id the queue already knows (in any of the six
-- states) is not added again.
--
-- KEYS[1] request    request record setqueue:{Q}:req:<request id>
-- KEYS[2] todos   KEYS[3] in_progress   KEYS[4] done   KEYS[5] failed
-- KEYS[6] scheduled  (zset: id -> due time in ms)
-- KEYS[7] pending    (zset: id -> enqueue time in ms, for ids in todos or in_progress)
-- KEYS[8] payloads   (hash: id -> payload)
-- KEYS[9] wake       (list that idle workers block on)
-- KEYS[10] periodic  (hash: schedule name -> slot time in ms of its latest run created)
-- KEYS[11] seq       (counter: the last place given in the line)
-- KEYS[12] cancelled (set: cancelled ids, known like the others)
-- KEYS[13] grouped   (zset: id -> rank of waiting jobs with a group, known like the others)
-- ARGV[1] record_ttl   request record TTL in ms
-- ARGV[2] wake_cap     wake list cap
-- ARGV[FIRST_RUN..]    name, slot_ms, id, payload ("" for none): the latest slot of each schedule
-- Returns a JSON string: [[names whose run was created], [names seen for the first time]]
local request, todos, in_progress, done, failed = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local scheduled, pending, payloads, wake, periodic = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local seq, cancelled, grouped = KEYS[11], KEYS[12], KEYS[13]
local record_ttl, wake_cap = ARGV[1], ARGV[2]
local FIRST_RUN = 3  -- ARGV[FIRST_RUN..] one record of 4 args per schedule: name, slot_ms, id, payload
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

-- cjson writes an empty table as {}: the Python side reads either as no names.
return record(request, cjson.encode({created, first_seen}), record_ttl)
