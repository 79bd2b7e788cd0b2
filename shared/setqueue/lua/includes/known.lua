-- includes/known.lua: is_known: whether the queue knows id in a state a periodic run can be in
-- (todos: todos or grouped; its ids are never enqueued with dependencies, so never waiting).
local function is_known(id, todos, in_progress, done, failed, scheduled, cancelled, grouped)
  return redis.call('ZSCORE', todos, id) or redis.call('ZSCORE', in_progress, id)
    or redis.call('SISMEMBER', done, id) == 1 or redis.call('SISMEMBER', failed, id) == 1
    or redis.call('ZSCORE', scheduled, id) or redis.call('SISMEMBER', cancelled, id) == 1
    or redis.call('ZSCORE', grouped, id)
end

-- known_of: for each of ids, whether the queue knows it in any state (waiting too), with one
-- command per state for the whole batch (ZMSCORE, SMISMEMBER) instead of seven per id; a state
-- whose key does not exist is not asked.
local function known_of(ids, todos, in_progress, done, failed, scheduled, cancelled, grouped, waiting)
  local known = {}
  for j = 1, #ids do known[j] = false end
  if #ids == 0 then return known end
  local sorted_sets = {todos, in_progress, scheduled, grouped, waiting}
  for s = 1, #sorted_sets do
    if redis.call('EXISTS', sorted_sets[s]) == 1 then
      local scores = redis.call('ZMSCORE', sorted_sets[s], unpack(ids))
      for j = 1, #ids do
        if scores[j] then known[j] = true end
      end
    end
  end
  local sets = {done, failed, cancelled}
  for s = 1, #sets do
    if redis.call('EXISTS', sets[s]) == 1 then
      local members = redis.call('SMISMEMBER', sets[s], unpack(ids))
      for j = 1, #ids do
        if members[j] == 1 then known[j] = true end
      end
    end
  end
  return known
end
