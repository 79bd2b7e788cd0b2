-- includes/known.lua: is_known: whether the queue knows id in any state (todos: todos or grouped).
local function is_known(id, todos, in_progress, done, failed, scheduled, cancelled, grouped)
  return redis.call('ZSCORE', todos, id) or redis.call('ZSCORE', in_progress, id)
    or redis.call('SISMEMBER', done, id) == 1 or redis.call('SISMEMBER', failed, id) == 1
    or redis.call('ZSCORE', scheduled, id) or redis.call('SISMEMBER', cancelled, id) == 1
    or redis.call('ZSCORE', grouped, id)
end
