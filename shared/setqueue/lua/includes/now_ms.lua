-- includes/now_ms.lua: the Redis clock in whole ms (the queue's only clock).
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end
