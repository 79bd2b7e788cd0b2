-- includes/flow.lua: rate limits as GCRA, a token bucket kept as one number: the theoretical
-- arrival time (tat, ms) of the next start. A rate "<count> <period ms> <burst>" lets a job start
-- every interval = period / count ms on average and up to burst at once: at time now,
-- burst - (max(tat, now) - now) / interval starts are allowed, and taking n moves tat on by n
-- intervals. A tat in the past is a full bucket, the same as none at all.
--
-- read_rate(spec) -> interval ms, burst; nil for none ("" or nil)
local function read_rate(spec)
  if not spec or spec == '' then return nil end
  local count, period, burst = string.match(spec, '^(%d+) (%d+) (%d+)$')
  return tonumber(period) / tonumber(count), tonumber(burst)
end

-- allowance(tat, interval, burst, now) -> the starts allowed now, and the tat to move on from
local function allowance(tat, interval, burst, now)
  local from = math.max(tonumber(tat) or now, now)
  -- The small slack absorbs the rounding of interval (a float), never a whole start.
  return math.max(0, math.floor(burst - (from - now) / interval + 1e-6)), from
end

-- ready_at(from, interval, burst, n) -> the time (ms) at which n starts are allowed
local function ready_at(from, interval, burst, n)
  return math.ceil(from - (burst - math.min(n, burst)) * interval)
end
