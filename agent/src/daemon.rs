//! Running the agent: bind the listeners, start the background tasks,
//! serve until told to stop, then drain. The one place that ties the
//! agent's state ([`crate::agent`]) to its listeners ([`crate::api`]).

use std::future::Future;
use std::sync::Arc;

use crate::agent::{Agent, MasterUrlError};
use crate::api::server::{self, BindError, Budgets, DescriptorError, SocketListener};
use crate::config::Config;

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error(transparent)]
    Master(MasterUrlError),
    #[error(transparent)]
    Descriptors(#[from] DescriptorError),
}

/// An agent whose listeners are bound but which serves nothing yet.
#[derive(Debug)]
pub struct Bound {
    agent: Arc<Agent>,
    socket: SocketListener,
    admin: SocketListener,
    tcp: tokio::net::TcpListener,
    budgets: Budgets,
}

impl Bound {
    /// Binds both listeners before touching any master, so a taken socket
    /// fails fast.
    ///
    /// # Errors
    /// When a listener cannot be bound, a master URL is refused, or the
    /// open-files limit cannot hold the listeners' budgets.
    pub async fn bind(config: Config) -> Result<Bound, StartError> {
        Bound::bind_with(config, false).await
    }

    /// As [`Bound::bind`]; `masters_fresh` says this process started the
    /// masters empty (`redlock-agent dev`, tests), so their low uptime at
    /// first sight is no reason for quarantine.
    ///
    /// # Errors
    /// When a listener cannot be bound, a master URL is refused, or the
    /// open-files limit cannot hold the listeners' budgets.
    pub async fn bind_with(config: Config, masters_fresh: bool) -> Result<Bound, StartError> {
        let mut agent = Agent::new(config).map_err(StartError::Master)?;
        agent.health.masters_fresh = masters_fresh;
        let agent = Arc::new(agent);
        let config = agent.config();
        let budgets = server::budgets(config)?;
        let socket = SocketListener::bind(&config.socket.path, config.socket.mode).await?;
        let admin =
            SocketListener::bind(&config.admin.socket.path, config.admin.socket.mode).await?;
        let tcp = server::bind_tcp(config.metrics.listen).await?;
        Ok(Bound {
            agent,
            socket,
            admin,
            tcp,
            budgets,
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
            budgets,
        } = self;
        let tasks = agent.start().await;

        let status = agent.nodes();
        tracing::info!(
            socket = %socket.path().display(),
            admin_socket = %admin.path().display(),
            agent_name = %agent.config().agent.name,
            metrics = %tcp.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            masters = agent.engine().nodes().len(),
            max_connections = budgets.app,
            metrics_max_connections = budgets.metrics.unwrap_or(0),
            open_files = budgets.limit.unwrap_or(0),
            usable = status.usable,
            quorum = status.quorum,
            "serving"
        );
        if !status.available {
            tracing::warn!(
                detail = %agent.engine().describe_unusable(),
                "no quorum yet; acquire answers no_quorum until enough masters are up"
            );
        }

        let token = agent.locks().shutdown_token();
        server::serve(
            Arc::clone(&agent),
            socket,
            admin,
            tcp,
            budgets,
            async move {
                shutdown.await;
                // Holds end first (lost, then released), so the drain can finish.
                token.cancel();
            },
        )
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
/// When a listener cannot be bound, a master URL is refused, or the
/// open-files limit cannot hold the listeners' budgets.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), StartError> {
    Bound::bind(config).await?.serve(shutdown).await;
    Ok(())
}
