#!lua
-- enqueue.lua: add ids at the back of their priority's line (todos or their group's), in order, or
-- to scheduled if due later. A known id, by if_exists: "ignore", left alone; "replace", a waiting
-- job (todos, its group's line, scheduled) leaves its place and comes back as this call's (payload,
-- priority, due time, options, group: debounce), a running or ended one is left alone; "rerun", an
-- ended job (done, failed, cancelled) drops its end and runs again as a new job (its history keeps
-- the earlier run), a waiting or running one is left alone. With dependencies (dep_count not ""),
-- the new jobs wait in waiting instead, each with an entry in registering: register.lua then copies
-- their dependencies from the call's staging list (named by its generation) into dep_lines and
-- registers them with each, a page a call. Or, when the caller gives the links here (all of this
-- queue, a few), each new job registers with them in this call: no staging list, no registering
-- entry; an unknown dependency refuses the call, nothing written; one (or a new id) whose earlier
-- run is still being forgotten asks for the staged way, nothing written.
-- A job waiting for dependencies is not replaced.
-- KEYS[1] request KEYS[2] todos KEYS[3] in_progress KEYS[4] done KEYS[5] failed KEYS[6] pending
-- KEYS[7] payloads KEYS[8] wake KEYS[9] scheduled KEYS[10] seq KEYS[11] priorities KEYS[12] options
-- KEYS[13] cancelled KEYS[14] limits KEYS[15] grouped KEYS[16] group_lines KEYS[17] group_of
-- KEYS[18] groups_ready KEYS[19] enqueued (first enqueue time of a job due later)
-- KEYS[20] done_log KEYS[21] finished KEYS[22] results KEYS[23] result_expiry KEYS[24] errors
-- KEYS[25] attempts KEYS[26] progress KEYS[27] history KEYS[28] groups_resting KEYS[29] groups_full
-- KEYS[30] waiting KEYS[31] deps KEYS[32] linked KEYS[33] registering KEYS[34] dep_lines
-- KEYS[35] arrived KEYS[36] arrived_count KEYS[37] dependents KEYS[38] releasing
-- KEYS[39] release_outcomes KEYS[40] forgetting
-- ARGV[1] record_ttl ms  ARGV[2] wake_cap  ARGV[3] with_payloads ("1": each id is followed by its payload)
-- ARGV[4] delay_ms (by the Redis clock)  ARGV[5] at_ms (Unix ms; "": use delay_ms; past means now)
-- ARGV[6] priority (-10..10, higher first)  ARGV[7] job_options ("<max attempts>|<timeout ms>" or "")
-- ARGV[8] group ("": none)  ARGV[9] if_exists ("ignore", "replace" or "rerun")
-- ARGV[10] dep_count (dependencies of each job; "": none)  ARGV[11] dep_mode ("fail" or "run")
-- ARGV[12] generation (this call's: a link made for an earlier run of an id is ignored)
-- ARGV[13] given_links ("<queue> <id>" of this queue, one a line; "": none given here; given only with
-- if_exists "ignore", whose known ids write nothing before these are checked)
-- ARGV[14] ended channel ("failed\n<id>...": a job failed here by a dependency that had failed)
-- ARGV[FIRST_JOB..] id [payload], ...
-- Returns a JSON string: [number of ids added (a rerun counts, a replaced job does not)]; a call
-- that touched links (given here, or a rerun's) adds: jobs released, jobs failed, [ids whose
-- dependents are to be told (releasing)]; or, links given, ["unknown", <dependency id>] or ["staged"]
-- with nothing written.
local request, todos, in_progress, done, failed = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local pending, payloads, wake, scheduled = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local seq, priorities, options, cancelled = KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local limits, grouped, group_lines, group_of, groups_ready = KEYS[14], KEYS[15], KEYS[16], KEYS[17], KEYS[18]
local enqueued, done_log, finished, results, result_expiry = KEYS[19], KEYS[20], KEYS[21], KEYS[22], KEYS[23]
local errors, attempts, progress, history = KEYS[24], KEYS[25], KEYS[26], KEYS[27]
local groups_resting, groups_full = KEYS[28], KEYS[29]
local waiting, deps, linked, registering, dep_lines = KEYS[30], KEYS[31], KEYS[32], KEYS[33], KEYS[34]
local arrived, arrived_count, dependents, releasing = KEYS[35], KEYS[36], KEYS[37], KEYS[38]
local release_outcomes, forgetting = KEYS[39], KEYS[40]
local record_ttl, wake_cap, with_payloads = ARGV[1], ARGV[2], ARGV[3]
local delay_ms, at_ms, priority, job_options = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), ARGV[7]
local group, if_exists = ARGV[8], ARGV[9]
local dep_count, dep_mode, generation, given_links, ended = ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14]
local FIRST_JOB = 15  -- ARGV[FIRST_JOB..] the jobs: id, or id and payload when with_payloads is "1"
-- @include "request_record"
-- @include "now_ms"
-- @include "fields"
-- @include "wake"
-- @include "groups"
-- @include "known"
-- @include "history"
-- @include "links"

local cached = recorded(request)
if cached then return cached end
if given_links ~= '' and if_exists ~= 'ignore' then
  return redis.error_reply('links are given to enqueue.lua with if_exists "ignore" only')
end
-- The keys of includes/links.lua (W) and what its telling did (T): made only by a call that touches
-- links (a rerun forgets an earlier run's; links given here register), not by a plain enqueue.
local W, T = nil, nil
if given_links ~= '' or if_exists == 'rerun' then
  W = {
    linked = linked, releasing = releasing, release_outcomes = release_outcomes, dependents = dependents,
    dep_lines = dep_lines, arrived = arrived, arrived_count = arrived_count, deps = deps, forgetting = forgetting,
    waiting = waiting, todos = todos, in_progress = in_progress, done = done, cancelled = cancelled, seq = seq,
    pending = pending, enqueued = enqueued, scheduled = scheduled, priorities = priorities, wake = wake,
    failed = failed, errors = errors, finished = finished, history = history, grouped = grouped,
    group_of = group_of,
  }
  T = {wake_cap = wake_cap, ended = ended, failed_ids = {}, releases = {}, woken = 0}
end

local now = now_ms()
local width = 1
if with_payloads == '1' then width = 2 end
local jobs = read_fields(FIRST_JOB, width)
local ids, given = jobs[1], jobs[2]

local due = now + delay_ms
if at_ms ~= '' then due = tonumber(at_ms) end
local later = due > now

local G = {
  limits = limits, grouped = grouped, lines = group_lines, group_of = group_of, ready = groups_ready,
  resting = groups_resting, full = groups_full,
}

-- take_back: whether a known id comes back as this call's job, having left what if_exists lets go
-- of: its waiting place (replace) or its end (rerun). Either way it keeps its history.
local function take_back(id)
  if if_exists == 'replace' then
    local was = leave_line(G, todos, id)
    if redis.call('ZREM', scheduled, id) == 1 then was = true end
    if not was then return false end
    redis.call('ZREM', pending, id)
    remember(history, id, now, 'replaced', 'producer', 'by a later call while it waited')
  elseif if_exists == 'rerun' then
    local was = redis.call('SREM', done, id) == 1
    if redis.call('SREM', failed, id) == 1 then was = true end
    if redis.call('SREM', cancelled, id) == 1 then was = true end
    if not was then return false end
    redis.call('ZREM', done_log, id)
    redis.call('ZREM', result_expiry, id)
    redis.call('HDEL', finished, id)
    redis.call('HDEL', results, id)
    redis.call('HDEL', errors, id)
    redis.call('HDEL', attempts, id)
    redis.call('HDEL', progress, id)
    forget_links(W, {id}, now)  -- the dependencies of its earlier run
    remember(history, id, now, 'rerun', 'producer', 'enqueued again once it had ended')
  else
    return false
  end
  redis.call('HDEL', enqueued, id)
  redis.call('HDEL', priorities, id)
  redis.call('HDEL', payloads, id)
  redis.call('HDEL', options, id)
  redis.call('HDEL', group_of, id)
  return true
end

-- placed: every id this call places (new, replaced, rerun); added: how many of them are new jobs.
-- Known ids are looked up for the whole batch first: taking one back changes no other id's answer.
local added, placed, new_ids, scored, seen, paid = 0, 0, {}, {}, {}, {}
local known = known_of(ids, todos, in_progress, done, failed, scheduled, cancelled, grouped, waiting)
for j = 1, #ids do
  local id = ids[j]
  if not seen[id] then
    seen[id] = true
    local new = not known[j]
    local back = not new and if_exists ~= 'ignore' and take_back(id)
    if new or back then
      if new or if_exists == 'rerun' then added = added + 1 end
      placed = placed + 1
      new_ids[placed] = id
      scored[2 * placed - 1], scored[2 * placed] = due, id
      if given then
        paid[#paid + 1] = id
        paid[#paid + 1] = given[j]
      end
    end
  end
end

-- Links given here: each known, and none (nor a new id) still being forgotten, before anything is
-- written; each one's dependency id and what it stands at (standing_of) are kept for the registering
-- below.
local links, dependency_of, standing = {}, {}, {}
if given_links ~= '' then
  for link in string.gmatch(given_links, '[^\n]+') do links[#links + 1] = link end
  for n = 1, #links do
    local _, dependency = split_link(links[n])
    dependency_of[n], standing[n] = dependency, standing_of(W, dependency)
    if standing[n] == 'unknown' then return cjson.encode({'unknown', dependency}) end
  end
  for n = 1, #links do
    if standing[n] == 'busy' then return cjson.encode({'staged'}) end
  end
  for j = 1, placed do
    if in_forgetting(W, new_ids[j]) then return cjson.encode({'staged'}) end
  end
end

if #paid > 0 then redis.call('HSET', payloads, unpack(paid)) end

if placed > 0 and job_options ~= '' then
  local own = {}
  for j = 1, placed do own[2 * j - 1], own[2 * j] = new_ids[j], job_options end
  redis.call('HSET', options, unpack(own))
end

-- A job's group is kept from the start: a scheduled one joins its group's line when due.
local groups = {}
if placed > 0 then
  local kept = {}
  for j = 1, placed do
    groups[j] = group ~= '' and group
    kept[2 * j - 1], kept[2 * j] = new_ids[j], group
  end
  if group ~= '' then
    redis.call('HSET', group_of, unpack(kept))
    redis.call('HSET', limits, 'grouped', '1')
  end
end

if placed > 0 and dep_count ~= '' then
  -- Held by dependencies: waiting, until register.lua and the dependencies' ends release them.
  local header = dep_count .. '|' .. dep_mode .. '|' .. (later and string.format('%d', due) or '') .. '|'
    .. generation .. '|' .. priority
  -- enqueued: it joins the line later, at its release, which then writes nothing more of it.
  local since, headers, first, now_text = {}, {}, {}, string.format('%d', now)
  for j = 1, placed do
    since[2 * j - 1], since[2 * j] = now_text, new_ids[j]
    headers[2 * j - 1], headers[2 * j] = new_ids[j], header
    first[2 * j - 1], first[2 * j] = new_ids[j], now_text
  end
  redis.call('ZADD', waiting, unpack(since))
  redis.call('HSET', deps, unpack(headers))
  redis.call('HSET', enqueued, unpack(first))
  if #links == 0 then
    redis.call('ZADD', registering, unpack(since))
  else  -- registered here and now, as register.lua does a page
    local lines, arrivals = {}, {}
    local its_queue = split_link(links[1])
    for j = 1, placed do
      local id = new_ids[j]
      local dependent, sole = its_queue .. ' ' .. generation .. ' ' .. id, sole_entry(header, id)
      for n = 1, #links do
        lines[#lines + 1] = 0
        lines[#lines + 1] = dep_line(id, n - 1, links[n])
        if standing[n] then
          arrivals[#arrivals + 1] = {id, generation, links[n], standing[n]}
        else
          wait_on(W, dependency_of[n], dependent)
          note_sole(W, dependency_of[n], sole)
        end
      end
    end
    redis.call('ZADD', dep_lines, unpack(lines))
    arrive_all(W, G, T, arrivals, now)
    publish_failed(W, T)
  end
elseif placed > 0 then
  if later then
    redis.call('ZADD', scheduled, unpack(scored))
    local first = {}  -- pending will say when it joins the line; this, when it was enqueued
    for j = 1, placed do first[2 * j - 1], first[2 * j] = new_ids[j], now end
    redis.call('HSET', enqueued, unpack(first))
    if priority ~= 0 then
      local kept = {}
      for j = 1, placed do kept[2 * j - 1], kept[2 * j] = new_ids[j], priority end
      redis.call('HSET', priorities, unpack(kept))
    end
  else
    local now_text = string.format('%d', now)  -- printed once for the call, not per job
    for j = 1, placed do scored[2 * j - 1] = now_text end
    join_back(G, todos, seq, new_ids, priority, groups)
    redis.call('ZADD', pending, unpack(scored))
  end
end

-- Jobs due later wake one idle worker: its empty claim learns the due time.
if placed > 0 and dep_count == '' then
  if later then wake_workers(wake, 1, wake_cap) else wake_workers(wake, placed, wake_cap) end
end

if not T then return record(request, cjson.encode({added}), record_ttl) end
return record(request, cjson.encode({added, T.woken, #T.failed_ids, T.releases}), record_ttl)
