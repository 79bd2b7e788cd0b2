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
-- in_sorted_set, in_set: ids that key holds are in state (a key that does not exist is not asked).
local function in_sorted_set(key, state)
  if #ids == 0 or redis.call('EXISTS', key) == 0 then return end
  local scores = redis.call('ZMSCORE', key, unpack(ids))
  for j = 1, #ids do
    if scores[j] then states[j] = state end
  end
end

local function in_set(key, state)
  if #ids == 0 or redis.call('EXISTS', key) == 0 then return end
  local members = redis.call('SMISMEMBER', key, unpack(ids))
  for j = 1, #ids do
    if members[j] == 1 then states[j] = state end
  end
end

in_sorted_set(todos, 'todos')
in_sorted_set(grouped, 'todos')
in_sorted_set(in_progress, 'in_progress')
in_sorted_set(scheduled, 'scheduled')
in_sorted_set(waiting, 'waiting')
in_set(done, 'done')
in_set(failed, 'failed')
in_set(cancelled, 'cancelled')
return states
