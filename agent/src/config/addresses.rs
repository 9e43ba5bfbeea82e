//! The masters' hosts resolved and compared: two masters that reach one
//! server, whatever the spelling of its address, would give it two votes
//! toward a quorum, so the config refuses them; a host that does not
//! resolve cannot be compared and is refused too.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use super::FieldError;

/// How parsing treats the masters' addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressCheck {
    /// Resolve every master's host (bounded by [`RESOLVE_TIMEOUT`]) and
    /// refuse two masters that reach the same address and port: one
    /// server's vote would count twice toward a quorum. A host that does
    /// not resolve is refused too, since it cannot be compared.
    Resolve,
    /// Neither resolve nor compare: for `check --offline` (a file checked
    /// away from the network it will run in) and for tests of the run-time
    /// detection of two masters behind one server, which need such a
    /// configuration to start.
    Skip,
}

/// The longest the same-server check waits for host names to resolve, all
/// of them at once.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// A host's addresses, or why it has none.
type Resolved = Result<Vec<SocketAddr>, String>;

/// Resolves `(host, port)` pairs, one answer each in order: [`resolve_all`],
/// or a fixed table in unit tests.
type Resolver = dyn Fn(&[(String, u16)]) -> Vec<Resolved>;

/// One master's URL, as the same-server check sees it.
#[derive(Debug, Clone)]
pub(super) struct Endpoint {
    /// `masters[i].url` or `masters[i].cluster[j]`
    pub(super) path: String,
    pub(super) name: Option<String>,
    /// Which master (`i`): a cluster's seeds are compared only with the
    /// other masters' addresses.
    pub(super) master: usize,
    pub(super) host: String,
    pub(super) port: u16,
}

impl Endpoint {
    fn describe(&self) -> String {
        match &self.name {
            Some(name) => format!("{} ({name})", self.path),
            None => self.path.clone(),
        }
    }
}

/// Reports, on the later of each pair, two masters whose hosts resolve to a
/// shared address on the same port, whatever the spelling (`localhost`,
/// `127.0.0.1`, `[::1]`) or the database number; and every host that does
/// not resolve.
pub(super) fn check_same_server(
    endpoints: &[Endpoint],
    resolve: &Resolver,
    local: &HashSet<IpAddr>,
    errors: &mut Vec<FieldError>,
) {
    let targets: Vec<(String, u16)> = endpoints.iter().map(|e| (e.host.clone(), e.port)).collect();
    let resolved = resolve(&targets);
    let mut seen: Vec<(&Endpoint, HashSet<SocketAddr>)> = Vec::new();
    for (endpoint, addrs) in endpoints.iter().zip(resolved) {
        let addrs: HashSet<SocketAddr> = match addrs {
            Ok(addrs) => addrs.into_iter().map(|a| canonical(a, local)).collect(),
            Err(why) => {
                errors.push(FieldError {
                    path: endpoint.path.clone(),
                    message: format!(
                        "cannot resolve {:?} to check that no two masters are one server: {why}",
                        endpoint.host
                    ),
                });
                continue;
            }
        };
        let mut shared: Vec<String> = Vec::new();
        let mut at: Option<SocketAddr> = None;
        for (earlier, earlier_addrs) in &seen {
            if earlier.master == endpoint.master {
                continue;
            }
            if let Some(addr) = earlier_addrs.intersection(&addrs).min() {
                shared.push(earlier.describe());
                at.get_or_insert(*addr);
            }
        }
        if let Some(addr) = at {
            let host = if addr.ip().is_loopback() {
                format!("this machine's port {}", addr.port())
            } else {
                addr.to_string()
            };
            errors.push(FieldError {
                path: endpoint.path.clone(),
                message: format!(
                    "{} reaches the same server as {} ({host}): its vote would count twice \
                     toward a quorum; list each server once",
                    endpoint.name.as_deref().unwrap_or("this master"),
                    shared.join(", "),
                ),
            });
        }
        seen.push((endpoint, addrs));
    }
}

/// The address a connection really reaches: an IPv4-mapped IPv6 address is
/// its IPv4 address, and every loopback or unspecified address, and every
/// address of this machine (`local`), is one host: a redis-server listens
/// on all of them by default.
fn canonical(addr: SocketAddr, local: &HashSet<IpAddr>) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        ip => ip,
    };
    let ip = if ip.is_loopback() || ip.is_unspecified() || local.contains(&ip) {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        ip
    };
    SocketAddr::new(ip, addr.port())
}

/// The IP addresses of this machine's interfaces (empty if they cannot be
/// listed), so that `redis://<this host's address>:P` and
/// `redis://127.0.0.1:P` are seen as one server.
pub(super) fn local_addresses() -> HashSet<IpAddr> {
    let mut local = HashSet::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs(3) gives a linked list that stays valid until
    // freeifaddrs(3); it is only read in between, each ifa_addr through the
    // sockaddr type its sa_family names.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return local;
        }
        let mut entry = head;
        while !entry.is_null() {
            let addr = (*entry).ifa_addr;
            if !addr.is_null() {
                match i32::from((*addr).sa_family) {
                    libc::AF_INET => {
                        let v4 = &*addr.cast::<libc::sockaddr_in>();
                        local.insert(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))));
                    }
                    libc::AF_INET6 => {
                        let v6 = &*addr.cast::<libc::sockaddr_in6>();
                        local.insert(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            entry = (*entry).ifa_next;
        }
        libc::freeifaddrs(head);
    }
    local
}

/// Resolves every `(host, port)` with the system resolver, in parallel,
/// giving up on those not answered within [`RESOLVE_TIMEOUT`] (their lookup
/// thread is left to finish on its own). IP literals need no lookup.
pub(super) fn resolve_all(targets: &[(String, u16)]) -> Vec<Resolved> {
    let mut results: Vec<Option<Resolved>> = vec![None; targets.len()];
    let (tx, rx) = std::sync::mpsc::channel();
    let mut pending = 0;
    for (i, (host, port)) in targets.iter().enumerate() {
        if let Ok(ip) = host.parse::<IpAddr>() {
            results[i] = Some(Ok(vec![SocketAddr::new(ip, *port)]));
            continue;
        }
        let tx = tx.clone();
        let target = (host.clone(), *port);
        let spawned = std::thread::Builder::new()
            .name("resolve".into())
            .spawn(move || {
                let answer = target
                    .to_socket_addrs()
                    .map(Iterator::collect)
                    .map_err(|e| e.to_string());
                let _ = tx.send((i, answer));
            });
        match spawned {
            Ok(_) => pending += 1,
            Err(e) => results[i] = Some(Err(format!("cannot start a lookup: {e}"))),
        }
    }
    let deadline = std::time::Instant::now() + RESOLVE_TIMEOUT;
    while pending > 0 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, answer)) => {
                results[i] = Some(answer.and_then(|addrs: Vec<SocketAddr>| {
                    if addrs.is_empty() {
                        Err("no addresses".to_string())
                    } else {
                        Ok(addrs)
                    }
                }));
                pending -= 1;
            }
            Err(_) => break,
        }
    }
    results
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(format!(
                    "no answer within {}",
                    humantime::format_duration(RESOLVE_TIMEOUT)
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::errors_of;
    use crate::config::Config;

    #[test]
    fn two_spellings_of_one_server_are_refused_with_both_paths() {
        let yaml = "masters:
  - {name: a, url: \"redis://127.0.0.1:7001\"}
  - {name: b, url: \"redis://localhost:7001\"}
  - {name: c, url: \"rediss://127.0.0.1:7001/3\"}
  - {name: d, url: \"redis://[::1]:7001\"}
  - {name: e, url: \"redis://[::ffff:127.0.0.1]:7001\"}
  - {name: f, url: \"redis://127.0.0.1:7002\"}
  - {name: g, url: \"redis://127.0.0.1:6379\"}
  - {name: h, url: \"redis://127.0.0.1\"}
";
        let errors = errors_of(yaml);
        let expected = [
            "masters[1].url: b reaches the same server as masters[0].url (a) (this machine's port 7001)",
            "masters[2].url: c reaches the same server as masters[0].url (a), masters[1].url (b) (this machine's port 7001)",
            "masters[3].url: d reaches the same server as masters[0].url (a), masters[1].url (b), masters[2].url (c)",
            "masters[4].url: e reaches the same server as masters[0].url (a), masters[1].url (b), masters[2].url (c), masters[3].url (d)",
            "masters[7].url: h reaches the same server as masters[6].url (g) (this machine's port 6379)",
        ];
        assert_eq!(errors.len(), expected.len(), "{errors:#?}");
        for (error, line) in errors.iter().zip(expected) {
            assert!(error.starts_with(line), "{error:?} is not {line:?}");
        }
        // Skipped on request (tests of the run-time detection).
        assert!(Config::from_yaml_with(yaml, AddressCheck::Skip).is_ok());
    }

    fn endpoint(i: usize, host: &str, port: u16) -> Endpoint {
        Endpoint {
            master: i,
            path: format!("masters[{i}].url"),
            name: Some(format!("r{i}")),
            host: host.to_string(),
            port,
        }
    }

    #[test]
    fn names_that_share_any_address_collide_and_unresolved_names_are_reported() {
        let resolve = |targets: &[(String, u16)]| -> Vec<Resolved> {
            targets
                .iter()
                .map(|(host, port)| {
                    let ips: &[&str] = match host.as_str() {
                        "multi" => &["10.0.0.1", "10.0.0.2"],
                        "other" => &["10.0.0.2"],
                        "third" => &["10.0.0.3"],
                        _ => return Err("name not known".to_string()),
                    };
                    Ok(ips
                        .iter()
                        .map(|ip| SocketAddr::new(ip.parse().unwrap(), *port))
                        .collect())
                })
                .collect()
        };
        let endpoints = [
            endpoint(0, "multi", 6379),
            endpoint(1, "other", 6379),
            endpoint(2, "other", 6380),
            endpoint(3, "third", 6379),
            endpoint(4, "nowhere", 6379),
        ];
        let mut errors = Vec::new();
        check_same_server(&endpoints, &resolve, &HashSet::new(), &mut errors);
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "masters[1].url: r1 reaches the same server as masters[0].url (r0) (10.0.0.2:6379): \
                 its vote would count twice toward a quorum; list each server once",
                "masters[4].url: cannot resolve \"nowhere\" to check that no two masters are one \
                 server: name not known",
            ]
        );
    }

    #[test]
    fn this_machines_addresses_are_one_host_with_loopback() {
        let local: HashSet<IpAddr> = ["192.0.2.7".parse().unwrap(), "fd00::7".parse().unwrap()]
            .into_iter()
            .collect();
        let loopback: SocketAddr = "127.0.0.1:6379".parse().unwrap();
        for addr in [
            "192.0.2.7:6379",
            "[fd00::7]:6379",
            "[::1]:6379",
            "127.0.0.5:6379",
            "[::ffff:127.0.0.1]:6379",
            "0.0.0.0:6379",
        ] {
            assert_eq!(canonical(addr.parse().unwrap(), &local), loopback, "{addr}");
        }
        let other: SocketAddr = "192.0.2.8:6379".parse().unwrap();
        assert_eq!(canonical(other, &local), other);
        assert_eq!(
            canonical("[::ffff:192.0.2.8]:6379".parse().unwrap(), &local),
            other
        );

        // The real list has loopback, and any other address of this
        // machine collides with 127.0.0.1.
        let real = local_addresses();
        assert!(real.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)), "{real:?}");
        if let Some(ip) = real.iter().find(|ip| !ip.is_loopback()) {
            let yaml = format!(
                "masters:\n  - {{name: a, url: \"redis://127.0.0.1:7001\"}}\n  - {{name: b, url: \"redis://{}:7001\"}}\n",
                SocketAddr::new(*ip, 7001).to_string().rsplit_once(':').unwrap().0
            );
            let errors = errors_of(&yaml);
            assert_eq!(errors.len(), 1, "{yaml}: {errors:?}");
            assert!(
                errors[0]
                    .starts_with("masters[1].url: b reaches the same server as masters[0].url (a)"),
                "{errors:?}"
            );
        }
    }

    #[test]
    fn ip_literals_resolve_without_a_lookup() {
        let resolved = resolve_all(&[("::1".to_string(), 1), ("10.1.2.3".to_string(), 2)]);
        assert_eq!(resolved[0], Ok(vec!["[::1]:1".parse().unwrap()]));
        assert_eq!(resolved[1], Ok(vec!["10.1.2.3:2".parse().unwrap()]));
    }
}
