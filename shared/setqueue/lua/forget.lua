#!lua flags=allow-oom
-- forget.lua: drop the entries (dependencies: dep_lines and their arrived fields; dependents) of
-- jobs the queue forgot with more than FORGET_INLINE of either (includes/links.lua: forget_links
-- put them in forgetting), at most page entries a call across the ids given. A job with none left
-- leaves forgetting. Idempotent: an id no longer in forgetting is skipped.
-- allow-oom: dropping entries frees memory; it is never refused for lack of it.
-- KEYS[1] forgetting KEYS[2] dep_lines KEYS[3] arrived KEYS[4] dependents
-- ARGV[1] page (the most entries a call drops)
-- ARGV[FIRST_ID..] ids
-- Returns a JSON string: the ids given that are still in forgetting
local forgetting, dep_lines, arrived, dependents = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local page = tonumber(ARGV[1])
local FIRST_ID = 2  -- ARGV[FIRST_ID..] the ids
-- @include "fields"
-- @include "links"

local L = {forgetting = forgetting, dep_lines = dep_lines, arrived = arrived, dependents = dependents}
local ids = read_fields(FIRST_ID, 1)[1]
local left = {}
for j = 1, #ids do
  local id = ids[j]
  if redis.call('ZSCORE', forgetting, id) then
    local done = false
    if page > 0 then
      local dropped
      done, dropped = forget_page(L, id, page)
      page = page - dropped
    end
    if not done then left[#left + 1] = id end
  end
end
return cjson.encode(left)
