//! The client of locks on several resources at once
//! ([`ClientKind::MultiAcquire`]): 2 or 3 of the plan's resources, drawn
//! anew each time and named in any order, so its sets overlap each other's
//! and the single locks' of the same resources; then the section as a
//! plain acquire's (work, maybe extend, release).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use redlock_wire::MultiAcquireRequest;

use super::{backoff, between, work, Ctx, Outcome};
use crate::checker::{ClientKind, Grant, Primitive};
use crate::client::{self, Answer, Client, Held};
use crate::clock::Mono;

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
    let most = ctx.plan.resources.len().min(3);
    while !ctx.stopped() && most >= 2 {
        let mut asked = ctx.plan.resources.clone();
        asked.shuffle(&mut rng);
        asked.truncate(rng.random_range(2..=most));
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
