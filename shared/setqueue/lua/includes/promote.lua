-- includes/promote.lua: scheduled jobs (setqueue:{Q}:scheduled, a zset id -> due time in ms) become
-- claimable without any other process: claim and sweep call promote_due(scheduled, todos, pending,
-- now, limit), which moves at most limit ids whose due time has come into todos, each with its due
-- time as its pending time (so queue wait counts from when it became due). Returns how many moved.
local function promote_due(scheduled, todos, pending, now, limit)
  local due = redis.call('ZRANGE', scheduled, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
  if #due == 0 then return 0 end
  local ids, scored = {}, {}
  for j = 1, #due, 2 do
    ids[#ids + 1] = due[j]
    scored[#scored + 1] = due[j + 1]
    scored[#scored + 1] = due[j]
  end
  redis.call('ZREM', scheduled, unpack(ids))
  redis.call('SADD', todos, unpack(ids))
  redis.call('ZADD', pending, unpack(scored))
  return #ids
end
