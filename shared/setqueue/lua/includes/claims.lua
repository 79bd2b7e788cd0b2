-- includes/claims.lua: the claims that ack, fail, renew and sweep are given (built in scripts.py).
-- KEYS[first_lock..] the lock key setqueue:{Q}:lock:<token> of each claim, in the order of the tokens
-- ARGV[first] T, the number of claims;  the next T args: their tokens
-- then one record of width args per lease: id, claim number (1..T; sweep: 0 for no owner), ...
-- read_claims(first_lock, first, width) returns locks[c], tokens[c], then one table per field of
-- the records: ids[j], the claim number of lease j (a number), then the rest of its fields.
-- @include "fields"
local function read_claims(first_lock, first, width)
  local locks, tokens = {}, {}
  for i = first_lock, #KEYS do locks[#locks + 1] = KEYS[i] end
  local last_token = first + tonumber(ARGV[first])
  for i = first + 1, last_token do tokens[#tokens + 1] = ARGV[i] end
  local fields, count = read_fields(last_token + 1, width)
  local claim_of = fields[2]
  for j = 1, count do claim_of[j] = tonumber(claim_of[j]) end
  return locks, tokens, unpack(fields)
end
