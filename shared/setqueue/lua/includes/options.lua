-- includes/options.lua: a job's own options (options: id -> "<max attempts>|<timeout ms>" [then
-- "|<traceparent>"], empty parts: the default). attempts_allowed: claims before dead-lettering.
local function attempts_allowed(options, id, default)
  local own = redis.call('HGET', options, id)
  if own then
    local most = tonumber(string.match(own, '^(%d+)|'))
    if most then return most end
  end
  return default
end
