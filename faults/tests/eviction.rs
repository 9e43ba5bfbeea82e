//! The nemesis's eviction fault on one real `redis-server`: the master
//! evicts the keys with a TTL it held (a lock key first under
//! `volatile-ttl`) and keeps a key without one (as the incarnation marker
//! is kept), and the heal puts `maxmemory` and the policy back as they
//! were and deletes the cache keys it wrote, and nothing else.

use faults::cluster::{Master, CACHE_PREFIX};
use redlock_testkit::RedisServer;

async fn conn(master: &Master) -> redis::aio::MultiplexedConnection {
    redis::Client::open(master.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn config(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> String {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(conn)
        .await
        .unwrap();
    pair[1].clone()
}

/// A lock key (with a TTL) goes by eviction and the writes stop there; a
/// key without a TTL stays; the heal restores the config and leaves only
/// the keys that were not the cache's.
#[tokio::test]
async fn an_eviction_takes_the_lock_and_its_heal_undoes_only_itself() {
    let dir = tempfile::tempdir().unwrap();
    let master = Master::single(RedisServer::start(dir.path(), "r1").unwrap());
    let mut c = conn(&master).await;
    let _: () = redis::cmd("SET")
        .arg("faults:res")
        .arg("token-1")
        .arg("PX")
        .arg(30_000)
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("faults: incarnation")
        .arg("marker")
        .query_async(&mut c)
        .await
        .unwrap();
    let (maxmemory, policy) = (
        config(&mut c, "maxmemory").await,
        config(&mut c, "maxmemory-policy").await,
    );

    let eviction = master
        .evict("volatile-ttl", "t", 4096, Some(("faults:res", "token-1")))
        .await
        .unwrap();
    assert_eq!(eviction.gone, Some(true), "{eviction}");
    assert!(eviction.evicted > 0, "{eviction}");
    assert!(
        eviction.written < 4096,
        "the writes stop once it is gone: {eviction}"
    );
    assert_eq!(config(&mut c, "maxmemory-policy").await, "volatile-ttl");
    let get = |key: &'static str| {
        let mut c = c.clone();
        async move {
            redis::cmd("GET")
                .arg(key)
                .query_async::<Option<String>>(&mut c)
                .await
                .unwrap()
        }
    };
    assert_eq!(get("faults:res").await, None);
    assert_eq!(get("faults: incarnation").await.as_deref(), Some("marker"));

    // A lock it does not hold: nothing is done.
    let idle = master
        .evict("volatile-lru", "u", 64, Some(("faults:res", "token-1")))
        .await
        .unwrap();
    assert_eq!((idle.gone, idle.written), (None, 0), "{idle}");

    master.end_eviction(&eviction).await.unwrap();
    assert_eq!(config(&mut c, "maxmemory").await, maxmemory);
    assert_eq!(config(&mut c, "maxmemory-policy").await, policy);
    let cache: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{CACHE_PREFIX}*"))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(cache.is_empty(), "cache keys left: {}", cache.len());
    let all: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(all, ["faults: incarnation"]);
}
