#!lua flags=allow-oom
-- release.lua: tell a page of an ended job's dependents how it ended (includes/links.lua): those of
-- this queue arrive here and now; those of other queues are returned, for the caller to bring there
-- (arrive.lua). The last page, with none of those, ends the job's releasing entry; so does a call
-- with after "end", once the caller has told the rest. A job no longer known then (deleted, or
-- trimmed while it was being told) drops its dependents set too. Idempotent: resent or redone by a
-- cleaner, a dependent counts the job once.
-- KEYS[1] waiting KEYS[2] deps KEYS[3] linked KEYS[4] releasing KEYS[5] release_outcomes
-- KEYS[6] todos KEYS[7] in_progress KEYS[8] done KEYS[9] failed KEYS[10] cancelled KEYS[11] scheduled
-- KEYS[12] seq KEYS[13] pending KEYS[14] enqueued KEYS[15] priorities KEYS[16] wake KEYS[17] errors
-- KEYS[18] finished KEYS[19] history KEYS[20] limits KEYS[21] grouped KEYS[22] group_lines
-- KEYS[23] group_of KEYS[24] groups_ready KEYS[25] groups_resting KEYS[26] groups_full
-- KEYS[27] dependents KEYS[28] arrived KEYS[29] arrived_count
-- ARGV[1] queue (this queue's name, as links name it)  ARGV[2] wake_cap
-- ARGV[3] ended channel ("failed\n<id>...")  ARGV[4] id (the ended job)
-- ARGV[5] after (the last dependent told, "" first; "end": finish)  ARGV[6] page (most per call)
-- Returns a JSON string: [the last dependent told ("": no more pages), how it ended ("": not releasing),
-- [dependents of other queues in this page, "<queue> <generation> <id>"], [ids whose own dependents
-- are to be told (releasing)]]
local waiting, deps, linked, releasing, release_outcomes = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local todos, in_progress, done, failed, cancelled = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local scheduled, seq, pending, enqueued, priorities = KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15]
local wake, errors, finished, history = KEYS[16], KEYS[17], KEYS[18], KEYS[19]
local limits, grouped, group_lines, group_of, groups_ready = KEYS[20], KEYS[21], KEYS[22], KEYS[23], KEYS[24]
local groups_resting, groups_full, dependents, arrived, arrived_count = KEYS[25], KEYS[26], KEYS[27], KEYS[28], KEYS[29]
local queue, wake_cap, ended, id, after, page = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
-- @include "now_ms"
-- @include "links"

local W = {
  linked = linked, releasing = releasing, release_outcomes = release_outcomes,
  dependents = dependents, arrived = arrived, arrived_count = arrived_count,
  waiting = waiting, deps = deps, todos = todos, in_progress = in_progress, done = done,
  cancelled = cancelled, seq = seq, pending = pending, enqueued = enqueued, scheduled = scheduled,
  priorities = priorities, wake = wake, failed = failed, errors = errors,
  finished = finished, history = history,
  grouped = grouped, group_of = group_of,
}
local G = {
  limits = limits, grouped = grouped, lines = group_lines, group_of = group_of, ready = groups_ready,
  resting = groups_resting, full = groups_full,
}
local T = {wake_cap = wake_cap, ended = ended, failed_ids = {}, releases = {}, woken = 0}

-- finish: the job's dependents are all told.
local function finish()
  redis.call('ZREM', releasing, id)
  redis.call('HDEL', release_outcomes, id)
  -- A job still known keeps its dependents for inspect; a forgotten one drops them now.
  if state_of_link(W, id) == 'unknown' then
    local low, high = lex_range(id)
    redis.call('ZREMRANGEBYLEX', dependents, low, high)
    redis.call('SREM', linked, id)
  end
end

local outcome = redis.call('HGET', release_outcomes, id)
if not outcome then return cjson.encode({'', '', {}, {}}) end
if after == 'end' then
  finish()
  return cjson.encode({'', outcome, {}, {}})
end
local now = now_ms()
local low, high = lex_range(id)
if after ~= '' then low = '(' .. id .. '\0' .. after end
local members = redis.call('ZRANGE', dependents, low, high, 'BYLEX', 'LIMIT', 0, page)
local link = queue .. ' ' .. id
local elsewhere, last = {}, ''
for j = 1, #members do
  local dependent = string.sub(members[j], #id + 2)
  last = dependent
  local its_queue, rest = split_link(dependent)
  if its_queue == queue then
    local generation, dependent_id = split_link(rest)
    arrive(W, G, T, dependent_id, generation, link, outcome, now)
  else
    elsewhere[#elsewhere + 1] = dependent
  end
end
publish_failed(W, T)
if #members < page then
  last = ''
  if #elsewhere == 0 then finish() end
end
return cjson.encode({last, outcome, elsewhere, T.releases})
