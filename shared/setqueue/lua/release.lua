#!lua flags=allow-oom
-- release.lua: tell ended jobs' dependents how each ended (includes/links.lua), at most page of them
-- a call across the jobs given: those of this queue arrive here and now (in one batch), those of
-- other queues are returned, for the caller to bring there (arrive.lua). A job whose dependents are
-- all read, with none elsewhere, ends its releasing entry; so does one given with after "end", once
-- the caller has told the rest. A job the queue forgot while it was being told (deleted, trimmed:
-- its release_outcomes entry says " forgotten") drops its dependents then. Idempotent: resent or
-- redone by a cleaner, a dependent counts each job once.
-- KEYS[1] waiting KEYS[2] deps KEYS[3] linked KEYS[4] releasing KEYS[5] release_outcomes
-- KEYS[6] todos KEYS[7] in_progress KEYS[8] done KEYS[9] failed KEYS[10] cancelled KEYS[11] scheduled
-- KEYS[12] seq KEYS[13] pending KEYS[14] enqueued KEYS[15] priorities KEYS[16] wake KEYS[17] errors
-- KEYS[18] finished KEYS[19] history KEYS[20] limits KEYS[21] grouped KEYS[22] group_lines
-- KEYS[23] group_of KEYS[24] groups_ready KEYS[25] groups_resting KEYS[26] groups_full
-- KEYS[27] dependents KEYS[28] arrived KEYS[29] arrived_count KEYS[30] dep_lines KEYS[31] forgetting
-- ARGV[1] queue (this queue's name, as links name it)  ARGV[2] wake_cap
-- ARGV[3] ended channel ("failed\n<id>...")  ARGV[4] page (the most dependents a call tells)
-- ARGV[JOBS..] per ended job: its id, and after: the last dependent told ("" first; "end": finish)
-- Returns a JSON string: [per job given, [id, the last dependent told, whether more may follow it,
-- how it ended ("": not releasing), [its dependents of other queues read now, "<queue> <generation>
-- <id>"]], [ids whose own dependents are to be told (releasing)], jobs released, jobs failed]
local waiting, deps, linked, releasing, release_outcomes = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local todos, in_progress, done, failed, cancelled = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local scheduled, seq, pending, enqueued, priorities = KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15]
local wake, errors, finished, history = KEYS[16], KEYS[17], KEYS[18], KEYS[19]
local limits, grouped, group_lines, group_of, groups_ready = KEYS[20], KEYS[21], KEYS[22], KEYS[23], KEYS[24]
local groups_resting, groups_full, dependents, arrived, arrived_count = KEYS[25], KEYS[26], KEYS[27], KEYS[28], KEYS[29]
local dep_lines, forgetting = KEYS[30], KEYS[31]
local queue, wake_cap, ended, page = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local JOBS = 5  -- ARGV[JOBS..] the ended jobs: id, after
-- @include "now_ms"
-- @include "fields"
-- @include "links"

local W = {
  linked = linked, releasing = releasing, release_outcomes = release_outcomes,
  dependents = dependents, arrived = arrived, arrived_count = arrived_count,
  waiting = waiting, deps = deps, todos = todos, in_progress = in_progress, done = done,
  cancelled = cancelled, seq = seq, pending = pending, enqueued = enqueued, scheduled = scheduled,
  priorities = priorities, wake = wake, failed = failed, errors = errors,
  finished = finished, history = history,
  grouped = grouped, group_of = group_of, dep_lines = dep_lines, forgetting = forgetting,
}
local G = {
  limits = limits, grouped = grouped, lines = group_lines, group_of = group_of, ready = groups_ready,
  resting = groups_resting, full = groups_full,
}
local T = {wake_cap = wake_cap, ended = ended, failed_ids = {}, releases = {}, woken = 0}

-- finish: ended jobs whose dependents are all told leave releasing (one command each for the batch);
-- a forgotten job's dependents go now (or, many, by forgetting).
local now = now_ms()
local finished_ids = {}
local function finish(id, outcome)
  finished_ids[#finished_ids + 1] = id
  if string.find(outcome, ' forgotten', 1, true) then forget_dependents(W, id, now) end
end

local jobs = read_fields(JOBS, 2)
local ids, afters = jobs[1], jobs[2]
local outcomes = redis.call('HMGET', release_outcomes, unpack(ids))
local replies, arrivals, told = {}, {}, 0
for j = 1, #ids do
  local id, after, stored = ids[j], afters[j], outcomes[j]
  local outcome = stored and string.match(stored, '^(%S+)') or ''
  local last, more, elsewhere = '', false, {}
  if stored and after == 'end' then
    finish(id, stored)
  elseif stored and told >= page then
    last, more = after, true  -- no room left in this call: the caller asks again from here
  elseif stored then
    local low, high = lex_range(id)
    if after ~= '' then low = '(' .. id .. '\0' .. after end
    local room = page - told
    local members = redis.call('ZRANGE', dependents, low, high, 'BYLEX', 'LIMIT', '0', string.format('%d', room))
    told = told + #members
    local link = queue .. ' ' .. id
    for m = 1, #members do
      local dependent = string.sub(members[m], #id + 2)
      local its_queue, rest = split_link(dependent)
      if its_queue == queue then
        local generation, dependent_id = split_link(rest)
        arrivals[#arrivals + 1] = {dependent_id, generation, link, outcome}
      else
        elsewhere[#elsewhere + 1] = dependent
      end
    end
    if #members == room then
      last, more = string.sub(members[#members], #id + 2), true
    elseif #elsewhere == 0 then
      finish(id, stored)
    end
  end
  replies[j] = {id, last, more, outcome, elsewhere}
end
if #finished_ids > 0 then
  redis.call('ZREM', releasing, unpack(finished_ids))
  redis.call('HDEL', release_outcomes, unpack(finished_ids))
end
arrive_all(W, G, T, arrivals, now)
publish_failed(W, T)
return cjson.encode({replies, T.releases, T.woken, #T.failed_ids})
