-- includes/wake.lua: wake_workers(wake, n, cap) wakes up to n idle workers (at most cap): one LPUSH
-- of that many tokens onto the wake list they BLPOP, then LTRIM keeps the list within cap.
local function wake_workers(wake, n, cap)
  cap = tonumber(cap)
  local signals = {}
  for i = 1, math.min(n, cap) do signals[i] = '1' end
  redis.call('LPUSH', wake, unpack(signals))
  redis.call('LTRIM', wake, 0, cap - 1)
end
