//! The campaigner: elections' campaigns, leaderships as sections.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{backoff, between, Ctx, Outcome};
use crate::checker::{ClientKind, Ending, Grant, Primitive, SectionId};
use crate::client::{self, next_campaign_event, Answer, CampaignNext, CampaignOptions, Client};
use crate::clock::Mono;
use redlock_wire::CampaignEvent;

/// A campaigner until stop: campaigns for one of the plan's elections,
/// waits up to a wait drawn from the plan to be elected (else resigns: a
/// `taken` attempt), leads for a hold's time drawn from the plan, then
/// resigns by closing the stream. Its section is the leadership: from
/// `elected`'s arrival, its token the campaigner's own name for it (the
/// agent never shows a leadership's token), its fence the term; its
/// request time is the campaign's start.
pub async fn campaign_client(mut ctx: Ctx, name: String, agent: usize, client: Client, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let kind = ClientKind::Campaign;
    let mut terms = 0u64;
    while !ctx.stopped() {
        let election = ctx.plan.elections[rng.random_range(0..ctx.plan.elections.len())].clone();
        let ttl_ms = between(&mut rng, ctx.plan.hold_ttl_ms);
        let wait_ms = ctx.plan.waits_ms[rng.random_range(0..ctx.plan.waits_ms.len())];
        let hold_ms = between(&mut rng, ctx.plan.hold_ms);
        let options = CampaignOptions::new()
            .ttl(Duration::from_millis(ttl_ms))
            .owner(name.clone())
            .value(format!("{name} at a{}", agent + 1));
        let requested = Mono::now();
        let outcome = match client.campaign(&election, &options).await {
            Ok(Answer::Ok(mut campaign)) => {
                let give_up = requested.plus_ms(wait_ms);
                let elected = loop {
                    let mut stop = ctx.stop.clone();
                    tokio::select! {
                        () = tokio::time::sleep(give_up.since(Mono::now())) => break Err(Unelected::GaveUp),
                        _ = stop.changed() => break Err(Unelected::GaveUp),
                        next = next_campaign_event(&mut campaign) => match next {
                            CampaignNext::Event(CampaignEvent::Elected { term, validity_ms, .. }) => {
                                break Ok((term, validity_ms));
                            }
                            CampaignNext::Event(CampaignEvent::Waiting { .. }) => {}
                            // The agent ended the campaign (`shutdown`,
                            // `too_many_waiters`): a refusal.
                            CampaignNext::Event(CampaignEvent::Lost { reason }) => {
                                break Err(Unelected::Ended(reason));
                            }
                            CampaignNext::Event(other) => {
                                break Err(Unelected::Malformed(format!("before elected: {other:?}")));
                            }
                            // The agent went away (killed, drained).
                            CampaignNext::Ended | CampaignNext::Broken(_) => break Err(Unelected::Broken),
                        }
                    }
                };
                match elected {
                    Ok((term, validity_ms)) => {
                        let granted = Mono::now();
                        terms += 1;
                        ctx.record(kind, Outcome::Granted);
                        let resource = Primitive::election_resource(&election);
                        let id = ctx.checker.enter_as(
                            Grant {
                                resource: resource.clone(),
                                client: name.clone(),
                                kind,
                                agent,
                                token: format!("{name} leadership {terms}"),
                                ttl_ms,
                                requested,
                                granted,
                                validity_ms: Some(validity_ms),
                                fence: Some(term),
                            },
                            granted,
                            Primitive::Leadership {
                                election: election.clone(),
                                term,
                            },
                        );
                        let data = format!("{election} led by {name} in term {term}");
                        ctx.write(id, &resource, Some(term), &data).await;
                        let ending =
                            lead(&mut ctx, &mut campaign, id, granted.plus_ms(hold_ms)).await;
                        ctx.checker.exit(id, Mono::now(), ending);
                        drop(campaign); // closing the stream resigns
                        Outcome::Granted
                    }
                    Err(Unelected::GaveUp) => {
                        // Not elected within the wait (or the run ended).
                        drop(campaign);
                        ctx.refused(kind, "taken")
                    }
                    Err(Unelected::Ended(reason)) => ctx.refused(kind, &format!("lost:{reason}")),
                    Err(Unelected::Broken) => {
                        ctx.record(kind, Outcome::NoAnswer);
                        Outcome::NoAnswer
                    }
                    Err(Unelected::Malformed(what)) => {
                        ctx.stats.malformed(format!("campaign: {what}"));
                        ctx.record(kind, Outcome::Malformed);
                        Outcome::Malformed
                    }
                }
            }
            Ok(Answer::Refused { code, .. }) => ctx.refused(kind, code.as_str()),
            Err(e) => ctx.failed(kind, &e, "campaign"),
        };
        let pause = backoff(outcome) + Duration::from_millis(between(&mut rng, ctx.plan.think_ms));
        ctx.sleep(pause).await;
    }
}

/// Why a campaign ended without this campaigner being elected.
enum Unelected {
    /// Not elected within the wait, or the run stopped: it resigned.
    GaveUp,
    /// The agent said `lost` before `elected`, with this reason.
    Ended(String),
    /// The stream ended or broke: the agent went away.
    Broken,
    /// An event that has no place before `elected`.
    Malformed(String),
}

/// A leader's time: reads the campaign's renewals into the checker until
/// `until`, `lost`, the stream's end or the run's stop; how it ended.
async fn lead(
    ctx: &mut Ctx,
    campaign: &mut client::Campaign,
    id: SectionId,
    until: Mono,
) -> Ending {
    let mut stop = ctx.stop.clone();
    loop {
        tokio::select! {
            () = tokio::time::sleep(until.since(Mono::now())) => return Ending::Closed,
            _ = stop.changed() => return Ending::Closed,
            next = next_campaign_event(campaign) => {
                let at = Mono::now();
                match next {
                    CampaignNext::Event(CampaignEvent::Renewed { validity_ms }) => {
                        ctx.stats.bump(|s| s.renewals += 1);
                        ctx.checker.renewed(id, at, at, validity_ms);
                    }
                    CampaignNext::Event(CampaignEvent::Lost { reason }) => {
                        ctx.stats.bump(|s| s.holds_lost += 1);
                        ctx.checker.belief_ended(id, at);
                        return Ending::Lost { reason };
                    }
                    CampaignNext::Event(CampaignEvent::Waiting { .. }) => {
                        // Told another leads: stop leading.
                        ctx.stats.malformed("campaign: `waiting` while leading".into());
                        ctx.checker.belief_ended(id, at);
                        return Ending::Lost { reason: "waiting while leading".into() };
                    }
                    CampaignNext::Event(CampaignEvent::Elected { .. }) => {
                        ctx.stats.malformed("campaign: a second `elected`".into());
                    }
                    CampaignNext::Ended | CampaignNext::Broken(_) => {
                        ctx.stats.bump(|s| s.holds_broken += 1);
                        ctx.checker.belief_ended(id, at);
                        return Ending::StreamBroken;
                    }
                }
            }
        }
    }
}
