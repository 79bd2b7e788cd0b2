#!lua flags=allow-oom
-- renew.lua: extend the leases the caller still holds. A lease holds while owners names its
-- token and its claim's lock exists; one PEXPIRE extends every job of a claim. A lock that is
-- gone is never re-created: the lease is lost and the cleaner or another worker may own the id.
-- A lease lost because its job was cancelled says so, for the worker to stop running it.
-- Renewing twice is harmless, so no request record is needed.
--
-- KEYS[1] owners       (hash: id -> lease token of its current claim)
-- KEYS[2] cancelled    (set: cancelled ids)
-- KEYS[FIRST_LOCK..]   lock key setqueue:{Q}:lock:<token> of each claim, in the order of the tokens
-- ARGV[1] lease_ms     lease duration in ms
-- ARGV[CLAIMS..]       T, the number of claims; their T tokens; then id, claim number (1..T) of each
--                      lease (see includes/claims.lua)
-- Returns an array: 1 where the lease was extended, 0 where it is lost, 2 where it is lost because
-- the job was cancelled
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
