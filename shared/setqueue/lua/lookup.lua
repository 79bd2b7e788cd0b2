#!lua flags=no-writes
-- lookup.lua: the state of each of a batch of ids (keys.STATES), for naming dependencies: an
-- enqueue refuses one that no state holds before it writes anything, and inspect shows the state
-- of each job linked to the one it shows.
-- KEYS[1] todos KEYS[2] in_progress KEYS[3] done KEYS[4] failed KEYS[5] scheduled KEYS[6] cancelled
-- KEYS[7] grouped KEYS[8] waiting
-- ARGV[FIRST_ID..] the ids
-- Returns an array: per id its state ("todos" for grouped too), or "" when none holds it
local todos, in_progress, done, failed = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local scheduled, cancelled, grouped, waiting = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local FIRST_ID = 1  -- ARGV[FIRST_ID..] the ids
-- @include "fields"

local ids = read_fields(FIRST_ID, 1)[1]
local states = {}
for j = 1, #ids do states[j] = '' end
local sorted_sets = {{todos, 'todos'}, {grouped, 'todos'}, {in_progress, 'in_progress'},
  {scheduled, 'scheduled'}, {waiting, 'waiting'}}
for s = 1, #sorted_sets do
  local key, state = sorted_sets[s][1], sorted_sets[s][2]
  if #ids > 0 and redis.call('EXISTS', key) == 1 then
    local scores = redis.call('ZMSCORE', key, unpack(ids))
    for j = 1, #ids do
      if scores[j] then states[j] = state end
    end
  end
end
local sets = {{done, 'done'}, {failed, 'failed'}, {cancelled, 'cancelled'}}
for s = 1, #sets do
  local key, state = sets[s][1], sets[s][2]
  if #ids > 0 and redis.call('EXISTS', key) == 1 then
    local members = redis.call('SMISMEMBER', key, unpack(ids))
    for j = 1, #ids do
      if members[j] == 1 then states[j] = state end
    end
  end
end
return states
