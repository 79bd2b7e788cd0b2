#!lua flags=allow-oom
-- renew.lua: extend the leases the caller still holds (owners names its token, the lock exists);
-- one PEXPIRE per claim. A gone lock is never re-created: the lease is lost, someone else may own
-- the id. A loss by cancellation says so. Idempotent: no request record.
-- KEYS[1] owners KEYS[2] cancelled KEYS[FIRST_LOCK..] each claim's lock, in token order
-- ARGV[1] lease_ms  ARGV[CLAIMS..] the claims (includes/claims.lua), then per lease: id, claim number
-- Returns an array: 1 extended, 0 lost, 2 lost because the job was cancelled
local owners, cancelled = KEYS[1], KEYS[2]
local FIRST_LOCK = 3  -- KEYS[FIRST_LOCK..] lock key of each claim
local lease_ms = ARGV[1]
local CLAIMS = 2  -- ARGV[CLAIMS..] the claims, then the leases: id, claim number
-- @include "claims"

local locks, tokens, ids, claim_of = read_claims(FIRST_LOCK, CLAIMS, 2)
local owner = redis.call('HMGET', owners, unpack(ids))

local extended, renewed = {}, {}
for j = 1, #ids do
  local c = claim_of[j]
  renewed[j] = 0
  if owner[j] == tokens[c] then
    if extended[c] == nil then extended[c] = redis.call('PEXPIRE', locks[c], lease_ms) end
    renewed[j] = extended[c]
  elseif redis.call('SISMEMBER', cancelled, ids[j]) == 1 then
    renewed[j] = 2
  end
end
return renewed
