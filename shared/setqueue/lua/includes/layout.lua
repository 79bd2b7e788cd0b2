-- includes/layout.lua: adopt a queue written by setqueue before 0.3, where todos and in_progress were
-- plain sets (or a set that a producer SADDed into an absent todos key). Every script that writes
-- todos or in_progress calls adopt_old_layout first, before any other write, so a WRONGTYPE can
-- never stop a script halfway. A set todos is renamed to legacy_todos (O(1)), which claim and sweep
-- drain into todos a batch at a time (drain_legacy); a set in_progress (small: the jobs claimed at
-- that moment) becomes a zset at once. Old jobs get the first place of priority 0: they were queued
-- before any job of the new layout, so they come first, in no order among themselves.
-- @include "rank"
local LEGACY_RANK = rank_of(0, 0)

local function adopt_old_layout(todos, in_progress, legacy_todos)
  if redis.call('TYPE', todos)['ok'] == 'set' then
    if redis.call('EXISTS', legacy_todos) == 1 then
      redis.call('SUNIONSTORE', legacy_todos, legacy_todos, todos)
      redis.call('DEL', todos)
    else
      redis.call('RENAME', todos, legacy_todos)
    end
  end
  if redis.call('TYPE', in_progress)['ok'] == 'set' then
    local ids = redis.call('SMEMBERS', in_progress)
    redis.call('DEL', in_progress)
    for s = 1, #ids, 1000 do
      local ranked = {}
      for j = s, math.min(s + 999, #ids) do
        ranked[#ranked + 1] = LEGACY_RANK
        ranked[#ranked + 1] = ids[j]
      end
      redis.call('ZADD', in_progress, unpack(ranked))
    end
  end
end

-- drain_legacy(legacy_todos, todos, limit): move up to limit ids of legacy_todos into todos. Returns how many.
local function drain_legacy(legacy_todos, todos, limit)
  if redis.call('EXISTS', legacy_todos) == 0 then return 0 end
  local ids = redis.call('SPOP', legacy_todos, limit)
  local ranked = {}
  for j = 1, #ids do
    ranked[2 * j - 1] = LEGACY_RANK
    ranked[2 * j] = ids[j]
  end
  if #ids > 0 then redis.call('ZADD', todos, unpack(ranked)) end
  return #ids
end
