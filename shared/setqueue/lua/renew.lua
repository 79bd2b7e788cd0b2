-- renew.lua: extend leases whose lock still holds the caller's token. A lock that is gone is
-- never re-created: the lease is lost and the cleaner or another worker may own the id now.
-- Renewing twice is harmless, so no request record is needed.
--
-- KEYS[1..n] lock key setqueue:{Q}:lock:<id> of each lease
-- ARGV[1] lease duration in ms
-- ARGV[2..n+1] the lease token of each lease, in KEYS order
-- Returns an array: 1 where the lease was extended, 0 where it is lost
local renewed = {}
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i + 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
