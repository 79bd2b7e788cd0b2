#!lua flags=allow-oom
-- depend.lua: a job of another queue waits for jobs of this one (includes/links.lua): each that has
-- not ended is told to tell it when it ends (its dependents set); each that ended, or is unknown
-- (trimmed by retention, or deleted), answers how, for the caller to bring to the dependent
-- (arrive.lua). Idempotent (a sorted-set member; linked says "*", a dependent of another queue).
-- KEYS[1] linked KEYS[2] todos KEYS[3] in_progress KEYS[4] done KEYS[5] failed KEYS[6] cancelled
-- KEYS[7] scheduled KEYS[8] grouped KEYS[9] waiting KEYS[10] dependents KEYS[11] forgetting
-- KEYS[12] release_outcomes
-- ARGV[1] dependent ("<queue> <generation> <id>")
-- ARGV[FIRST_ID..] ids of this queue it depends on
-- Returns a JSON string: per id, how it ended ("done", "failed", "cancelled", "unknown"), "busy" (an
-- earlier run of it is still being forgotten: nothing written, ask again once that is done) or ""
-- (registered)
local linked, todos, in_progress, done, failed = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local cancelled, scheduled, grouped, waiting, dependents = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local forgetting, release_outcomes = KEYS[11], KEYS[12]
local dependent = ARGV[1]
local FIRST_ID = 2  -- ARGV[FIRST_ID..] the dependencies
-- @include "fields"
-- @include "links"

local W = {
  linked = linked, dependents = dependents, todos = todos, in_progress = in_progress, done = done, failed = failed,
  cancelled = cancelled, scheduled = scheduled, waiting = waiting, grouped = grouped, forgetting = forgetting,
  release_outcomes = release_outcomes,
}
local ids = read_fields(FIRST_ID, 1)[1]
local answers = {}
for j = 1, #ids do
  answers[j] = register_with(W, ids[j], dependent) or ''
  -- A dependent of another queue: its release reads dependents ("*", never a sole one named).
  if answers[j] == '' then redis.call('HSET', linked, ids[j], '*') end
end
return cjson.encode(answers)
