-- applySubs: one subscription command on a user's forward set (the diff
-- against the stored set, the limits and the write). Shared by the
-- subscriptions script and the session script's open, which sets the
-- subscriptions a connection names as it connects.
--
-- subs is the forward set; op is set, add or remove; members[from ..
-- from+n-1] are the users of the command (distinct) and the members after
-- them the subjects that already have the most followers allowed.
-- Returns {'too_many', count} or {'full', {users}}, having written nothing,
-- or {'ok', added, removed}. added is 'all' when every user of the command
-- was added (a connection's first set): the caller has the list.
local function applySubs(subs, op, members, from, n, maxSubs)
  local last = from + n - 1

  -- In chunks: Lua's unpack takes a few thousand values at most.
  local function apply(cmd, list, i0, i1)
    for i = i0, i1, 1000 do
      redis.call(cmd, subs, unpack(list, i, math.min(i + 999, i1)))
    end
  end

  local old = redis.call('SMEMBERS', subs)

  -- A first set or add (every new connection's): everything named is
  -- added and nothing removed, so no diff tables are built; this is half
  -- the cost.
  if #old == 0 and op ~= 'remove' then
    if n > maxSubs then
      return {'too_many', n}
    end
    -- The subjects at the cap are among those named, so all are refused.
    if #members > last then
      return {'full', {unpack(members, last + 1)}}
    end
    apply('SADD', members, from, last)
    if n == 0 then
      return {'ok', {}, {}}
    end
    return {'ok', 'all', {}}
  end

  local have = {}
  for _, u in ipairs(old) do
    have[u] = true
  end

  local all, added, removed = {}, {}, {}
  if op == 'set' then
    local want = {}
    for i = from, last do
      local u = members[i]
      want[u] = true
      all[#all + 1] = u
      if not have[u] then
        added[#added + 1] = u
      end
    end
    for _, u in ipairs(old) do
      if not want[u] then
        removed[#removed + 1] = u
      end
    end
  elseif op == 'add' then
    for _, u in ipairs(old) do
      all[#all + 1] = u
    end
    for i = from, last do
      local u = members[i]
      if not have[u] then
        have[u] = true
        added[#added + 1] = u
        all[#all + 1] = u
      end
    end
  else
    local drop = {}
    for i = from, last do
      local u = members[i]
      if have[u] then
        drop[u] = true
        removed[#removed + 1] = u
      end
    end
    for _, u in ipairs(old) do
      if not drop[u] then
        all[#all + 1] = u
      end
    end
  end

  if #all > maxSubs then
    return {'too_many', #all}
  end
  if #added > 0 and #members > last then
    local full = {}
    for i = last + 1, #members do
      full[members[i]] = true
    end
    local refused = {}
    for _, u in ipairs(added) do
      if full[u] then
        refused[#refused + 1] = u
      end
    end
    if #refused > 0 then
      return {'full', refused}
    end
  end

  apply('SREM', removed, 1, #removed)
  apply('SADD', added, 1, #added)
  if op ~= 'remove' and n > 0 and #added == n then
    return {'ok', 'all', removed}
  end
  return {'ok', added, removed}
end
