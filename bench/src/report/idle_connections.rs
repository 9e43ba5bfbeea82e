//! W8's section of the report: the agent's RSS before, with and after its
//! idle connections.

use std::fmt::Write;

use super::{mib, num, one_line};
use crate::idle;
use crate::plan::Results;

pub(super) fn idle_connections(md: &mut String, results: &Results) {
    let Some(measured) = &results.idle else {
        return;
    };
    let _ = writeln!(
        md,
        "## W8: idle connections (the agent only)\n\nAn agent of its own over the same masters \
         (`socket.max_connections` raised to fit, `request_timeout: 300s` so none is closed for idling), after \
         {} requests on fresh connections. Then the connections open, {} at a time; each sends one `GET \
         /healthz`, reads the answer and stays open, idle; then all close. RSS is the agent's `VmRSS` \
         (`/proc/PID/status`); after the close it is read once it has settled (10 readings 100 ms apart within \
         1%, and the agent's descriptors back to where they were) or after 5 s.\n",
        idle::WARMUP_REQUESTS,
        idle::BATCH
    );
    match measured {
        Ok(i) => {
            let _ = writeln!(
                md,
                "| connections answered | opened in | RSS before | RSS with all open | per connection | RSS after the close | agent fds before / open / after |\n|---|---|---|---|---|---|---|\n\
                 | {} of {}{} | {} s | {} | {} | {:.1} KiB | {} ({} s{}) | {} / {} / {} |\n",
                i.answered,
                i.connections,
                i.first_failure
                    .as_deref()
                    .map_or(String::new(), |e| format!(" (first failure: {})", one_line(e))),
                num(i.seconds_to_open),
                mib(i.rss_before_kib),
                mib(i.rss_open_kib),
                i.kib_per_connection(),
                mib(i.rss_after_kib),
                num(i.seconds_to_settle),
                if i.settled { ", settled" } else { ", still moving" },
                i.fds_before,
                i.fds_open,
                i.fds_after
            );
        }
        Err(e) => {
            let _ = writeln!(md, "n/a: {}\n", one_line(e));
        }
    }
}
