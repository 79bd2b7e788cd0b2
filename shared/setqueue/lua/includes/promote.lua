-- includes/promote.lua: promote_due moves up to limit due ids from scheduled to the back of their
-- priority's line (todos or their group's), in due order, with the due time as pending time (queue
-- wait counts from then). No other process is needed: claim and sweep call it. Returns the count.
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
