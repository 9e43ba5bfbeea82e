//! How many clients of each kind a run starts, and starting them.

use super::multi::{multi_acquire_client, multi_hold_client};
use super::{acquire_client, campaign_client, hold_client, process_client, Ctx};
use crate::checker::ClientKind;
use crate::client::Client;

/// How many clients of each kind [`spawn`] starts, spread over the agents.
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    pub acquire: usize,
    pub hold: usize,
    pub process_hold: usize,
    pub lock_command: usize,
    /// Of the plan's semaphores.
    pub permit_acquire: usize,
    pub permit_hold: usize,
    /// Of the plan's elections.
    pub campaign: usize,
    /// Of 2 or 3 of the plan's resources at once.
    pub multi_acquire: usize,
    pub multi_hold: usize,
    /// Readers of the plan's resources (`"mode": "shared"`).
    pub shared_acquire: usize,
    pub shared_hold: usize,
}

impl Mix {
    /// No client at all.
    pub const NONE: Mix = Mix {
        acquire: 0,
        hold: 0,
        process_hold: 0,
        lock_command: 0,
        permit_acquire: 0,
        permit_hold: 0,
        campaign: 0,
        multi_acquire: 0,
        multi_hold: 0,
        shared_acquire: 0,
        shared_hold: 0,
    };

    /// Every client.
    pub fn total(&self) -> usize {
        self.acquire
            + self.hold
            + self.process_hold
            + self.lock_command
            + self.permit_acquire
            + self.permit_hold
            + self.campaign
            + self.multi_acquire
            + self.multi_hold
            + self.shared_acquire
            + self.shared_hold
    }
}

/// Starts the clients; they run until `ctx.stop` turns true.
pub fn spawn(
    ctx: &Ctx,
    mix: Mix,
    clients: &[Client],
    seed: u64,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    let mut n = 0usize;
    let next = |n: &mut usize| {
        *n += 1;
        (*n - 1) % clients.len()
    };
    for (kind, count, label) in [
        (ClientKind::Acquire, mix.acquire, "acq"),
        (ClientKind::PermitAcquire, mix.permit_acquire, "permacq"),
        (ClientKind::SharedAcquire, mix.shared_acquire, "sharedacq"),
    ] {
        for i in 0..count {
            let a = next(&mut n);
            tasks.push(tokio::spawn(acquire_client(
                ctx.clone(),
                format!("{label}{}", i + 1),
                kind,
                a,
                clients[a].clone(),
                seed.wrapping_add(n as u64),
            )));
        }
    }
    for (kind, count, label) in [
        (ClientKind::Hold, mix.hold, "hold"),
        (ClientKind::PermitHold, mix.permit_hold, "permhold"),
        (ClientKind::SharedHold, mix.shared_hold, "sharedhold"),
    ] {
        for i in 0..count {
            let a = next(&mut n);
            tasks.push(tokio::spawn(hold_client(
                ctx.clone(),
                format!("{label}{}", i + 1),
                kind,
                a,
                clients[a].clone(),
                seed.wrapping_add(n as u64),
            )));
        }
    }
    for i in 0..mix.campaign {
        let a = next(&mut n);
        tasks.push(tokio::spawn(campaign_client(
            ctx.clone(),
            format!("camp{}", i + 1),
            a,
            clients[a].clone(),
            seed.wrapping_add(n as u64),
        )));
    }
    for i in 0..mix.process_hold {
        let a = next(&mut n);
        tasks.push(tokio::spawn(process_client(
            ctx.clone(),
            format!("phold{}", i + 1),
            ClientKind::ProcessHold,
            a,
            clients[a].socket().to_path_buf(),
            seed.wrapping_add(n as u64),
        )));
    }
    for i in 0..mix.lock_command {
        let a = next(&mut n);
        tasks.push(tokio::spawn(process_client(
            ctx.clone(),
            format!("lockcmd{}", i + 1),
            ClientKind::LockCommand,
            a,
            clients[a].socket().to_path_buf(),
            seed.wrapping_add(n as u64),
        )));
    }
    for i in 0..mix.multi_acquire {
        let a = next(&mut n);
        tasks.push(tokio::spawn(multi_acquire_client(
            ctx.clone(),
            format!("multiacq{}", i + 1),
            a,
            clients[a].clone(),
            seed.wrapping_add(n as u64),
        )));
    }
    for i in 0..mix.multi_hold {
        let a = next(&mut n);
        tasks.push(tokio::spawn(multi_hold_client(
            ctx.clone(),
            format!("multihold{}", i + 1),
            a,
            clients[a].clone(),
            seed.wrapping_add(n as u64),
        )));
    }
    tasks
}
