//! The agent driver: each client is what an application would be, one
//! HTTP/1.1 keep-alive connection on the agent's Unix socket, acquiring with
//! `wait_ms` (the agent waits and retries) and releasing by token.

use std::time::Instant;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use redlock_wire::{AcquireRequest, AcquireResponse, ReleaseRequest, ReleaseResponse};
use tokio::net::UnixStream;

use super::{Acquired, Client};

pub struct AgentClient {
    sender: SendRequest<Full<Bytes>>,
    owner: String,
    /// Ask for a fencing token with every acquire.
    fence: bool,
}

impl AgentClient {
    /// Opens the client's connection.
    ///
    /// # Errors
    /// When the socket refuses the connection or the handshake.
    pub async fn connect(socket: &str, index: usize) -> anyhow::Result<AgentClient> {
        let stream = UnixStream::connect(socket)
            .await
            .with_context(|| format!("connect {socket}"))?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(AgentClient {
            sender,
            owner: format!("bench-{index}"),
            fence: false,
        })
    }

    /// Asks for a fence with every acquire when `fence`; a grant without
    /// one is then an error.
    pub fn fenced(mut self, fence: bool) -> AgentClient {
        self.fence = fence;
        self
    }

    async fn post(&mut self, path: String, body: Vec<u8>) -> Result<(StatusCode, Bytes), String> {
        self.sender.ready().await.map_err(|e| e.to_string())?;
        // Cannot fail: the method, a path made of a checked resource name,
        // and static headers.
        let request = Request::post(path)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("a valid request");
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, body))
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
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Acquired::TimedOut;
        }
        // At least 1: 0 would mean a single attempt.
        let wait_ms = (left.as_millis() as u64).max(1);
        let body = AcquireRequest {
            ttl_ms: Some(ttl_ms),
            wait_ms: Some(wait_ms),
            owner: Some(self.owner.clone()),
            fence: self.fence,
        };
        // Cannot fail: a struct of numbers and a string.
        let body = serde_json::to_vec(&body).expect("serializes");
        match self
            .post(format!("/v1/locks/{resource}/acquire"), body)
            .await
        {
            Ok((StatusCode::OK, body)) => match serde_json::from_slice::<AcquireResponse>(&body) {
                Ok(granted) if self.fence && granted.fence.is_none() => {
                    Acquired::Failed("acquire: asked for a fence, got none".to_string())
                }
                Ok(granted) => Acquired::Granted((resource.to_string(), granted.token)),
                Err(e) => Acquired::Failed(format!("acquire: bad answer: {e}")),
            },
            Ok((StatusCode::CONFLICT, _)) => Acquired::TimedOut,
            Ok((status, body)) => Acquired::Failed(format!(
                "acquire: {status} {}",
                String::from_utf8_lossy(&body).trim()
            )),
            Err(e) => Acquired::Failed(format!("acquire: {e}")),
        }
    }

    async fn release(&mut self, (resource, token): Self::Held) -> Result<(), String> {
        // Cannot fail: a struct of one string.
        let body = serde_json::to_vec(&ReleaseRequest { token }).expect("serializes");
        match self
            .post(format!("/v1/locks/{resource}/release"), body)
            .await?
        {
            (StatusCode::OK, body) => match serde_json::from_slice::<ReleaseResponse>(&body) {
                Ok(answer) if answer.released => Ok(()),
                Ok(_) => Err("released=false: the lock had expired".to_string()),
                Err(e) => Err(format!("bad answer: {e}")),
            },
            (status, body) => Err(format!(
                "{status} {}",
                String::from_utf8_lossy(&body).trim()
            )),
        }
    }
}
