//! The health task's commands on one master: its identity (`INFO`), its
//! topology, the incarnation marker, the quarantine witness and
//! readmission. Bounded by the probe timeout, not the node timeout.

use std::time::{Duration, Instant};

use redis::{ErrorKind, InfoDict, ServerErrorKind};

use super::Conn;

use super::{
    scripts, ttl_ms, Detector, Identity, Node, MARKER_SUFFIX, MARKER_VALUE, WITNESS_SUFFIX,
};
use crate::redlock::master::NodeError;
use crate::redlock::observe::Op;

impl Node {
    /// Ends a quarantine whose time ran out: rewrites the marker first, so
    /// every agent that sees it from now on may trust this master's keys.
    /// Only an agent that kept the master out for the whole period does
    /// this; every lock the master may have held before it lost its keys has
    /// expired by then.
    ///
    /// The marker is written only where this agent's quarantine witness
    /// is still on the master: it proves that nothing was lost since the
    /// quarantine began. Without it (another loss during the quarantine,
    /// perhaps after another agent readmitted the master and it voted
    /// again), the quarantine starts over.
    ///
    /// `catch_up`: the highest fencing counter read from the other masters
    /// (see [`crate::health`]); this master's counter is raised to it in the
    /// same step, so it never votes with a counter below a fence granted
    /// while it was away.
    ///
    /// True when the node takes part in locks again.
    ///
    /// # Errors
    /// When the master does not take the write; the node stays quarantined.
    pub(crate) async fn readmit(&self, conn: &Conn, catch_up: u64) -> Result<bool, NodeError> {
        // Present already: another agent readmitted it first (by this same
        // rule), or a replica has its master's (its votes fail READONLY
        // anyway). Only the counter's catch-up to write (a replica refuses
        // it; its votes would fail anyway).
        let witness = self.lock().witness.clone();
        if self.marker_present(conn).await? {
            let fence_key = self.fence_key.as_str();
            let raised = self
                .request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
                    scripts::RAISE_FENCE
                        .key(fence_key)
                        .arg(catch_up.to_string())
                        .invoke_async::<i64>(&mut conn)
                        .await
                })
                .await;
            match raised {
                Ok(_) | Err(NodeError::ReadOnly) => {}
                Err(e) => return Err(e),
            }
            if let Some(witness) = witness {
                let _ = self.delete_key(conn, &witness).await;
            }
            self.lock().readmit = false;
            return Ok(true);
        }
        let Some(witness) = witness else {
            // No witness could be written yet: keep waiting for one.
            return Ok(false);
        };
        let (marker, fence_key) = (self.marker_key.as_str(), self.fence_key.as_str());
        let written = self
            .request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
                scripts::READMIT
                    .key(marker)
                    .key(&witness)
                    .key(fence_key)
                    .arg(MARKER_VALUE)
                    .arg(catch_up.to_string())
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await?;
        if written == 1 {
            let mut inner = self.lock();
            inner.readmit = false;
            inner.witness = None;
            Ok(true)
        } else {
            self.witness_lost();
            Ok(false)
        }
    }

    /// Checks, at every probe of a quarantine, that this quarantine's
    /// witness is still on the master. Gone, the master lost keys again
    /// (a restart, a flush, an eviction that is still going on): the
    /// quarantine starts over now, with a new witness written in the same
    /// probe, rather than at the end of a period the loss already spoiled.
    /// A master that keeps evicting for a while is thus readmitted one
    /// quarantine after its last loss, not two.
    ///
    /// # Errors
    /// When the master does not answer; checked again at the next probe.
    pub(crate) async fn check_witness(&self, conn: &Conn) -> Result<(), NodeError> {
        let witness = {
            let inner = self.lock();
            match &inner.witness {
                Some(witness) if inner.readmit => witness.clone(),
                _ => return Ok(()),
            }
        };
        let present = self
            .request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
                redis::cmd("EXISTS")
                    .arg(&witness)
                    .query_async::<i64>(&mut conn)
                    .await
            })
            .await?;
        if present == 0 {
            self.witness_lost();
        }
        Ok(())
    }

    /// The quarantine's witness is gone: the master lost its keys since
    /// the quarantine began, and the quarantine starts over.
    fn witness_lost(&self) {
        tracing::warn!(
            node = %self.name,
            "the master lost its keys again while quarantined: the quarantine starts over"
        );
        let mut inner = self.lock();
        inner.witness = None;
        inner.quarantine_until = Some(Instant::now() + self.quarantine);
        inner.quarantine_len = self.quarantine;
        inner.detector = Some(Detector::Marker);
        drop(inner);
        self.restart_detected(Detector::Marker);
    }

    /// Whether the current quarantine still needs its witness written.
    pub(crate) fn needs_witness(&self) -> bool {
        let inner = self.lock();
        inner.readmit && inner.witness.is_none()
    }

    /// Writes this quarantine's witness, a key with a random name under the
    /// prefix that any later loss of the master's keys removes, and counts
    /// the quarantine from now: readmission needs the whole period to pass
    /// after the witness, so a loss between the start of the quarantine and
    /// this write is waited out too. Its TTL outlasts the quarantine; should
    /// the master stay unreachable longer, the quarantine just starts over.
    ///
    /// # Errors
    /// When the master does not take the write; tried again at the next probe.
    pub(crate) async fn write_witness(&self, conn: &Conn) -> Result<(), NodeError> {
        let key = format!(
            "{}{}",
            self.marker_key.trim_end_matches(MARKER_SUFFIX),
            crate::redlock::token::random_id()
        );
        let key = format!("{key}{WITNESS_SUFFIX}");
        let ttl = self.quarantine * 2 + Duration::from_secs(60);
        let written = key.clone();
        self.request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
            redis::cmd("SET")
                .arg(&written)
                .arg("redlock-agent quarantine witness")
                .arg("PX")
                .arg(ttl_ms(ttl))
                .query_async::<()>(&mut conn)
                .await
        })
        .await?;
        let mut inner = self.lock();
        let until = Instant::now() + self.quarantine;
        if inner.quarantine_until.is_none_or(|u| u < until) {
            inner.quarantine_until = Some(until);
            inner.quarantine_len = self.quarantine;
        }
        inner.witness = Some(key);
        Ok(())
    }

    async fn delete_key(&self, conn: &Conn, key: &str) -> Result<(), NodeError> {
        self.request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
            redis::cmd("DEL")
                .arg(key)
                .query_async::<()>(&mut conn)
                .await
        })
        .await
    }

    /// The health task finished a probe, answered or not.
    pub(crate) fn probed(&self) {
        self.probed.send_replace(Some(Instant::now()));
    }

    /// When the health task last finished a probe.
    pub(crate) fn probed_at(&self) -> Option<Instant> {
        *self.probed.borrow()
    }

    /// Makes sure the node's state is no older than `max_age`: when the
    /// last probe is older (an idle agent probes seldom, see
    /// [`crate::lock::idle`]), wakes the health task and waits for its
    /// probe, at most `wait`. Readers of the state (readiness, `/v1/nodes`,
    /// metrics) call it first, so an idle agent's answer is as fresh as a
    /// busy one's.
    pub async fn fresh(&self, max_age: Duration, wait: Duration) {
        let mut probed = self.probed.subscribe();
        if probed
            .borrow_and_update()
            .is_some_and(|at| at.elapsed() <= max_age)
        {
            return;
        }
        self.wake.notify_one();
        let _ = tokio::time::timeout(wait, probed.changed()).await;
    }

    /// Counts one more probe timeout and says whether it is the second in a
    /// row: one late answer under the agent's own load is not a dead master.
    pub(crate) fn probe_timed_out(&self) -> bool {
        let mut inner = self.lock();
        inner.probe_timeouts += 1;
        inner.probe_timeouts >= 2
    }

    pub(crate) fn restart_detected(&self, detector: Detector) {
        self.observer.restart(detector.as_str());
    }

    pub(crate) fn set_identity(&self, identity: Option<Identity>) {
        use std::hash::{Hash, Hasher};
        let server_id = identity.as_ref().map(|i| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            i.run_id.hash(&mut hasher);
            hasher.finish()
        });
        let mut inner = self.lock();
        inner.identity = identity;
        inner.server_id = server_id;
    }

    pub(crate) fn set_topology(&self, warnings: Vec<String>, persistence: Option<String>) {
        let mut inner = self.lock();
        inner.warnings = warnings;
        inner.persistence = persistence;
    }

    /// True the first time it is called: the first probe that answered.
    pub(crate) fn first_sight(&self) -> bool {
        !std::mem::replace(&mut self.lock().seen, true)
    }

    /// `INFO server` and `INFO stats`, timed: the process identity, or
    /// `None` when an ACL refuses INFO. Used by the health task, with a
    /// longer bound than lock requests ([`Node::probe_timeout`]): a probe
    /// queued behind the agent's own burst of requests is late, not failed.
    ///
    /// `marker`: `Some(last_evicted)` to check the incarnation marker in
    /// the same round trip (see [`Node::check_marker`]); its answer is
    /// [`ProbeReply::marker`]. One round trip per probe: what an idle
    /// fleet costs its masters is mostly the round trips themselves.
    ///
    /// # Errors
    /// When the master does not answer in time or the connection fails.
    ///
    /// `known`: an idle agent's probe on the connection the last probe
    /// answered on, so a process the agent knows may answer through this
    /// node's probe script ([`Node::probe_known`]) instead of `INFO`. A
    /// busy agent's probes read `INFO` every time: their cost is the
    /// agent's work's, and they keep the same answers through a proxy that
    /// keeps the connection across a restart.
    pub async fn probe_identity(
        &self,
        conn: &Conn,
        marker: Option<Option<u64>>,
        known: bool,
    ) -> Result<ProbeReply, NodeError> {
        if known {
            if let Some(reply) = self.probe_known(conn, marker).await? {
                return Ok(reply);
            }
        }
        let start = Instant::now();
        let sent = super::clock::since_boot();
        let mut pipe = redis::pipe();
        pipe.ignore_errors()
            .cmd("INFO")
            .arg("server")
            .cmd("INFO")
            .arg("stats");
        if let Some(last_evicted) = marker {
            pipe.cmd("EVALSHA")
                .arg(scripts::CHECK_MARKER.get_hash())
                .arg(1)
                .arg(self.marker_key.as_str())
                .arg(MARKER_VALUE)
                .arg(last_evicted.map_or_else(String::new, |n| n.to_string()))
                .arg(if self.eviction_check { "1" } else { "0" });
        }
        let replies = self
            .request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
                pipe.query_async::<Vec<redis::RedisResult<redis::Value>>>(&mut conn)
                    .await
            })
            .await;
        let latency = start.elapsed();
        let received = super::clock::since_boot();
        let mut replies = match replies {
            Ok(replies) => replies.into_iter(),
            Err(NodeError::Timeout(_)) => return Err(NodeError::Timeout(self.probe_timeout())),
            Err(e) => return Err(e),
        };
        let mut info = || -> Result<Option<InfoDict>, NodeError> {
            match replies.next() {
                Some(Ok(value)) => redis::from_redis_value(value)
                    .map(Some)
                    .map_err(|e| NodeError::Other(format!("a probe's answer: {e}"))),
                Some(Err(e)) => match self.classify(&e) {
                    NodeError::NoPerm(_) => Ok(None),
                    other => Err(other),
                },
                None => Err(NodeError::Other("a probe answered short".into())),
            }
        };
        let (server, stats) = (info()?, info()?);
        if let Some(master_us) = server.as_ref().and_then(|s| s.get("server_time_usec")) {
            self.clock_reading(super::clock::Sample {
                sent,
                received,
                master_us,
            });
        }
        let identity = server.zip(stats).and_then(|(server, stats)| {
            if let Some(major) = server
                .get::<String>("redis_version")
                .and_then(|v| v.split('.').next()?.parse::<u32>().ok())
            {
                self.lock().set_get = major >= 7;
            }
            Some(Identity {
                run_id: server.get("run_id")?,
                uptime: Duration::from_secs(server.get("uptime_in_seconds")?),
                evicted_keys: stats.get("evicted_keys"),
            })
        });
        let marker = match replies.next() {
            None => None,
            Some(Ok(value)) => Some(
                redis::from_redis_value::<i64>(value)
                    .map(marker_detector)
                    .map_err(|e| NodeError::Other(format!("a probe's answer: {e}"))),
            ),
            // Not loaded (a restarted master, a SCRIPT FLUSH): checked on
            // its own, which loads it.
            Some(Err(e)) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => None,
            Some(Err(e)) => Some(Err(self.classify(&e))),
        };
        Ok(ProbeReply {
            latency,
            identity,
            marker,
        })
    }

    /// The probe of a process this agent knows: one call of this node's
    /// probe script ([`scripts::probe`]), whose answer carries the marker
    /// check and the master's clock; the `run_id` and `redis_version` are
    /// the last `INFO`'s, `evicted_keys` is unknown unless the marker had no
    /// count (see [`scripts::probe`]), and the uptime has grown by the time
    /// since the last probe. `None` when there is no known
    /// identity or copy of the script, or the master answered NOSCRIPT (a
    /// new process, or `SCRIPT FLUSH`): the script is loaded then, before
    /// the caller reads `INFO server`, so a restart between the two shows
    /// as a new `run_id`. While the standby scanner's looks are folded into
    /// the probes, the call reads its keys too (see `super::leak::Look`).
    ///
    /// # Errors
    /// When the master does not answer in time or the connection fails.
    async fn probe_known(
        &self,
        conn: &Conn,
        marker: Option<Option<u64>>,
    ) -> Result<Option<ProbeReply>, NodeError> {
        let (Some(script), Some(before)) = (&self.probe_script, self.snapshot().identity) else {
            return Ok(None);
        };
        let start = Instant::now();
        let since = self.probed_at().map_or(Duration::ZERO, |at| at.elapsed());
        let sent = super::clock::since_boot();
        let look = self.look_keys();
        let mut call = redis::cmd("EVALSHA");
        call.arg(script.get_hash())
            .arg(if look.is_some() { 3 } else { 1 })
            .arg(self.marker_key.as_str());
        if let Some((report_key, lease_key)) = &look {
            call.arg(report_key).arg(lease_key);
        }
        call.arg(MARKER_VALUE)
            .arg(marker.flatten().map_or_else(String::new, |n| n.to_string()))
            .arg(if self.eviction_check { "1" } else { "0" })
            .arg(if marker.is_some() { "1" } else { "0" });
        let answer = self
            .request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
                match call.query_async::<String>(&mut conn).await {
                    Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                        script.prepare_invoke().load_async(&mut conn).await?;
                        Ok(None)
                    }
                    answer => answer.map(Some),
                }
            })
            .await;
        let answer = match answer {
            Ok(Some(answer)) => answer,
            Ok(None) => return Ok(None),
            Err(NodeError::Timeout(_)) => return Err(NodeError::Timeout(self.probe_timeout())),
            Err(e) => return Err(e),
        };
        let received = super::clock::since_boot();
        // The report, last, may hold anything: the rest of the answer.
        let mut lines = answer.splitn(5, '\n');
        let status = lines.next().unwrap_or_default();
        // Read only for a marker without its count, else unknown: the first
        // busy probe after an idle spell then leaves evictions to its marker
        // check, rather than quarantine again for one the votes dealt with.
        let evicted_keys = lines.next().and_then(|n| n.parse().ok());
        let clock = lines.next().and_then(|now| {
            let (secs, micros) = now.split_once(' ')?;
            Some(secs.parse::<u64>().ok()? * 1_000_000 + micros.parse::<u64>().ok()?)
        });
        if let (Some(_), Some(leased), Some(report)) = (&look, lines.next(), lines.next()) {
            let report = report.strip_prefix('+').map(str::to_string);
            self.looked(report, leased == "1");
        }
        if let Some(master_us) = clock {
            self.clock_reading(super::clock::Sample {
                sent,
                received,
                master_us,
            });
        }
        let marker = marker.map(|_| {
            status
                .parse::<i64>()
                .map(marker_detector)
                .map_err(|e| NodeError::Other(format!("a probe's answer {status:?}: {e}")))
        });
        Ok(Some(ProbeReply {
            latency: start.elapsed(),
            identity: Some(Identity {
                uptime: before.uptime + since,
                evicted_keys,
                ..before
            }),
            marker,
        }))
    }

    /// The bound on a health probe: the connect timeout (ten node timeouts,
    /// 200ms to 2s).
    pub fn probe_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// A handle on `conn` whose requests are bounded by the probe timeout.
    fn probe_conn(&self, conn: &Conn) -> Conn {
        let mut conn = conn.clone();
        conn.set_response_timeout(self.probe_timeout());
        conn
    }

    /// The whole `INFO`, for topology checks. `None` when an ACL refuses
    /// it.
    ///
    /// # Errors
    /// When the master does not answer in time or the connection fails.
    pub async fn info(&self, conn: &Conn) -> Result<Option<InfoDict>, NodeError> {
        match self
            .request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
                redis::cmd("INFO").query_async::<InfoDict>(&mut conn).await
            })
            .await
        {
            Ok(info) => Ok(Some(info)),
            Err(NodeError::NoPerm(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What the topology check reads, in one round trip: the whole `INFO`
    /// (`None` when refused) and the `appendonly`, `appendfsync` and `save`
    /// parameters (each `None` when refused or unknown).
    ///
    /// # Errors
    /// When the master does not answer in time or the connection fails.
    pub async fn topology(&self, conn: &Conn) -> Result<Topology, NodeError> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors().cmd("INFO");
        for name in ["appendonly", "appendfsync", "save"] {
            pipe.cmd("CONFIG").arg("GET").arg(name);
        }
        let replies = self
            .request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
                pipe.query_async::<Vec<redis::RedisResult<redis::Value>>>(&mut conn)
                    .await
            })
            .await?;
        let mut replies = replies.into_iter().map(Result::ok);
        let info = replies
            .next()
            .flatten()
            .and_then(|info| redis::from_redis_value(info).ok());
        let mut config = replies.map(|reply| {
            let pair: Vec<String> = redis::from_redis_value(reply?).ok()?;
            pair.into_iter().nth(1)
        });
        Ok(Topology {
            info,
            appendonly: config.next().flatten(),
            appendfsync: config.next().flatten(),
            save: config.next().flatten(),
        })
    }

    /// Whether the incarnation marker is there. A probe never writes the
    /// marker, only `Node::readmit` does (and the first sight of masters
    /// this process started empty).
    ///
    /// # Errors
    /// When the master does not answer in time or refuses the read.
    pub async fn marker_present(&self, conn: &Conn) -> Result<bool, NodeError> {
        let key = self.marker_key.as_str();
        self.request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
            redis::cmd("EXISTS")
                .arg(key)
                .query_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(|n| n == 1)
    }

    /// The probe's check of the marker, with the votes' eviction check
    /// (see [`scripts::CHECK_MARKER`]): `Ok(None)` when it may be trusted,
    /// `Some(Detector::Marker)` when it is missing, `Some(Detector::Eviction)`
    /// when the master evicted keys since it was written (the marker is
    /// then deleted, so every agent sees the loss). A marker an older agent
    /// wrote without an eviction count gets one where this probe and the
    /// last one read the same count.
    ///
    /// # Errors
    /// When the master does not answer in time or refuses the script.
    pub(crate) async fn check_marker(
        &self,
        conn: &Conn,
        last_evicted: Option<u64>,
    ) -> Result<Option<Detector>, NodeError> {
        let key = self.marker_key.as_str();
        let last = last_evicted.map_or_else(String::new, |n| n.to_string());
        let check = if self.eviction_check { "1" } else { "0" };
        let answer = self
            .request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
                scripts::CHECK_MARKER
                    .key(key)
                    .arg(MARKER_VALUE)
                    .arg(last)
                    .arg(check)
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await?;
        Ok(marker_detector(answer))
    }

    /// Writes the incarnation marker with the master's eviction count (see
    /// [`scripts::MARKER_EVICTIONS`]). No TTL: it must outlive every lock.
    ///
    /// # Errors
    /// When the master does not answer in time or refuses the write.
    pub(crate) async fn write_marker(&self, conn: &Conn) -> Result<(), NodeError> {
        let key = self.marker_key.as_str();
        self.request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
            scripts::MARKER_EVICTIONS
                .key(key)
                .arg(MARKER_VALUE)
                .invoke_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(|_| ())
    }
}

/// What the topology check read (see [`Node::topology`]); nothing where
/// the master did not answer.
#[derive(Debug, Default)]
pub struct Topology {
    pub info: Option<InfoDict>,
    pub appendonly: Option<String>,
    pub appendfsync: Option<String>,
    pub save: Option<String>,
}

/// What one health probe read in its round trip.
#[derive(Debug)]
pub struct ProbeReply {
    pub latency: Duration,
    /// `None` when an ACL refuses `INFO`.
    pub identity: Option<Identity>,
    /// The marker check's answer, when it was asked for and its script
    /// was loaded (else it is checked on its own): `Ok(None)` when the
    /// marker may be trusted.
    pub marker: Option<Result<Option<Detector>, NodeError>>,
}

/// What [`scripts::CHECK_MARKER`]'s answer means: `None` when the marker
/// may be trusted, else the detector that saw the loss.
fn marker_detector(answer: i64) -> Option<Detector> {
    match answer {
        1 => None,
        -3 => Some(Detector::Eviction),
        _ => Some(Detector::Marker),
    }
}
