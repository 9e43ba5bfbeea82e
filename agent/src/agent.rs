//! The running agent: its state shared by all requests, and `run`, which
//! connects to the masters, starts the health tasks and serves until told
//! to stop.

use std::future::Future;
use std::sync::Arc;

use crate::api::server::{self, BindError, SocketListener};
use crate::config::Config;
use crate::grants::Grants;
use crate::health::{self, HealthSettings};
use crate::metrics::Metrics;
use crate::redlock::fence::{FenceSettings, CLOCK_SKEW_SWITCH, NO_WRITEBACK_SWITCH};
use crate::redlock::node::FENCE_SUFFIX;
use crate::redlock::{Drift, Node, NodeSettings, Redlock, Settings};
use crate::scanner::{ScanSettings, Scanner};
use crate::waiters::{self, Waiters};
use tokio_util::sync::CancellationToken;

/// The test-only switch that turns the in-vote marker check off, so a
/// control run can show the fault suite's checker finding the double grant
/// it prevents. An environment variable, not a config key: no deployment
/// should be able to turn it off by accident.
pub const MARKER_SWITCH: &str = "REDLOCK_TEST_NO_MARKER_CHECK";

fn marker_check_disabled() -> bool {
    std::env::var_os(MARKER_SWITCH).is_some_and(|v| v == "1")
}

/// State shared by every request.
#[derive(Debug)]
pub struct Agent {
    config: Config,
    redlock: Redlock,
    health: HealthSettings,
    metrics: Arc<Metrics>,
    grants: Grants,
    scanner: Arc<Scanner>,
    waiters: Arc<Waiters>,
    /// Turns for operator listings (`GET /v1/locks`).
    listings: crate::locks::Listings,
    /// Cancelled when the agent starts to shut down: holds end with `lost`.
    shutdown: CancellationToken,
    started: std::time::Instant,
}

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("masters[{index}].url: {source}")]
    Master {
        index: usize,
        #[source]
        source: redis::RedisError,
    },
}

impl Agent {
    /// Builds the nodes from the config; connects nothing yet.
    ///
    /// # Errors
    /// When the redis crate refuses a master URL.
    pub fn new(config: Config) -> Result<Agent, StartError> {
        // rediss:// masters use rustls with ring; installing the provider a
        // second time (another agent in this process) is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let names: Vec<String> = config.masters.iter().map(|m| m.name.clone()).collect();
        let metrics = Arc::new(Metrics::with_wait_ceiling(&names, config.lock.max_hold));
        let marker_key = format!("{}{}", config.lock.key_prefix, health::MARKER_SUFFIX);
        let marker_check = !marker_check_disabled();
        if !marker_check {
            tracing::warn!(
                "{MARKER_SWITCH} is set: votes do not check the incarnation marker, and a master \
                 that loses its keys can grant a lock twice; for control runs of the tests only"
            );
        }
        let fence = FenceSettings::from_env();
        if !fence.writeback {
            tracing::warn!(
                "{NO_WRITEBACK_SWITCH} is set: fenced grants do not raise the masters' counters, \
                 and fences can go backwards; for control runs of the tests only"
            );
        }
        if fence.clock_skew_ms != 0 {
            tracing::warn!(
                skew_ms = fence.clock_skew_ms,
                "{CLOCK_SKEW_SWITCH} is set: the fence floor reads a shifted clock; for tests only"
            );
        }
        let node_settings = NodeSettings {
            timeout: config.lock.node_timeout,
            marker_key: marker_key.clone(),
            fence_key: format!("{}{}", config.lock.key_prefix, FENCE_SUFFIX),
            marker_check,
            quarantine: if config.delayed_restart.enabled {
                config.quarantine()
            } else {
                std::time::Duration::ZERO
            },
        };
        let mut nodes = Vec::with_capacity(config.masters.len());
        for (index, master) in config.masters.iter().enumerate() {
            let client = master
                .url
                .connection_info()
                .and_then(|info| {
                    if master.tls_ca.is_none() && master.tls_client.is_none() {
                        return redis::Client::open(info);
                    }
                    redis::Client::build_with_tls(
                        info,
                        redis::TlsCertificates {
                            client_tls: master.tls_client.as_ref().map(|c| {
                                redis::ClientTlsConfig {
                                    client_cert: c.cert.clone(),
                                    client_key: c.key.clone(),
                                }
                            }),
                            root_cert: master.tls_ca.clone(),
                        },
                    )
                })
                .map_err(|source| StartError::Master { index, source })?;
            nodes.push(Arc::new(Node::new(
                master.name.clone(),
                client,
                node_settings.clone(),
                Arc::clone(&metrics),
            )));
        }
        let settings = Settings {
            key_prefix: config.lock.key_prefix.clone(),
            release_channel_prefix: waiters::release_channel(&config.lock.key_prefix, ""),
            drift: Drift::new(config.lock.drift_factor),
            retry_delay: config.lock.retry_delay,
            retry_jitter: config.lock.retry_jitter,
            agent_name: Some(config.agent.name.clone()),
            fence,
        };
        let health = HealthSettings {
            interval: config.health.interval,
            quarantine: config.quarantine(),
            delayed_restart: config.delayed_restart.enabled,
            marker_key,
            masters_fresh: false,
        };
        let scanner = Arc::new(Scanner::new(
            ScanSettings {
                config: config.leak_scan.clone(),
                key_prefix: config.lock.key_prefix.clone(),
                max_ttl: config.lock.max_ttl,
                quorum: config.quorum(),
                masters: names.clone(),
            },
            Arc::clone(&metrics),
        ));
        let shutdown = CancellationToken::new();
        let waiters = Arc::new(Waiters::new(
            config.lock.key_prefix.clone(),
            config.lock.max_waiters,
            Arc::clone(&metrics),
            shutdown.clone(),
        ));
        Ok(Agent {
            redlock: Redlock::new(nodes, settings, Arc::clone(&metrics)),
            config,
            health,
            metrics,
            grants: Grants::default(),
            scanner,
            waiters,
            listings: crate::locks::Listings::default(),
            shutdown,
            started: std::time::Instant::now(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn redlock(&self) -> &Redlock {
        &self.redlock
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    pub fn scanner(&self) -> &Scanner {
        &self.scanner
    }

    pub fn waiters(&self) -> &Waiters {
        &self.waiters
    }

    pub fn listings(&self) -> &crate::locks::Listings {
        &self.listings
    }

    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    pub fn summary(&self) -> redlock_wire::SummaryResponse {
        self.sweep_grants();
        self.metrics.summary(self.started.elapsed())
    }

    /// Forgets expired grants and sets `redlock_locks_held`.
    fn sweep_grants(&self) {
        let held = self.grants.sweep(std::time::Instant::now(), &self.metrics);
        self.metrics
            .locks_held
            .set(i64::try_from(held).unwrap_or(i64::MAX));
    }

    /// The text exposition, with the gauges that mirror node and lock state
    /// computed now.
    pub fn scrape(&self) -> Vec<u8> {
        let m = &self.metrics;
        let mut usable = 0;
        for (node, duplicate) in self.redlock.nodes().iter().zip(self.redlock.duplicates()) {
            let snap = node.snapshot();
            let state = snap.state;
            usable += usize::from(state == redlock_wire::NodeState::Up && duplicate.is_none());
            m.node_up
                .with_label_values(&[node.name()])
                .set(i64::from(state != redlock_wire::NodeState::Down));
            m.node_quarantined
                .with_label_values(&[node.name()])
                .set(i64::from(state == redlock_wire::NodeState::Quarantined));
            m.node_quarantine_remaining
                .with_label_values(&[node.name()])
                .set(snap.quarantine_remaining.as_secs_f64());
        }
        m.usable_nodes
            .set(i64::try_from(usable).unwrap_or(i64::MAX));
        m.quorum_available
            .set(i64::from(usable >= self.redlock.quorum()));
        self.sweep_grants();
        m.encode()
    }
}

/// An agent whose listeners are bound but which serves nothing yet.
#[derive(Debug)]
pub struct Bound {
    agent: Arc<Agent>,
    socket: SocketListener,
    admin: SocketListener,
    tcp: tokio::net::TcpListener,
}

impl Bound {
    /// Binds both listeners before touching any master, so a taken socket
    /// fails fast.
    ///
    /// # Errors
    /// When a listener cannot be bound or a master URL is refused.
    pub async fn bind(config: Config) -> Result<Bound, StartError> {
        Bound::bind_with(config, false).await
    }

    /// As [`Bound::bind`]; `masters_fresh` says this process started the
    /// masters empty (`redlock-agent dev`, tests), so their low uptime at
    /// first sight is no reason for quarantine.
    ///
    /// # Errors
    /// When a listener cannot be bound or a master URL is refused.
    pub async fn bind_with(config: Config, masters_fresh: bool) -> Result<Bound, StartError> {
        let mut agent = Agent::new(config)?;
        agent.health.masters_fresh = masters_fresh;
        let agent = Arc::new(agent);
        let config = agent.config();
        server::raise_open_files_limit();
        let socket = SocketListener::bind(&config.socket.path, config.socket.mode).await?;
        let admin =
            SocketListener::bind(&config.admin.socket.path, config.admin.socket.mode).await?;
        let tcp = server::bind_tcp(config.metrics.listen).await?;
        Ok(Bound {
            agent,
            socket,
            admin,
            tcp,
        })
    }

    pub fn agent(&self) -> &Arc<Agent> {
        &self.agent
    }

    /// The metrics address actually bound (useful with port 0).
    ///
    /// # Panics
    /// Never in practice: a bound TCP listener has a local address.
    pub fn metrics_addr(&self) -> std::net::SocketAddr {
        self.tcp
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Probes every master once, starts the health tasks, serves until
    /// `shutdown` resolves, then drains.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let Bound {
            agent,
            socket,
            admin,
            tcp,
        } = self;
        let nodes = agent.redlock().nodes();
        let settings = Arc::new(agent.health.clone());
        let peers: Arc<[Arc<Node>]> = nodes.to_vec().into();
        futures::future::join_all(nodes.iter().map(|n| health::probe(n, &peers, &settings))).await;
        for (node, duplicate) in nodes.iter().zip(agent.redlock().duplicates()) {
            if let Some(first) = duplicate {
                tracing::warn!(
                    node = node.name(),
                    same_as = nodes[first].name(),
                    "two configured masters reach one server (same run_id): counted once"
                );
            }
        }
        let mut tasks: Vec<_> = nodes
            .iter()
            .map(|node| {
                tokio::spawn(health::watch(
                    Arc::clone(node),
                    Arc::clone(&peers),
                    Arc::clone(&settings),
                ))
            })
            .collect();
        tasks.push(tokio::spawn(Arc::clone(&agent.scanner).run(nodes.to_vec())));
        for node in nodes {
            tasks.push(tokio::spawn(waiters::listen(
                Arc::clone(node),
                Arc::clone(&agent.waiters),
            )));
        }

        let status = crate::api::routes::nodes_response(&agent);
        tracing::info!(
            socket = %socket.path().display(),
            admin_socket = %admin.path().display(),
            agent_name = %agent.config().agent.name,
            metrics = %tcp.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            masters = agent.redlock().nodes().len(),
            usable = status.usable,
            quorum = status.quorum,
            "serving"
        );
        if !status.available {
            tracing::warn!(
                detail = %agent.redlock().describe_unusable(),
                "no quorum yet; acquire answers no_quorum until enough masters are up"
            );
        }

        let token = agent.shutdown_token();
        server::serve(Arc::clone(&agent), socket, admin, tcp, async move {
            shutdown.await;
            // Holds end first (lost, then released), so the drain can finish.
            token.cancel();
        })
        .await;
        for task in tasks {
            task.abort();
        }
        tracing::info!("stopped");
    }
}

/// Runs the agent until `shutdown` resolves.
///
/// # Errors
/// When a listener cannot be bound or a master URL is refused.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), StartError> {
    Bound::bind(config).await?.serve(shutdown).await;
    Ok(())
}
