//! A hold's section kept while its stream says it is held: the events of a
//! lock's hold or of a hold of several resources, read the same way.

use redlock_wire::HoldEvent;

use super::Ctx;
use crate::checker::{Ending, SectionId};
use crate::client::{next_event, HoldNext};
use crate::clock::Mono;

/// A hold's stream of events, read one at a time: a lock's through the
/// client, or one of several resources' (`client::multi`).
pub(crate) trait HoldEvents {
    fn next(&mut self) -> impl std::future::Future<Output = HoldNext> + Send;
}

impl HoldEvents for redlock_client::Hold {
    fn next(&mut self) -> impl std::future::Future<Output = HoldNext> + Send {
        next_event(self)
    }
}

/// Keeps a hold's section until `end`, reading `hold`'s events: renewals
/// noted, `lost` or a broken stream end it; how it ended.
pub(crate) async fn keep(
    ctx: &mut Ctx,
    id: SectionId,
    end: Mono,
    hold: &mut impl HoldEvents,
    what: &str,
) -> Ending {
    loop {
        let left = end.since(Mono::now());
        tokio::select! {
            () = tokio::time::sleep(left) => return Ending::Closed,
            next = hold.next() => {
                let at = Mono::now();
                match next {
                    HoldNext::Event(HoldEvent::Renewed { validity_ms }) => {
                        ctx.stats.bump(|s| s.renewals += 1);
                        ctx.checker.renewed(id, at, at, validity_ms);
                    }
                    HoldNext::Event(HoldEvent::Lost { reason }) => {
                        ctx.stats.bump(|s| s.holds_lost += 1);
                        ctx.checker.belief_ended(id, at);
                        return Ending::Lost { reason };
                    }
                    HoldNext::Event(HoldEvent::Acquired { .. }) => {
                        ctx.stats.malformed(format!("{what}: a second acquired event"));
                    }
                    HoldNext::Ended | HoldNext::Broken(_) => {
                        ctx.stats.bump(|s| s.holds_broken += 1);
                        ctx.checker.belief_ended(id, at);
                        return Ending::StreamBroken;
                    }
                }
            }
        }
    }
}
