-- includes/claims.lua: the claims given to ack, fail, renew and sweep (built in scripts.py):
-- KEYS[first_lock..] each claim's lock in token order; ARGV[first] T, then T tokens, then per
-- lease a record of width args: id, claim number (1..T; sweep: 0 for no owner), ...
-- read_claims returns locks, tokens, then one table per record field (claim numbers as numbers).
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
