//! DNS SRV lookups: where `--discovery-srv` finds a cluster's members
//! (`_etcd-server-ssl._tcp.<domain>`, `_etcd-server._tcp.<domain>`) and
//! oxetcdctl its endpoints (`_etcd-client-ssl._tcp…`, `_etcd-client._tcp…`).
//!
//! Design: one query over UDP to each name server in turn, built and
//! parsed by `simple-dns`, with a short timeout and one retry per server.
//! The name servers are `/etc/resolv.conf`'s (read by `resolv-conf`), or
//! the `host:port` list in the `OXETCD_DNS_SERVER` variable, which points
//! oxetcd at a DNS server of one's choosing (tests start one on
//! 127.0.0.1). This is the only module of the crate that does I/O; its
//! calls block, so servers make them on a blocking thread.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use simple_dns::rdata::RData;
use simple_dns::{Name, Packet, PacketFlag, Question, CLASS, RCODE, TYPE};

/// The variable naming the DNS servers to ask instead of the system's.
pub const DNS_SERVER_VARIABLE: &str = "OXETCD_DNS_SERVER";

/// How long one server has to answer one query.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// Queries sent to each server before the next is tried.
const ATTEMPTS: usize = 2;

/// Largest answer read (EDNS is not asked for, so a UDP answer is at most
/// 512 bytes; the slack costs nothing).
const ANSWER_BYTES_MAX: usize = 4096;

/// One SRV record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SrvRecord {
    /// Lower first.
    pub priority: u16,
    /// Higher first among equal priorities.
    pub weight: u16,
    /// The service's port on the target.
    pub port: u16,
    /// The target host, without the trailing dot.
    pub target: String,
}

/// The SRV service name etcd looks up: `_<service>[-ssl][-<suffix>]._tcp.<domain>`
/// (`suffix` is `--discovery-srv-name`, empty for none).
pub fn service_name(service: &str, secure: bool, suffix: &str, domain: &str) -> String {
    let ssl = if secure { "-ssl" } else { "" };
    let suffix = if suffix.is_empty() {
        String::new()
    } else {
        format!("-{suffix}")
    };
    format!(
        "_{service}{ssl}{suffix}._tcp.{}",
        domain.trim_end_matches('.')
    )
}

/// The SRV records of `name`, by priority then weight; an error when no
/// server answered or the name has none.
pub fn lookup_srv(name: &str) -> Result<Vec<SrvRecord>, String> {
    let servers = name_servers()?;
    let query = query(name)?;
    let mut last = format!("lookup {name}: no DNS server to ask");
    for server in servers {
        for _ in 0..ATTEMPTS {
            match ask(server, &query) {
                Ok(answer) => {
                    return records(name, &answer, u16::from_be_bytes([query[0], query[1]]))
                }
                Err(e) => last = format!("lookup {name} on {server}: {e}"),
            }
        }
    }
    Err(last)
}

/// `OXETCD_DNS_SERVER`'s servers if set, else `/etc/resolv.conf`'s (on
/// port 53), else the local resolver.
fn name_servers() -> Result<Vec<SocketAddr>, String> {
    if let Ok(list) = std::env::var(DNS_SERVER_VARIABLE) {
        return crate::split_list(&list)
            .map(|s| {
                s.parse::<SocketAddr>()
                    .map_err(|e| format!("{DNS_SERVER_VARIABLE}={list}: {s}: {e}"))
            })
            .collect();
    }
    let servers = match std::fs::read("/etc/resolv.conf") {
        Ok(text) => resolv_conf::Config::parse(text)
            .map(|config| {
                config
                    .nameservers
                    .iter()
                    .map(|ip| SocketAddr::new(IpAddr::from(ip), 53))
                    .collect()
            })
            .unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    if servers.is_empty() {
        return Ok(vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 53)]);
    }
    Ok(servers)
}

/// A recursive query for `name`'s SRV records, with a fresh ID.
fn query(name: &str) -> Result<Vec<u8>, String> {
    let id = fresh_id();
    let mut packet = Packet::new_query(id);
    packet.set_flags(PacketFlag::RECURSION_DESIRED);
    let qname = Name::new(name).map_err(|e| format!("{name}: {e}"))?;
    packet.questions.push(Question::new(
        qname,
        TYPE::SRV.into(),
        CLASS::IN.into(),
        false,
    ));
    packet.build_bytes_vec().map_err(|e| format!("{name}: {e}"))
}

/// A query ID no one can guess from outside the process: the low bits of
/// a randomly keyed hash of the time.
fn fresh_id() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish() as u16
}

/// Sends `query` to `server` and waits for an answer with its ID.
fn ask(server: SocketAddr, query: &[u8]) -> std::io::Result<Vec<u8>> {
    let local: SocketAddr = match server {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local)?;
    socket.connect(server)?;
    socket.set_read_timeout(Some(QUERY_TIMEOUT))?;
    socket.send(query)?;
    let mut buffer = vec![0; ANSWER_BYTES_MAX];
    // Datagrams that are not our answer (a late one, a stray) are skipped;
    // the read timeout bounds each wait and the count bounds the loop.
    for _ in 0..8 {
        let n = socket.recv(&mut buffer)?;
        if n >= 2 && buffer[..2] == query[..2] {
            buffer.truncate(n);
            return Ok(buffer);
        }
    }
    Err(std::io::Error::other("no answer to this query"))
}

/// The SRV records in `answer`.
fn records(name: &str, answer: &[u8], id: u16) -> Result<Vec<SrvRecord>, String> {
    let packet = Packet::parse(answer).map_err(|e| format!("lookup {name}: {e}"))?;
    if packet.id() != id {
        return Err(format!("lookup {name}: an answer to another query"));
    }
    match packet.rcode() {
        RCODE::NoError => {}
        RCODE::NameError => return Err(format!("lookup {name}: no such host")),
        other => return Err(format!("lookup {name}: server answered {other:?}")),
    }
    let mut records: Vec<SrvRecord> = packet
        .answers
        .iter()
        .filter_map(|record| match &record.rdata {
            RData::SRV(srv) => Some(SrvRecord {
                priority: srv.priority,
                weight: srv.weight,
                port: srv.port,
                target: srv.target.to_string().trim_end_matches('.').to_owned(),
            }),
            _ => None,
        })
        .collect();
    if records.is_empty() {
        return Err(format!("lookup {name}: no SRV records"));
    }
    records.sort_by_key(|r| (r.priority, std::cmp::Reverse(r.weight)));
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use simple_dns::rdata::SRV;
    use simple_dns::ResourceRecord;

    #[test]
    fn service_names_are_etcds() {
        assert_eq!(
            service_name("etcd-server", true, "", "example.com."),
            "_etcd-server-ssl._tcp.example.com"
        );
        assert_eq!(
            service_name("etcd-client", false, "blue", "example.com"),
            "_etcd-client-blue._tcp.example.com"
        );
    }

    #[test]
    fn answers_are_parsed_and_ordered() {
        let query = query("_etcd-server._tcp.example.com").unwrap();
        let id = u16::from_be_bytes([query[0], query[1]]);
        let mut reply = Packet::new_reply(id);
        let name = Name::new("_etcd-server._tcp.example.com").unwrap();
        for (priority, weight, port, target) in [
            (10, 5, 3, "c.example.com."),
            (0, 1, 1, "a.example.com."),
            (0, 9, 2, "b.example.com."),
        ] {
            reply.answers.push(ResourceRecord::new(
                name.clone(),
                CLASS::IN,
                60,
                RData::SRV(SRV {
                    priority,
                    weight,
                    port,
                    target: Name::new(target).unwrap(),
                }),
            ));
        }
        let bytes = reply.build_bytes_vec().unwrap();
        let found = records("x", &bytes, id).unwrap();
        let ports: Vec<u16> = found.iter().map(|r| r.port).collect();
        assert_eq!(ports, [2, 1, 3]);
        assert_eq!(found[0].target, "b.example.com");
        assert!(records("x", &bytes, id.wrapping_add(1)).is_err());
        assert!(records("x", b"garbage", id).is_err());
        let empty = Packet::new_reply(id).build_bytes_vec().unwrap();
        assert!(records("x", &empty, id)
            .unwrap_err()
            .contains("no SRV records"));
    }
}
