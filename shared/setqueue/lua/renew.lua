-- renew.lua: extend the leases the caller still holds. A lease holds while owners names its
-- token and its claim's lock exists; one PEXPIRE extends every job of a claim. A lock that is
-- gone is never re-created: the lease is lost and the cleaner or another worker may own the id.
-- Renewing twice is harmless, so no request record is needed.
--
-- KEYS[1] owners   (hash: id -> lease token of its current claim)
-- KEYS[2..T+1] lock key setqueue:{Q}:lock:<token> of each claim, in the order of the tokens
-- ARGV[1] lease duration in ms
-- ARGV[2] T, the number of claims;  ARGV[3..T+2] their tokens
-- ARGV[T+3..] id, claim number (1..T) of each lease
-- Returns an array: 1 where the lease was extended, 0 where it is lost
local claims = tonumber(ARGV[2])
local ids, claim_of = {}, {}
for i = claims + 3, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
  claim_of[#claim_of + 1] = tonumber(ARGV[i + 1])
end
local owner = redis.call('HMGET', KEYS[1], unpack(ids))

local extended, renewed = {}, {}
for j = 1, #ids do
  local c = claim_of[j]
  renewed[j] = 0
  if owner[j] == ARGV[c + 2] then
    if extended[c] == nil then extended[c] = redis.call('PEXPIRE', KEYS[c + 1], ARGV[1]) end
    renewed[j] = extended[c]
  end
end
return renewed
