-- includes/request_record.lua: the request record of a mutating script. The script keeps its result
-- under its request key (setqueue:{Q}:req:<request id>) for a while, so that a call redis-py resends
-- after a connection error returns the first result instead of applying again.
-- recorded(request): the result an earlier run of this call kept, or false.
-- record(request, result, ttl_ms): keep the result for ttl_ms; returns it.
local function recorded(request)
  return redis.call('GET', request)
end

local function record(request, result, ttl_ms)
  redis.call('SET', request, result, 'PX', ttl_ms)
  return result
end
