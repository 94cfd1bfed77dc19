//! The Lua scripts of the Redis leases (see `lease.rs` for what each does), hashed once:
//! a leaf module, so that the store holds them without importing the lease operations.

use redis::Script;

const ACQUIRE: &str = r#"
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, v = pcall(cjson.decode, cur)
  if not (ok and type(v) == 'table' and type(v.holder) == 'table' and (v.holder.id == ARGV[2] or (ARGV[4] ~= '' and v.holder.id == ARGV[4]))) then
    return cur
  end
end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], '{"fence":' .. string.format('%d', fence) .. ',"holder":' .. ARGV[1] .. '}', 'PX', ARGV[3])
return fence
"#;

const RENEW: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#;

const PUT_FENCED: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[2], ARGV[2])
  return 1
end
return 0
"#;

const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;

/// The lease scripts, hashed once (`EVALSHA`, loading the script when the server lacks it).
#[derive(Clone)]
pub(crate) struct Scripts {
    /// Acquire (or take over) a lease: `KEYS = [lease, fence]`,
    /// `ARGV = [holder json, holder id, ttl ms, gone holder id or '']`.
    pub(crate) acquire: Script,
    /// Extend our lease: `KEYS = [lease]`, `ARGV = [our value, ttl ms]`.
    pub(crate) renew: Script,
    /// Put a bookmark under our lease: `KEYS = [lease, state]`, `ARGV = [our value, bookmark]`.
    pub(crate) put_fenced: Script,
    /// Drop our lease: `KEYS = [lease]`, `ARGV = [our value]`.
    pub(crate) release: Script,
}

impl Scripts {
    /// The four scripts (no I/O: a script is sent on first use).
    pub(crate) fn new() -> Self {
        Self {
            acquire: Script::new(ACQUIRE),
            renew: Script::new(RENEW),
            put_fenced: Script::new(PUT_FENCED),
            release: Script::new(RELEASE),
        }
    }
}
