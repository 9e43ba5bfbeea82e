//! The listeners' budgets of descriptors. Every listener has one, the
//! metrics port included (`metrics.max_connections`): a connection over it
//! is accepted and closed at once. At start ([`budgets`]) the agent raises
//! its open-files limit to the hard limit and checks that the budgets, the
//! refusals being answered and a reserve for the masters' connections fit
//! in it; when they do not, `socket.max_connections` (and its per-uid
//! share, in proportion) is cut to fit, and an agent whose fixed part does
//! not fit refuses to start. So running out on one listener never starves
//! the others or the masters.

use crate::config::Config;

/// Connections the admin socket serves at once. Its own budget, so an
/// application that fills `socket.max_connections` never locks operators out.
pub const ADMIN_MAX_CONNECTIONS: usize = 64;

/// Refused Unix connections being answered at once, both sockets together.
/// Each keeps its descriptor for up to two seconds while its answer is
/// written and its request drained; a refusal beyond these is closed with
/// whatever answer fits in the socket's buffer at once.
pub const REJECTS_IN_FLIGHT: usize = 64;

/// Descriptors kept for what is neither a listener's connection nor a
/// master's: standard streams, the runtime's, the listeners themselves, the
/// config and certificate files, name lookups.
pub const RESERVE_BASE: u64 = 64;

/// Descriptors kept per master (per four seeds of a Redis Cluster master,
/// whose connection reaches every shard): its shared connection and the one
/// that replaces it, the release-channel subscription, the readers of
/// listings, lock lookups and the leak scanner, with room to spare.
pub const RESERVE_PER_MASTER: u64 = 16;

/// The test-only switch that lifts the metrics port's budget, so a control
/// run can show what a flood of connections to it did before the budget.
pub use redlock_testkit::switches::NO_METRICS_BUDGET as METRICS_BUDGET_SWITCH;

/// How many connections each listener may hold, fitted to the open-files
/// limit (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// `socket.max_connections`, or less to fit the limit.
    pub app: usize,
    /// `socket.max_connections_per_uid`, cut in proportion with `app`.
    pub app_per_uid: usize,
    /// `metrics.max_connections`; `None` only under [`METRICS_BUDGET_SWITCH`].
    pub metrics: Option<usize>,
    /// Descriptors kept for the masters and the agent itself.
    pub reserve: u64,
    /// The open-files limit fitted to; `None` when there is none.
    pub limit: Option<u64>,
}

/// The open-files limit cannot hold even the fixed part of the budgets.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "the open-files limit (RLIMIT_NOFILE) is {limit}, too low: the admin socket ({ADMIN_MAX_CONNECTIONS}), \
     metrics.max_connections ({metrics}), refused connections being answered ({REJECTS_IN_FLIGHT}) and a reserve \
     for the masters ({reserve}, {masters} configured) need {fixed}, leaving nothing for socket.max_connections; raise the hard \
     limit (ulimit -Hn, LimitNOFILE= in systemd) or lower metrics.max_connections"
)]
pub struct DescriptorError {
    pub limit: u64,
    pub metrics: usize,
    pub masters: usize,
    pub reserve: u64,
    pub fixed: u64,
}

impl Budgets {
    /// The budgets of `config` within `limit` open files (`None`: no limit).
    /// Pure: [`budgets`] reads the limit and logs what it cut.
    ///
    /// # Errors
    /// When the admin socket's and the metrics port's budgets, the refusals
    /// in flight and the reserve leave no room for one connection on the
    /// application socket.
    pub fn fit(config: &Config, limit: Option<u64>) -> Result<Budgets, DescriptorError> {
        let socket = &config.socket;
        let reserve = reserve(config);
        let metrics = config.metrics.max_connections;
        let as_budget = |limit: u64| usize::try_from(limit).unwrap_or(usize::MAX);
        let app = match limit {
            None => socket.max_connections,
            Some(limit) => {
                let fixed = (ADMIN_MAX_CONNECTIONS + metrics + REJECTS_IN_FLIGHT) as u64 + reserve;
                if limit <= fixed {
                    return Err(DescriptorError {
                        limit,
                        metrics,
                        masters: config.masters.len(),
                        reserve,
                        fixed,
                    });
                }
                socket.max_connections.min(as_budget(limit - fixed))
            }
        };
        // The share keeps its proportion of the whole: a cut budget still
        // leaves room for more than one uid.
        let app_per_uid = if app == socket.max_connections {
            socket.max_connections_per_uid
        } else {
            let scaled = (socket.max_connections_per_uid as u128 * app as u128)
                .div_ceil(socket.max_connections.max(1) as u128);
            as_budget(u64::try_from(scaled).unwrap_or(u64::MAX)).clamp(1, app)
        };
        Ok(Budgets {
            app,
            app_per_uid,
            metrics: Some(metrics),
            reserve,
            limit,
        })
    }
}

/// Descriptors kept for the masters and the agent itself.
fn reserve(config: &Config) -> u64 {
    let units: u64 = config
        .masters
        .iter()
        .map(|m| {
            if m.cluster.is_empty() {
                1
            } else {
                m.cluster.len().div_ceil(4).max(1) as u64
            }
        })
        .sum();
    RESERVE_BASE + RESERVE_PER_MASTER * units
}

/// Raises the open-files limit and fits the listeners' budgets in it,
/// logging what had to be cut.
///
/// # Errors
/// When the limit cannot hold the fixed part (see [`Budgets::fit`]).
pub fn budgets(config: &Config) -> Result<Budgets, DescriptorError> {
    let limit = raise_open_files_limit();
    let mut budgets = Budgets::fit(config, limit)?;
    if budgets.app < config.socket.max_connections {
        tracing::warn!(
            limit = limit.unwrap_or(0),
            max_connections = budgets.app,
            max_connections_per_uid = budgets.app_per_uid,
            "the open-files limit (RLIMIT_NOFILE) cannot hold socket.max_connections ({}) beside the admin \
             socket, metrics.max_connections and a reserve of {} for the masters: the socket serves {} \
             connections, {} per uid; raise the hard limit (ulimit -Hn, LimitNOFILE= in systemd) or lower \
             socket.max_connections",
            config.socket.max_connections,
            budgets.reserve,
            budgets.app,
            budgets.app_per_uid
        );
    }
    if std::env::var_os(METRICS_BUDGET_SWITCH).is_some_and(|v| v == "1") {
        tracing::warn!(
            "{METRICS_BUDGET_SWITCH} is set: the metrics port takes every connection it is offered, \
             and a flood of them can starve the sockets and the masters; for control runs of the tests only"
        );
        budgets.metrics = None;
    }
    Ok(budgets)
}

/// Raises the soft limit on open files to the hard limit, so
/// `socket.max_connections` is not cut short by a low default, and returns
/// the soft limit now in force (`None`: unlimited, or unknown).
pub fn raise_open_files_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                tracing::debug!(
                    from = limit.rlim_cur,
                    to = limit.rlim_max,
                    "raised the open files limit"
                );
                limit.rlim_cur = limit.rlim_max;
            }
        }
    }
    (limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        let yaml = format!(
            "masters:\n  - {{name: r1, url: \"redis://127.0.0.1:6379\"}}\n  - {{name: r2, url: \"redis://127.0.0.1:6380\"}}\n  - {{name: r3, url: \"redis://127.0.0.1:6381\"}}\n{extra}"
        );
        Config::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    /// With room, the budgets are the config's; without, the socket's (and
    /// its per-uid share, in proportion) are cut so that every budget and
    /// the reserve fit; below the fixed part, the agent refuses to start.
    #[test]
    fn budgets_fit_the_open_files_limit() {
        let defaults = config("");
        let three = RESERVE_BASE + 3 * RESERVE_PER_MASTER;
        let roomy = Budgets::fit(&defaults, None).unwrap();
        assert_eq!(
            roomy,
            Budgets {
                app: 16_384,
                app_per_uid: 12_288,
                metrics: Some(64),
                reserve: three,
                limit: None,
            }
        );
        assert_eq!(Budgets::fit(&defaults, Some(1 << 20)).unwrap().app, 16_384);

        let fixed = (ADMIN_MAX_CONNECTIONS + 64 + REJECTS_IN_FLIGHT) as u64 + three;
        let tight = Budgets::fit(&defaults, Some(1024)).unwrap();
        assert_eq!(tight.app as u64, 1024 - fixed);
        assert_eq!(tight.app, 720);
        assert_eq!(tight.app_per_uid, 540, "three quarters, as configured");
        assert_eq!(tight.metrics, Some(64));
        let sum = (tight.app + ADMIN_MAX_CONNECTIONS + 64 + REJECTS_IN_FLIGHT) as u64 + three;
        assert!(sum <= 1024, "{sum}");

        let err = Budgets::fit(&defaults, Some(fixed)).unwrap_err();
        assert_eq!(err.fixed, fixed);
        let text = err.to_string();
        assert!(
            text.starts_with("the open-files limit (RLIMIT_NOFILE) is 304, too low"),
            "{text}"
        );
        assert!(text.contains("metrics.max_connections (64)"), "{text}");
        assert_eq!(Budgets::fit(&defaults, Some(fixed + 1)).unwrap().app, 1);

        // A smaller metrics budget leaves more to the socket; a socket
        // that fits is left as configured.
        let small = config("metrics: {max_connections: 4}\nsocket: {max_connections: 100, max_connections_per_uid: 100}\n");
        let fitted = Budgets::fit(&small, Some(1024)).unwrap();
        assert_eq!(
            (fitted.app, fitted.app_per_uid, fitted.metrics),
            (100, 100, Some(4))
        );
        let cut = Budgets::fit(&small, Some(fixed - 60 + 10)).unwrap();
        assert_eq!((cut.app, cut.app_per_uid), (10, 10));

        // A cluster master reserves for its shards too.
        let cluster = Config::from_yaml(
            "masters:\n  - {name: c1, cluster: [\"redis://127.0.0.1:7001\", \"redis://127.0.0.1:7002\", \"redis://127.0.0.1:7003\", \"redis://127.0.0.1:7004\", \"redis://127.0.0.1:7005\"]}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reserve(&cluster), RESERVE_BASE + 2 * RESERVE_PER_MASTER);
    }
}
