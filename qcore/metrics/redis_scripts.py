"""The Redis store's server-side scripts (Lua, run with EVALSHA).

Each one is a single atomic step, so a snapshot's diff and every tier it feeds can never
drift apart.

A bucket is one hash field whose value is comma-separated numbers: completed, failed,
age (seconds; empty when none waited), then the wait and run histograms (``SLOTS``
each); a zero is written as nothing and trailing empties are dropped, so a quiet bucket
costs a few bytes. ``VALUE_FIELDS`` is that width.
"""

from __future__ import annotations

from qcore.metrics.histogram import SLOTS

__all__ = [
    "AGES",
    "LEASES",
    "PURGE_FIELDS",
    "PURGE_HASHES",
    "RELEASE",
    "SNAPSHOT",
    "VALUE_FIELDS",
]

#: numbers in one bucket's value: completed, failed, age, then both histograms
VALUE_FIELDS = 3 + 2 * SLOTS

# decode(value) -> numbers (age at index 3 kept apart as t.age); encode(numbers) -> value
_CODEC = f"""
local WIDTH = {VALUE_FIELDS}
local function decode(s)
  local t = {{}}
  for i = 1, WIDTH do t[i] = 0 end
  if s then
    local i = 1
    for part in string.gmatch(s .. ',', '([^,]*),') do
      if part ~= '' then
        if i == 3 then t.age = tonumber(part) else t[i] = tonumber(part) end
      end
      i = i + 1
    end
  end
  return t
end
local function encode(t)
  local parts, last = {{}}, 0
  for i = 1, WIDTH do
    local p = ''
    if i == 3 then
      if t.age then p = tostring(t.age) end
    elseif t[i] ~= 0 then
      p = string.format('%d', t[i])
    end
    parts[i] = p
    if p ~= '' then last = i end
  end
  return table.concat(parts, ',', 1, last)
end
local function expire(first_ttl)
  for i = 2, #KEYS do
    local ttl = tonumber(ARGV[first_ttl + i - 2])
    if ttl > 0 then
      redis.call('EXPIRE', KEYS[i], ttl)
    elseif ttl < 0 then
      redis.call('DEL', KEYS[i])
    end
  end
end
"""

# Add a snapshot of one queue: per minute, what the incoming value holds beyond the
# stored minute field (counts and histogram slots, never below zero) is added to six
# fields: the queue's minute, hour and day and the rollup's three. KEYS[1] is the key
# index hash (queue key -> newest minute with finished jobs); KEYS[2..] the data hashes.
# ARGV: queue key, minute count, then per minute: minute, incoming value and six
# (KEYS index, field) pairs, the first being the queue's minute field; then one TTL per
# data hash (seconds; 0 none; below 0: past retention, deleted). Returns the minutes
# whose counts changed.
SNAPSHOT = (
    _CODEC
    + """
local changed, newest = 0, nil
local a = 3
for _ = 1, tonumber(ARGV[2]) do
  local minute = tonumber(ARGV[a])
  local incoming = decode(ARGV[a + 1])
  local had = decode(redis.call('HGET', KEYS[tonumber(ARGV[a + 2])], ARGV[a + 3]))
  local add, any = {}, false
  for i = 1, WIDTH do
    local d = 0
    if i ~= 3 then d = math.max(incoming[i] - had[i], 0) end
    add[i] = d
    if d > 0 then any = true end
  end
  if add[1] > 0 or add[2] > 0 then
    changed = changed + 1
    if not newest or minute > newest then newest = minute end
  end
  if any then
    for t = 0, 5 do
      local key, field = KEYS[tonumber(ARGV[a + 2 + 2 * t])], ARGV[a + 3 + 2 * t]
      local v = decode(redis.call('HGET', key, field))
      for i = 1, WIDTH do v[i] = v[i] + add[i] end
      redis.call('HSET', key, field, encode(v))
    end
  end
  a = a + 14
end
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if newest and (not stored or stored == '' or tonumber(stored) < newest) then
  redis.call('HSET', KEYS[1], ARGV[1], newest)
elseif not stored then
  redis.call('HSET', KEYS[1], ARGV[1], '')
end
expire(a)
return changed
"""
)

# Raise age gauges: ARGV[1] entries, each (KEYS index, field, age), then one TTL per
# data hash, then the queue keys to list in the key index KEYS[1].
AGES = (
    _CODEC
    + """
local n = tonumber(ARGV[1])
local a = 2
for _ = 1, n do
  local key, field, age = KEYS[tonumber(ARGV[a])], ARGV[a + 1], tonumber(ARGV[a + 2])
  local v = decode(redis.call('HGET', key, field))
  if not v.age or v.age < age then
    v.age = age
    redis.call('HSET', key, field, encode(v))
  end
  a = a + 3
end
expire(a)
for i = a + #KEYS - 1, #ARGV do redis.call('HSETNX', KEYS[1], ARGV[i], '') end
return n
"""
)

# Take sampling leases: KEYS the lease keys, ARGV holder and milliseconds; each lease
# is set where missing (expired) or already the holder's. Returns 1/0 per key.
LEASES = """
local held = {}
for i, key in ipairs(KEYS) do
  local holder = redis.call('GET', key)
  if not holder or holder == ARGV[1] then
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
    held[i] = 1
  else
    held[i] = 0
  end
end
return held
"""

# Release the holder's (ARGV[1]) leases among KEYS.
RELEASE = """
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then redis.call('DEL', key) end
end
return 1
"""

# Remove fields ARGV of the queue hash KEYS[1], each first subtracted (counts and
# histograms; the age is a maximum and stays) from the same field of the rollup hash
# KEYS[2]; the number of fields removed. Idempotent: a field already gone subtracts
# nothing.
PURGE_FIELDS = (
    _CODEC
    + """
local removed = 0
for _, field in ipairs(ARGV) do
  local stored = redis.call('HGET', KEYS[1], field)
  if stored then
    local v, r = decode(stored), decode(redis.call('HGET', KEYS[2], field))
    for i = 1, WIDTH do
      if i ~= 3 then r[i] = math.max(r[i] - v[i], 0) end
    end
    redis.call('HSET', KEYS[2], field, encode(r))
    removed = removed + redis.call('HDEL', KEYS[1], field)
  end
end
return removed
"""
)

# Delete the hashes KEYS; the number of fields they held.
PURGE_HASHES = """
local removed = 0
for _, key in ipairs(KEYS) do
  removed = removed + redis.call('HLEN', key)
  redis.call('DEL', key)
end
return removed
"""
