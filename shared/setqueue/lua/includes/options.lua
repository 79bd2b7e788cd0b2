-- includes/options.lua: a job's own options, given at enqueue and kept in the options hash
-- (setqueue:{Q}:options, id -> "<max attempts>|<timeout ms>", either part empty for the default
-- of the queue, resp. of the worker, then "|<traceparent>" when the enqueue ran in a traced span)
-- from enqueue until the job is acked or deleted. Lua reads the leading number only.
-- attempts_allowed(options, id, default): how many claims the job gets before it is dead-lettered.
local function attempts_allowed(options, id, default)
  local own = redis.call('HGET', options, id)
  if own then
    local most = tonumber(string.match(own, '^(%d+)|'))
    if most then return most end
  end
  return default
end
