//! Load against a real agent: 10,000 concurrent connections and 3,000
//! waiters on one resource. The agent keeps answering, its memory plateaus,
//! and the limits answer with their documented errors.

use faults::load::{self, LoadOptions};

/// 10,000 connections held open and 3,000 waiters: fresh requests are still
/// served, `socket.max_connections` and `lock.max_waiters` answer 503 with
/// their codes, RSS stays bounded, the queue hands the lock down and
/// empties when its connections close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_connections_and_three_thousand_waiters() {
    let report = load::run(&LoadOptions {
        connections: 10_000,
        waiters: 3_000,
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    println!("{report}");
    assert!(report.problems().is_empty(), "{report}");
}
