-- includes/request_record.lua: a mutating script keeps its result under its request key for ttl_ms,
-- so a call redis-py resends after a connection error returns the first result, not a second run.
local function recorded(request)
  return redis.call('GET', request)
end

local function record(request, result, ttl_ms)
  redis.call('SET', request, result, 'PX', ttl_ms)
  return result
end
