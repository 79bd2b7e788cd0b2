-- includes/wake.lua: wake up to n idle workers (at most cap): LPUSH n tokens on the list they BLPOP,
-- LTRIM to cap.
local function wake_workers(wake, n, cap)
  cap = tonumber(cap)
  local signals = {}
  for i = 1, math.min(n, cap) do signals[i] = '1' end
  redis.call('LPUSH', wake, unpack(signals))
  redis.call('LTRIM', wake, 0, cap - 1)
end
