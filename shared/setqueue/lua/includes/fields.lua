-- includes/fields.lua: read_fields(first, width): ARGV[first..] as records of width args; returns
-- fields[f][j] (field f of record j) and the record count, without index arithmetic on ARGV.
local function read_fields(first, width)
  local fields = {}
  for f = 1, width do fields[f] = {} end
  local f, j = width, 0
  for i = first, #ARGV do
    if f < width then f = f + 1 else f, j = 1, j + 1 end
    fields[f][j] = ARGV[i]
  end
  return fields, j
end
