//! The clients of locks on several resources at once: 2 or 3 of the
//! plan's resources, drawn anew each time and named in any order, so their
//! sets overlap each other's and the single locks' of the same resources.
//! - [`ClientKind::MultiAcquire`]: the section as a plain acquire's (work,
//!   maybe extend, release).
//! - [`ClientKind::MultiHold`]: a hold stream, as a lock's hold: it stops
//!   on `lost` or a broken stream, and closes the stream to release.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use redlock_wire::{MultiAcquireRequest, MultiHoldRequest};

use super::{backoff, between, keep, work, Ctx, HoldEvents, Outcome};
use crate::checker::{ClientKind, Grant, Primitive};
use crate::client::{self, Answer, Client, Held, HoldNext};
use crate::clock::Mono;

/// 2 or 3 of the plan's resources (as many as it has, if fewer), in a
/// random order.
fn draw(ctx: &Ctx, rng: &mut StdRng) -> Vec<String> {
    let mut asked = ctx.plan.resources.clone();
    asked.shuffle(rng);
    let most = asked.len().min(3);
    asked.truncate(rng.random_range(2.min(most)..=most));
    asked
}

/// A multi-resource acquire client until stop.
pub async fn multi_acquire_client(
    mut ctx: Ctx,
    name: String,
    agent: usize,
    client: Client,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let kind = ClientKind::MultiAcquire;
    while !ctx.stopped() && ctx.plan.resources.len() >= 2 {
        let asked = draw(&ctx, &mut rng);
        let ttl_ms = between(&mut rng, ctx.plan.ttl_ms);
        let wait_ms = ctx.plan.waits_ms[rng.random_range(0..ctx.plan.waits_ms.len())];
        let request = MultiAcquireRequest {
            resources: asked.clone(),
            ttl_ms: Some(ttl_ms),
            wait_ms: Some(wait_ms),
            owner: Some(name.clone()),
            fence: true,
        };
        let requested = Mono::now();
        let outcome = match client.acquire_multi(&request).await {
            Ok(Answer::Ok(grant)) => {
                let granted = Mono::now();
                ctx.record(kind, Outcome::Granted);
                // What the client asked for is what it believes it holds;
                // an answer that names other resources breaks the contract.
                let mut resources = asked;
                resources.sort();
                if grant.resources != resources {
                    ctx.stats.malformed(format!(
                        "multi acquire of {resources:?} answered {:?}",
                        grant.resources
                    ));
                }
                let label = resources.join("+");
                let validity_ms = client::ms(grant.validity);
                let id = ctx.checker.enter_as(
                    Grant {
                        resource: label.clone(),
                        client: name.clone(),
                        kind,
                        agent,
                        token: grant.token.clone(),
                        ttl_ms,
                        requested,
                        granted,
                        validity_ms: Some(validity_ms),
                        fence: grant.fence,
                    },
                    granted,
                    Primitive::Multi {
                        resources: resources.clone(),
                    },
                );
                let held = Held::Multi(resources);
                let granted_as = (grant.token.as_str(), validity_ms, grant.fence);
                work(
                    &mut ctx, &mut rng, &client, &held, &label, granted_as, id, granted, ttl_ms,
                )
                .await;
                Outcome::Granted
            }
            Ok(Answer::Refused { code, .. }) => ctx.refused(kind, code.as_str()),
            Err(e) => ctx.failed(kind, &e, "acquire_multi"),
        };
        let pause = backoff(outcome) + Duration::from_millis(between(&mut rng, ctx.plan.think_ms));
        ctx.sleep(pause).await;
    }
}

/// A multi-resource hold client until stop: holds 2 or 3 resources for a
/// hold's time drawn from the plan, then closes the stream.
pub async fn multi_hold_client(
    mut ctx: Ctx,
    name: String,
    agent: usize,
    client: Client,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let kind = ClientKind::MultiHold;
    while !ctx.stopped() && ctx.plan.resources.len() >= 2 {
        let mut resources = draw(&ctx, &mut rng);
        let ttl_ms = between(&mut rng, ctx.plan.hold_ttl_ms);
        let wait_ms = ctx.plan.waits_ms[rng.random_range(0..ctx.plan.waits_ms.len())];
        let hold_ms = between(&mut rng, ctx.plan.hold_ms);
        let request = MultiHoldRequest {
            resources: resources.clone(),
            ttl_ms: Some(ttl_ms),
            wait_ms: Some(wait_ms),
            owner: Some(name.clone()),
            fence: true,
            ..MultiHoldRequest::default()
        };
        resources.sort();
        let requested = Mono::now();
        let outcome = match client.hold_multi(&request).await {
            Ok(Answer::Ok(mut hold)) => {
                let granted = Mono::now();
                ctx.record(kind, Outcome::Granted);
                let (token, fence) = (hold.token.clone(), hold.fence);
                let label = resources.join("+");
                let id = ctx.checker.enter_as(
                    Grant {
                        resource: label.clone(),
                        client: name.clone(),
                        kind,
                        agent,
                        token: token.clone(),
                        ttl_ms,
                        requested,
                        granted,
                        validity_ms: Some(client::ms(hold.validity)),
                        fence,
                    },
                    granted,
                    Primitive::Multi { resources },
                );
                let data = format!("{label} by {}", &token[..token.len().min(8)]);
                ctx.write(id, &label, fence, &data).await;
                let end = granted.plus_ms(hold_ms);
                let ending = keep(&mut ctx, id, end, &mut hold, "multi hold").await;
                ctx.checker.exit(id, Mono::now(), ending);
                drop(hold); // closing the connection releases
                Outcome::Granted
            }
            Ok(Answer::Refused { code, .. }) => ctx.refused(kind, code.as_str()),
            Err(e) => ctx.failed(kind, &e, "hold_multi"),
        };
        let pause = backoff(outcome) + Duration::from_millis(between(&mut rng, ctx.plan.think_ms));
        ctx.sleep(pause).await;
    }
}

impl HoldEvents for client::multi::MultiHold {
    fn next(&mut self) -> impl std::future::Future<Output = HoldNext> + Send {
        self.next_event()
    }
}
