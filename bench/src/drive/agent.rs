//! The agent driver: each client is what an application would be, a
//! `redlock-client` with one HTTP/1.1 keep-alive connection on the agent's
//! Unix socket, acquiring with `wait_ms` (the agent waits and retries) and
//! releasing by token. For W1's socket floor, the same clients send
//! `GET /healthz` in place of each: two round trips, no lock work.

use std::time::Instant;

use anyhow::Context;
use redlock_client::{AcquireOptions, Error};

use super::{Acquired, Client};

pub struct AgentClient {
    client: redlock_client::Client,
    owner: String,
    /// Ask for a fencing token with every acquire.
    fence: bool,
    /// `GET /healthz` in place of the acquire and of the release.
    floor: bool,
}

impl AgentClient {
    /// Opens the client's connection (kept for every later request: one
    /// client, one connection, as its requests are sequential).
    ///
    /// # Errors
    /// When the socket refuses the connection or the handshake.
    pub async fn connect(socket: &str, index: usize) -> anyhow::Result<AgentClient> {
        let client = redlock_client::Client::new(socket);
        client
            .connect()
            .await
            .with_context(|| format!("connect {socket}"))?;
        Ok(AgentClient {
            client,
            owner: format!("bench-{index}"),
            fence: false,
            floor: false,
        })
    }

    /// Asks for a fence with every acquire when `fence`; a grant without
    /// one is then an error.
    pub fn fenced(mut self, fence: bool) -> AgentClient {
        self.fence = fence;
        self
    }

    /// Sends `GET /healthz` in place of every acquire and release when
    /// `floor`: the same client, connection and loop, without the lock.
    pub fn floor(mut self, floor: bool) -> AgentClient {
        self.floor = floor;
        self
    }
}

impl Client for AgentClient {
    type Held = (String, String);

    async fn acquire(
        &mut self,
        resource: &str,
        ttl_ms: u64,
        deadline: Instant,
    ) -> Acquired<Self::Held> {
        if self.floor {
            return match self.client.healthz().await {
                Ok(()) => Acquired::Granted((String::new(), String::new())),
                Err(e) => Acquired::Failed(format!("healthz: {e}")),
            };
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Acquired::TimedOut;
        }
        // At least 1 ms: 0 would mean a single attempt.
        let options = AcquireOptions::new()
            .ttl(std::time::Duration::from_millis(ttl_ms))
            .wait(left.max(std::time::Duration::from_millis(1)))
            .owner(self.owner.clone());
        let options = if self.fence { options.fence() } else { options };
        match self.client.acquire(resource, &options).await {
            Ok(granted) if self.fence && granted.fence.is_none() => {
                Acquired::Failed("acquire: asked for a fence, got none".to_string())
            }
            Ok(granted) => Acquired::Granted((resource.to_string(), granted.token)),
            Err(Error::Taken { .. }) => Acquired::TimedOut,
            Err(e) => Acquired::Failed(format!("acquire: {e}")),
        }
    }

    async fn release(&mut self, (resource, token): Self::Held) -> Result<(), String> {
        if self.floor {
            return self
                .client
                .healthz()
                .await
                .map_err(|e| format!("healthz: {e}"));
        }
        match self.client.release(&resource, &token).await {
            Ok(true) => Ok(()),
            Ok(false) => Err("released=false: the lock had expired".to_string()),
            Err(e) => Err(e.to_string()),
        }
    }
}
