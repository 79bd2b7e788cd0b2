-- includes/history.lua: a job's off-happy-path transitions (history: id -> lines
-- "<ms>\t<kind>\t<worker>\t<detail>", the last HISTORY_LINES). remember adds one (detail cut to
-- 200 chars, tabs and breaks to spaces). holder(token): the worker a token ends with ("@host:pid").
local HISTORY_LINES = 10

local function holder(token)
  return string.match(token or '', '@(.+)$') or '?'
end

local function remember(history, id, now, kind, who, detail)
  local text = string.gsub(string.sub(detail or '', 1, 200), '[\t\r\n]', ' ')
  local line = now .. '\t' .. kind .. '\t' .. who .. '\t' .. text
  local old = redis.call('HGET', history, id)
  if old then
    local lines = {}
    for kept in string.gmatch(old, '[^\n]+') do lines[#lines + 1] = kept end
    local first = math.max(1, #lines - HISTORY_LINES + 2)
    line = table.concat(lines, '\n', first) .. '\n' .. line
  end
  redis.call('HSET', history, id, line)
end
