-- includes/lock_countdown.lua: a claim's lock counts its jobs still held; count_down drops it at
-- none. An expired lock stays gone: DECRBY would re-create it without a TTL.
local function count_down(lock, n)
  if redis.call('EXISTS', lock) == 1 and redis.call('DECRBY', lock, n) <= 0 then redis.call('DEL', lock) end
end
