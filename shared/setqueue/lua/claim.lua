#!lua flags=allow-oom
-- claim.lua: move up to N jobs from the front of the line to in_progress under one lock (named by
-- the token, holding the count still held, TTL = lease) in one step: no cleaner sees a claimed id
-- without its lock. Limits lives here so no worker can race it: pause, the rate
-- (includes/limits.lua), groups taking turns (includes/groups.lua). First, the releases acks recorded
-- join the line (includes/released.lua), so a dependent is claimable once its dependency's ack
-- returns. Keys: docs/reference.md#key-layout.
-- KEYS[1] request (record under the token: a resend returns the same leases) KEYS[2] todos
-- KEYS[3] in_progress KEYS[4] pending KEYS[5] attempts KEYS[6] payloads KEYS[7] owners
-- KEYS[8] lock KEYS[9] scheduled KEYS[10] wake KEYS[11] seq KEYS[12] priorities KEYS[13] options
-- KEYS[14] limits KEYS[15] grouped KEYS[16] group_lines KEYS[17] group_of KEYS[18] groups_ready
-- KEYS[19] groups_resting KEYS[20] groups_full KEYS[21] group_running KEYS[22] group_limits
-- KEYS[23] group_buckets KEYS[24] released KEYS[25] waiting KEYS[26] deps KEYS[27] arrived
-- ARGV[1] record_ttl ms  ARGV[2] token  ARGV[3] lease_ms  ARGV[4] most ids
-- ARGV[5] promote (most due ids to promote)  ARGV[6] wake_cap  ARGV[7] queue (its name, as links name it)
-- Returns now ms; when (ms) more could be claimed if short (-1: wait to be woken); what held jobs
-- back ("", "paused", "rate", "group"); 1 if a rate or group limits exist, else 0; then per id in
-- line order: id, attempt, enqueue ms (as pending holds it; -1 unknown), rank (as in_progress holds
-- it: the client works out the priority), payload, own options (nil: none). A resend returns the
-- first call's ids (one a line in the record) this claim still owns.
-- Per job, no number is parsed or printed on the happy path: a rank and an enqueue time go on as the
-- strings Redis gave (printing a float costs more than the command that moves the job).
local request, todos, in_progress, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local attempts, payloads, owners, lock, scheduled, wake = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local seq, priorities, options, limits = KEYS[11], KEYS[12], KEYS[13], KEYS[14]
local grouped, group_lines, group_of, groups_ready = KEYS[15], KEYS[16], KEYS[17], KEYS[18]
local groups_resting, groups_full, group_running, group_limits = KEYS[19], KEYS[20], KEYS[21], KEYS[22]
local group_buckets, released, waiting, deps, arrived = KEYS[23], KEYS[24], KEYS[25], KEYS[26], KEYS[27]
local record_ttl, token, lease_ms, most = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local promote, wake_cap, queue = tonumber(ARGV[5]), ARGV[6], ARGV[7]
-- @include "request_record"
-- @include "now_ms"
-- @include "promote"
-- @include "wake"
-- @include "limits"
-- @include "released"

local G = {
  limits = limits, grouped = grouped, lines = group_lines, group_of = group_of,
  ready = groups_ready, resting = groups_resting, full = groups_full, running = group_running,
}
local now = now_ms()
local FOREVER = math.huge
local FIRST_ATTEMPT = '1'

local paused, rate, tat, has_groups, default_concurrency, default_rate = unpack(redis.call(  -- one read when unlimited
  'HMGET', limits, 'paused', 'rate', 'tat', 'grouped', 'group_concurrency', 'group_rate'))
-- With any limit, workers claim only for free slots: a job in a worker's buffer would spend the
-- rate or a group's slot. (Groups alone do not: a buffer holds at most CLAIM_BATCH.)
local has_limits = rate or default_concurrency or default_rate
  or (has_groups and redis.call('EXISTS', group_limits) == 1)
local limited = has_limits and 1 or 0

-- claim_groups: an equal share from each group at the front of the line (ungrouped jobs as
-- NO_GROUP), then further groups while room is left, up to LOOK_AHEAD more than want. Returns
-- whether a group limit held jobs back, and when a resting group may start (now: groups unvisited).
local LOOK_AHEAD = 100
-- A turn takes up to TURN jobs of a group: a claim of 100 over 1,000 groups visits 25, not 100.
local TURN = 4
local function claim_groups(want, ids, ranks)
  local rested = redis.call('ZRANGE', groups_resting, '-inf', now, 'BYSCORE', 'LIMIT', 0, 100)
  if #rested > 0 then
    redis.call('ZREM', groups_resting, unpack(rested))
    take_turns(G, rested)
  end
  if redis.call('ZSCORE', groups_ready, NO_GROUP) == false and redis.call('EXISTS', todos) == 1 then
    take_turns(G, {NO_GROUP})
  end
  local soonest = FOREVER
  local held = false
  -- Without limits, read no group's limits or rate; group_running is kept anyway for a later limit.
  local has_own = redis.call('EXISTS', group_limits) == 1
  local counts = has_own or default_concurrency
  local rates = has_own or default_rate
  local visited, again, full, resting, counted, bucketed, taken, taken_ids = {}, {}, {}, {}, {}, {}, {}, {}
  -- In pages of the line of groups (it changes only after the loop).
  while #ids < want and #visited < want + LOOK_AHEAD do
    local front = redis.call('ZRANGE', groups_ready, #visited, #visited + math.ceil((want - #ids) / TURN) - 1)
    if #front == 0 then break end
    local own = has_own and redis.call('HMGET', group_limits, unpack(front)) or {}
    local running = redis.call('HMGET', group_running, unpack(front))
    local buckets = rates and redis.call('ZMSCORE', group_buckets, unpack(front)) or {}
    local share = math.ceil((want - #ids) / #front)
    for j, group in ipairs(front) do
      local left = want - #ids
      if left <= 0 then break end  -- the groups not reached keep their place at the front
      visited[#visited + 1] = group
      if group == NO_GROUP then
        local front_jobs = redis.call('ZPOPMIN', todos, math.min(share, left))
        for i = 1, #front_jobs, 2 do
          ids[#ids + 1] = front_jobs[i]
          ranks[#ranks + 1] = tonumber(front_jobs[i + 1])
        end
        if redis.call('EXISTS', todos) == 1 then again[#again + 1] = group end
      else
        local concurrency, rate_spec = default_concurrency, default_rate
        if own[j] then
          local c, r = string.match(own[j], '^(%d*)|(.*)$')
          if c ~= '' then concurrency = c end
          if r ~= '' then rate_spec = r end
        end
        concurrency = tonumber(concurrency)
        local in_progress_now = tonumber(running[j]) or 0
        local room = math.min(share, left)
        if concurrency then room = math.min(room, concurrency - in_progress_now) end
        local interval, burst = read_rate(rate_spec)
        local allowed, from
        if interval then
          allowed, from = allowance(buckets[j], interval, burst, now)
          room = math.min(room, allowed)
        end
        local took, more = 0, true
        if room > 0 then
          local low, high = line_range(group)
          local members = redis.call('ZRANGE', group_lines, low, high, 'BYLEX', 'LIMIT', '0', string.format('%d', room + 1))
          took = math.min(room, #members)
          more = #members > took
          for i = 1, took do
            local id = member_id(members[i], group)
            ids[#ids + 1] = id
            ranks[#ranks + 1] = rank_text(member_rank(members[i], group))
            taken[#taken + 1] = members[i]
            taken_ids[#taken_ids + 1] = id
          end
          if took > 0 then
            counted[#counted + 1] = group
            counted[#counted + 1] = in_progress_now + took
          end
          if interval and took > 0 then
            bucketed[#bucketed + 1] = from + took * interval
            bucketed[#bucketed + 1] = group
            allowed = allowed - took
          end
        end
        -- Nothing left: leaves the line; held by a limit: full (until a job ends) or resting
        -- (until its rate allows one); else to the back.
        if not more then
          -- it leaves the line of groups
        elseif concurrency and in_progress_now + took >= concurrency then
          full[#full + 1] = group
          held = true
        elseif interval and allowed < 1 then
          local at = ready_at(from + took * interval, interval, burst, 1)
          resting[#resting + 1] = at
          resting[#resting + 1] = group
          soonest = math.min(soonest, at)
          held = true
        else
          again[#again + 1] = group
        end
      end
    end
  end
  -- Room left and groups unvisited: claim again at once.
  if #ids < want and redis.call('ZCARD', groups_ready) > #visited then soonest = now end
  if #visited == 0 then
    local first = redis.call('ZRANGE', groups_resting, 0, 0, 'WITHSCORES')
    if #first == 2 then soonest = math.min(soonest, tonumber(first[2])) end
    return held, soonest
  end
  -- Those going on take a new turn at the back (ZADD moves them); the others leave.
  local going_on, leaving = {}, {}
  for _, group in ipairs(again) do going_on[group] = true end
  for _, group in ipairs(visited) do
    if not going_on[group] then leaving[#leaving + 1] = group end
  end
  if #leaving > 0 then redis.call('ZREM', groups_ready, unpack(leaving)) end
  take_turns(G, again)
  if #full > 0 then redis.call('SADD', groups_full, unpack(full)) end
  if #resting > 0 then redis.call('ZADD', groups_resting, unpack(resting)) end
  if #counted > 0 then redis.call('HSET', group_running, unpack(counted)) end
  if #bucketed > 0 then redis.call('ZADD', group_buckets, unpack(bucketed)) end
  if #taken > 0 then
    redis.call('ZREM', group_lines, unpack(taken))
    redis.call('ZREM', grouped, unpack(taken_ids))
  end
  if #ids < want then
    local first = redis.call('ZRANGE', groups_resting, 0, 0, 'WITHSCORES')
    if #first == 2 then soonest = math.min(soonest, tonumber(first[2])) end
  end
  return held, soonest
end

local ids, tries, ranks = {}, {}, {}
local held, soonest = '', FOREVER
local listed = recorded(request)
if listed then
  -- A resend: the first call's ids this claim still owns.
  local first = {}
  for id in string.gmatch(listed, '[^\n]+') do first[#first + 1] = id end
  if #first > 0 then
    local owner = redis.call('HMGET', owners, unpack(first))
    for j = 1, #first do
      if owner[j] == token then ids[#ids + 1] = first[j] end
    end
  end
  if #ids > 0 then
    tries = redis.call('HMGET', attempts, unpack(ids))
    ranks = redis.call('ZMSCORE', in_progress, unpack(ids))
  end
else
  local W = {
    released = released, waiting = waiting, deps = deps, arrived = arrived, todos = todos, seq = seq,
    pending = pending, group_of = group_of,
  }
  drain_released(W, G, queue, now)
  local promoted = promote_due(G, scheduled, todos, pending, priorities, seq, now, promote)
  local want = most
  local interval, burst, allowed, from
  if paused then
    want, held = 0, 'paused'
  elseif rate then
    interval, burst = read_rate(rate)
    allowed, from = allowance(tat, interval, burst, now)
    want = math.min(want, allowed)
  end
  if want > 0 then
    if has_groups and redis.call('EXISTS', groups_ready, groups_resting) > 0 then
      local group_held, group_soonest = claim_groups(want, ids, ranks)
      if group_held and #ids < want then held = 'group' end
      soonest = math.min(soonest, group_soonest)
    else
      local front = redis.call('ZPOPMIN', todos, want)
      for j = 1, #front / 2 do
        ids[j] = front[2 * j - 1]
        ranks[j] = front[2 * j]  -- a string: in_progress gets it as it is
      end
      -- Short while every waiting group has its concurrency in progress.
      if #ids < want and has_groups and redis.call('EXISTS', groups_full) == 1 then held = 'group' end
    end
  end
  -- The rate capped this claim and more was waiting: say when it allows a whole claim (or burst).
  if interval then
    if #ids > 0 then redis.call('HSET', limits, 'tat', from + #ids * interval) end
    if want < most and #ids == want and redis.call('EXISTS', todos, grouped) > 0 then
      if held == '' then held = 'rate' end
      soonest = math.min(soonest, ready_at(from + #ids * interval, interval, burst, most))
    end
  end
  if promoted > #ids and not paused then wake_workers(wake, promoted - #ids, wake_cap) end
  -- One command per key for the batch: a Lua call costs more than its work on one id.
  if #ids > 0 then
    local ranked = {}
    for j = 1, #ids do ranked[2 * j - 1], ranked[2 * j] = ranks[j], ids[j] end
    redis.call('ZADD', in_progress, unpack(ranked))
    local before = redis.call('HMGET', attempts, unpack(ids))
    local counts, owned = {}, {}
    for j = 1, #ids do
      local count = FIRST_ATTEMPT  -- most claims are a job's first: nothing to parse or print
      if before[j] then count = tostring(tonumber(before[j]) + 1) end
      tries[j] = count
      counts[2 * j - 1], counts[2 * j] = ids[j], count
      owned[2 * j - 1], owned[2 * j] = ids[j], token
    end
    redis.call('HSET', attempts, unpack(counts))
    redis.call('HSET', owners, unpack(owned))
    redis.call('SET', lock, #ids, 'PX', lease_ms)
  end
  record(request, table.concat(ids, '\n'), record_ttl)
end

-- Next chance if short: the next scheduled job, a resting group or the rate's next batch.
local next_at = -1
if #ids < most and held ~= 'paused' then
  local first = redis.call('ZRANGE', scheduled, 0, 0, 'WITHSCORES')
  if #first == 2 then soonest = math.min(soonest, tonumber(first[2])) end
  if soonest < FOREVER then next_at = soonest end
end
local reply = {now, next_at, held, limited}
if #ids > 0 then
  local enqueued = redis.call('ZMSCORE', pending, unpack(ids))
  -- Payloads and own options only where the queue has any (no arguments, no nils, for an absent key).
  local payload, own = {}, {}
  if redis.call('EXISTS', payloads) == 1 then payload = redis.call('HMGET', payloads, unpack(ids)) end
  if redis.call('EXISTS', options) == 1 then own = redis.call('HMGET', options, unpack(ids)) end
  local at = #reply  -- a count, not #reply: Lua's # searches the table each time
  for j = 1, #ids do
    reply[at + 1] = ids[j]
    reply[at + 2] = tries[j]
    reply[at + 3] = enqueued[j] or -1
    reply[at + 4] = ranks[j] or 0
    reply[at + 5] = payload[j] or false  -- false: a nil reply (a nil would end the table)
    reply[at + 6] = own[j] or false
    at = at + 6
  end
end
return reply
