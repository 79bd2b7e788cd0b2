-- includes/promote.lua: scheduled jobs (setqueue:{Q}:scheduled, a zset id -> due time in ms) become
-- claimable without any other process: claim and sweep call promote_due(G, scheduled, todos,
-- pending, priorities, seq, now, limit), which moves at most limit ids whose due time has come into
-- the line (todos, or their group's: see includes/groups.lua), in due-time order, at the back of
-- their priority's line (the priorities hash keeps a scheduled job's priority when it is not 0),
-- each with its due time as its pending time (so queue wait counts from when it became due).
-- Returns how many moved.
-- @include "groups"
local function promote_due(G, scheduled, todos, pending, priorities, seq, now, limit)
  local due = redis.call('ZRANGE', scheduled, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
  if #due == 0 then return 0 end
  local ids, scored = {}, {}
  for j = 1, #due, 2 do
    ids[#ids + 1] = due[j]
    scored[#scored + 1] = due[j + 1]
    scored[#scored + 1] = due[j]
  end
  local given = redis.call('HMGET', priorities, unpack(ids))
  local priority = {}
  for j = 1, #ids do priority[j] = tonumber(given[j]) or 0 end
  redis.call('ZREM', scheduled, unpack(ids))
  redis.call('HDEL', priorities, unpack(ids))
  join_back(G, todos, seq, ids, priority)
  redis.call('ZADD', pending, unpack(scored))
  return #ids
end
