-- includes/lock_countdown.lua: a claim's lock (setqueue:{Q}:lock:<token>) counts the claim's jobs
-- still held. count_down(lock, n): n of them are no longer held; the lock is dropped when none is
-- left. An expired lock stays gone: DECRBY would re-create it without a TTL.
local function count_down(lock, n)
  if redis.call('EXISTS', lock) == 1 and redis.call('DECRBY', lock, n) <= 0 then redis.call('DEL', lock) end
end
