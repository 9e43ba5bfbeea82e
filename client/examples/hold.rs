//! Hold a lock while working in steps; stop at once if it is lost.
//!
//! ```sh
//! cargo run -p redlock-client --example hold -- ./redlock.sock nightly-report
//! # from another shell, as an operator:
//! curl --unix-socket ./redlock-admin.sock -X POST localhost/v1/locks/nightly-report/force-release
//! ```
//!
//! The loss notice (`force_released`) arrives at once and it exits 1.

use std::time::Duration;

use redlock_client::{Client, HoldOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let socket = args.next().unwrap_or_else(|| "./redlock.sock".into());
    let resource = args.next().unwrap_or_else(|| "nightly-report".into());
    let client = Client::new(socket);
    let options = HoldOptions::new()
        .ttl(Duration::from_secs(2))
        .wait(Duration::from_secs(5))
        .owner("example");
    let guard = match client.lock(&resource, &options).await {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("not held: {e}");
            return std::process::ExitCode::from(75);
        }
    };
    println!("held {resource}, renewed by the agent");
    let work = async {
        for _step in 0..600 {
            // One step of the work.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::select! {
        () = work => {
            let released = guard.release().await.unwrap_or(false);
            println!("done; released: {released}");
            std::process::ExitCode::SUCCESS
        }
        reason = guard.lost() => {
            println!("stopped: the lock on {resource} was lost: {reason}");
            std::process::ExitCode::from(1)
        }
    }
}
