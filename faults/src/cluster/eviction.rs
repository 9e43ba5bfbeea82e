//! Eviction on a master: `maxmemory` lowered with a policy and a cache
//! written until keys go, and undone.

use std::time::Duration;

use super::master::{config_set, connect, info_u64, Master};

/// Where the cache keys of an eviction go: not under any lock prefix the
/// suite uses (`faults:`), so neither the observer nor the agents' leak
/// scan sees them.
pub const CACHE_PREFIX: &str = "nemesis-cache:";

/// A cache key's value size (as the agent's eviction tests write).
pub const CACHE_VALUE_BYTES: usize = 16 * 1024;

/// A cache key's TTL: it makes the key volatile (a `volatile-*` policy's
/// candidate), and long enough that none expires during a fault; the heal
/// deletes them.
pub const CACHE_TTL: Duration = Duration::from_secs(600);

/// How far above what a master uses its `maxmemory` is set for an
/// eviction: about 128 cache keys fit, the rest push keys out.
pub const EVICTION_HEADROOM: u64 = 2 * 1024 * 1024;

/// Cache keys per round trip.
const CACHE_BATCH: u32 = 16;

/// One eviction begun by [`Master::evict`] and what it did; given back to
/// [`Master::end_eviction`] to undo it.
#[derive(Debug, Clone)]
pub struct Eviction {
    pub master: String,
    pub policy: &'static str,
    /// `maxmemory` and its policy before, restored by the heal.
    maxmemory: String,
    maxmemory_policy: String,
    tag: String,
    /// The `maxmemory` set, in bytes.
    pub limit: u64,
    /// Cache keys written: [`CACHE_PREFIX`]`<tag>:<n>` for `n` below it.
    pub written: u32,
    /// Keys the master evicted during the writes (`evicted_keys` after
    /// minus before).
    pub evicted: u64,
    /// With `until_lost`: whether that key, holding the token at the start,
    /// lost it (`None`: it did not hold it, and nothing was done).
    pub gone: Option<bool>,
    /// A write that failed part way (the writes stopped there).
    pub error: Option<String>,
}

impl Eviction {
    fn key(&self, n: u32) -> String {
        format!("{CACHE_PREFIX}{}:{n}", self.tag)
    }
}

impl std::fmt::Display for Eviction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.gone.is_none() && self.written == 0 {
            if let Some(e) = &self.error {
                return write!(f, "{}: {e}", self.master);
            }
        }
        write!(
            f,
            "{} {} maxmemory {:.1}MiB: {} cache keys, {} evicted",
            self.master,
            self.policy,
            self.limit as f64 / 1048576.0,
            self.written,
            self.evicted
        )?;
        match self.gone {
            Some(true) => write!(f, ", the lock gone")?,
            Some(false) => write!(f, ", the lock still there")?,
            None => {}
        }
        if let Some(e) = &self.error {
            write!(f, " ({e})")?;
        }
        Ok(())
    }
}

impl Master {
    /// Makes a single master evict, as a Redis shared with a cache does:
    /// `maxmemory` set to what it uses now plus [`EVICTION_HEADROOM`], the
    /// `policy` given (`volatile-lru`, `volatile-ttl`, `allkeys-lru`), then
    /// up to `writes` cache keys of [`CACHE_VALUE_BYTES`] each with a TTL
    /// of [`CACHE_TTL`], straight to it (not through a link), under
    /// [`CACHE_PREFIX`]`<tag>:`, never under a lock prefix. With
    /// `until_lost: (key, token)`, the writes stop as soon as that key no
    /// longer holds that token (evicted); when it does not hold it to begin
    /// with, nothing is done (see [`Eviction::gone`]).
    /// Every lock key has a TTL, so every policy may evict it; only
    /// `allkeys-*` may evict the incarnation marker (it has none).
    ///
    /// The master keeps evicting (the agents' own writes push it over) until
    /// [`Master::end_eviction`] is given the returned [`Eviction`], which
    /// is returned even when a write failed part way (see
    /// [`Eviction::error`]).
    ///
    /// # Errors
    /// When the master does not answer or refuses the `CONFIG SET` (nothing
    /// to undo then), or for a cluster master.
    pub async fn evict(
        &self,
        policy: &'static str,
        tag: &str,
        writes: u32,
        until_lost: Option<(&str, &str)>,
    ) -> Result<Eviction, String> {
        if self.as_cluster().is_some() {
            return Err(self.single_only("evict"));
        }
        let name = &self.name;
        let mut conn = connect(self.port()).await?;
        let was: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory")
            .query_async::<Vec<String>>(&mut conn)
            .await
            .map_err(|e| format!("CONFIG GET maxmemory on {name}: {e}"))?;
        let was_policy: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async::<Vec<String>>(&mut conn)
            .await
            .map_err(|e| format!("CONFIG GET maxmemory-policy on {name}: {e}"))?;
        let (Some(maxmemory), Some(maxmemory_policy)) = (was.get(1), was_policy.get(1)) else {
            return Err(format!("CONFIG GET on {name}: no value"));
        };
        if let Some((key, token)) = until_lost {
            let there: Option<String> = redis::cmd("GET")
                .arg(key)
                .query_async(&mut conn)
                .await
                .map_err(|e| format!("GET on {name}: {e}"))?;
            if there.as_deref() != Some(token) {
                return Ok(Eviction {
                    master: name.clone(),
                    policy,
                    maxmemory: maxmemory.clone(),
                    maxmemory_policy: maxmemory_policy.clone(),
                    tag: tag.to_string(),
                    limit: 0,
                    written: 0,
                    evicted: 0,
                    gone: None,
                    error: Some(format!("{key} did not hold the lock: nothing done")),
                });
            }
        }
        let used = info_u64(&mut conn, "memory", "used_memory").await?;
        let evicted_before = info_u64(&mut conn, "stats", "evicted_keys").await?;
        let mut eviction = Eviction {
            master: name.clone(),
            policy,
            maxmemory: maxmemory.clone(),
            maxmemory_policy: maxmemory_policy.clone(),
            tag: tag.to_string(),
            limit: used + EVICTION_HEADROOM,
            written: 0,
            evicted: 0,
            gone: None,
            error: None,
        };
        config_set(&mut conn, "maxmemory-policy", policy)
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        if let Err(e) = config_set(&mut conn, "maxmemory", &eviction.limit.to_string()).await {
            let _ = config_set(&mut conn, "maxmemory-policy", maxmemory_policy).await;
            return Err(format!("{name}: {e}"));
        }
        let value = "x".repeat(CACHE_VALUE_BYTES);
        let ttl_ms = u64::try_from(CACHE_TTL.as_millis()).unwrap_or(u64::MAX);
        while eviction.written < writes {
            let batch = CACHE_BATCH.min(writes - eviction.written);
            let mut pipe = redis::pipe();
            for n in eviction.written..eviction.written + batch {
                pipe.cmd("SET")
                    .arg(eviction.key(n))
                    .arg(&value)
                    .arg("PX")
                    .arg(ttl_ms)
                    .ignore();
            }
            if let Some((key, _)) = until_lost {
                pipe.cmd("GET").arg(key);
            }
            let reply: Result<Vec<Option<String>>, _> = pipe.query_async(&mut conn).await;
            eviction.written += batch;
            match (reply, until_lost) {
                (Ok(value), Some((_, token)))
                    if value.first().cloned().flatten().as_deref() != Some(token) =>
                {
                    eviction.gone = Some(true);
                    break;
                }
                (Ok(_), Some(_)) => eviction.gone = Some(false),
                (Ok(_), None) => {}
                (Err(e), _) => {
                    eviction.error = Some(format!("cache write on {name}: {e}"));
                    break;
                }
            }
        }
        eviction.evicted = info_u64(&mut conn, "stats", "evicted_keys")
            .await
            .map_or(0, |n| n.saturating_sub(evicted_before));
        Ok(eviction)
    }

    /// Ends an eviction begun by [`Master::evict`]: `maxmemory` and the
    /// policy as they were, then every cache key it wrote deleted (by
    /// name: its own prefix only).
    ///
    /// # Errors
    /// When the master does not answer or refuses a command.
    pub async fn end_eviction(&self, eviction: &Eviction) -> Result<(), String> {
        let name = &self.name;
        let mut conn = connect(self.port()).await?;
        config_set(&mut conn, "maxmemory", &eviction.maxmemory)
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        config_set(&mut conn, "maxmemory-policy", &eviction.maxmemory_policy)
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        let mut n = 0;
        while n < eviction.written {
            let end = (n + 512).min(eviction.written);
            let mut unlink = redis::cmd("UNLINK");
            for i in n..end {
                unlink.arg(eviction.key(i));
            }
            unlink
                .query_async::<u64>(&mut conn)
                .await
                .map_err(|e| format!("UNLINK cache keys on {name}: {e}"))?;
            n = end;
        }
        Ok(())
    }
}
