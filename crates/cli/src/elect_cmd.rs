//! `kavach elect`: automatic failover through etcd.
//!
//! One elector runs beside each `kavach serve --role backup` node of a cluster. The electors
//! compete for one etcd key, `/kavach/CLUSTER/leader`, created under a lease: the one that
//! creates it PROMOTEs its node (the other nodes' replication addresses become its backups) and
//! keeps the lease alive while its node answers as primary. When the leader's machine dies or
//! is cut off, its lease expires after `--ttl` seconds, the key vanishes, and another elector
//! wins it and promotes its backup.
//!
//! Two fences keep one writer. The replication epoch: a promotion takes a new epoch on a
//! majority of the copies, so an old primary that is still running cannot gather its write
//! quorum and every write it takes fails. The lease: an elector that cannot renew its lease
//! for `--ttl` seconds (etcd gone, or the lease revoked) shuts its node down, since another
//! node may be primary by then, and exits with an error; restart that node as a backup.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;

use crate::etcd::Etcd;
use crate::replica_cmd::{parse_replicas, resp_call};

/// Run an elector for one `kavach serve --role backup` node.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Example, three nodes (replication on 7001-7003, RESP on 6380-6382), etcd on 127.0.0.1:2379:
  kavach serve --role backup --listen 127.0.0.1:7001 --port 6380 --dir n1
  kavach elect --cluster demo --port 6380 --replicas 127.0.0.1:7002,127.0.0.1:7003
  (and the same for nodes 2 and 3, each naming the other two)
The first elector to win promotes its node, which creates the log; find the primary with
  etcdctl get /kavach/demo/leader

Exit status: 0 never (it runs until killed); 2 if the node must be restarted (its promotion
failed, or it lost the leadership and was shut down), or on bad arguments.")]
pub struct ElectArgs {
    /// etcd's client URL (the JSON gateway of etcd 3.4 or later).
    #[arg(long, default_value = "http://127.0.0.1:2379", value_name = "URL")]
    etcd: String,
    /// The cluster's name: the leader key is /kavach/NAME/leader.
    #[arg(long, value_name = "NAME")]
    cluster: String,
    /// This node's RESP host.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// This node's RESP port.
    #[arg(long)]
    port: u16,
    /// The other nodes' replication addresses (their --listen): this node's backups once it
    /// is promoted.
    #[arg(long, value_name = "ADDR,ADDR")]
    replicas: String,
    /// Backups that must persist each write once this node is primary (default: a majority
    /// of all copies).
    #[arg(long, value_name = "W")]
    write_quorum: Option<usize>,
    /// Lease seconds: how long a dead leader keeps the key (the failover delay).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    ttl: u64,
    /// How clients reach this node, stored in the leader key (default HOST:PORT).
    #[arg(long, value_name = "HOST:PORT")]
    advertise: Option<String>,
    /// Print each event as a JSON line on stdout.
    #[arg(long)]
    json: bool,
}

/// What the local node says it is.
#[derive(Debug, Clone, PartialEq)]
enum NodeRole {
    Primary { epoch: u64 },
    Backup,
    Other(String),
}

struct Elector<'a> {
    a: &'a ElectArgs,
    etcd: Etcd,
    key: String,
    node: String,
    advertise: String,
    tick: Duration,
    /// The last event printed, so a state that lasts is reported once.
    last: String,
}

impl Elector<'_> {
    fn event(&mut self, kind: &str, detail: &str) {
        let line = format!("{kind}: {detail}");
        if line == self.last {
            return;
        }
        self.last = line;
        // The elector's job is failover, not printing: a reader that went away or a full
        // disk must not stop it (a failed line is dropped, see `server::console`).
        if self.a.json {
            server::say_out!(
                "{}",
                json!({ "event": kind, "detail": detail, "node": self.advertise, "key": self.key })
            );
        }
        server::say!("kavach elect: {kind}: {detail}");
    }

    fn role(&self) -> Result<NodeRole> {
        let args = ["INFO".to_string(), "replication".to_string()];
        let text = match resp_call(&self.node, &args, self.tick.max(Duration::from_secs(2)))? {
            Ok(t) => t,
            Err(e) => anyhow::bail!("INFO: {e}"),
        };
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.trim_end().strip_prefix(name)?.strip_prefix(':'))
                .map(str::to_string)
        };
        Ok(match field("kavach_role").as_deref() {
            Some("primary") => NodeRole::Primary {
                epoch: field("epoch").and_then(|e| e.parse().ok()).unwrap_or(0),
            },
            Some("backup") => NodeRole::Backup,
            _ => NodeRole::Other(field("role").unwrap_or_else(|| "not replicated".into())),
        })
    }

    fn value(&self, epoch: u64) -> Vec<u8> {
        json!({ "node": self.advertise, "epoch": epoch })
            .to_string()
            .into_bytes()
    }

    /// Follow until this elector wins the key; returns the lease.
    fn campaign(&mut self) -> Result<i64> {
        loop {
            std::thread::sleep(self.tick);
            let role = match self.role() {
                Ok(r) => r,
                Err(e) => {
                    self.event("waiting", &format!("the node does not answer ({e:#})"));
                    continue;
                }
            };
            if let NodeRole::Other(r) = &role {
                self.event("waiting", &format!("the node is {r}, not a backup"));
                continue;
            }
            let held = match self.etcd.get(&self.key) {
                Ok(h) => h,
                Err(e) => {
                    self.event("waiting", &format!("{e:#}"));
                    continue;
                }
            };
            if let Some(kv) = held {
                let leader = String::from_utf8_lossy(&kv.value).into_owned();
                let mine = serde_json::from_slice::<serde_json::Value>(&kv.value)
                    .ok()
                    .and_then(|v| v.get("node")?.as_str().map(|n| n == self.advertise))
                    .unwrap_or(false);
                if mine && matches!(role, NodeRole::Primary { .. }) && kv.lease != 0 {
                    // A restarted elector whose node still leads: take its lease over.
                    if self.etcd.keepalive(kv.lease).unwrap_or(0) > 0 {
                        self.event("leading", "resumed the lease this node already held");
                        return Ok(kv.lease);
                    }
                }
                self.event("following", &leader);
                continue;
            }
            let lease = match self.etcd.grant(self.a.ttl) {
                Ok(l) => l,
                Err(e) => {
                    self.event("waiting", &format!("{e:#}"));
                    continue;
                }
            };
            let epoch = match role {
                NodeRole::Primary { epoch } => epoch,
                _ => 0,
            };
            match self.etcd.create(&self.key, &self.value(epoch), lease) {
                Ok(true) => return Ok(lease),
                Ok(false) => {
                    let _ = self.etcd.revoke(lease);
                }
                Err(e) => {
                    let _ = self.etcd.revoke(lease);
                    self.event("waiting", &format!("{e:#}"));
                }
            }
        }
    }

    /// PROMOTE the node while keeping `lease` alive; the new epoch, or `None` if the node
    /// refused and is still a backup (the lease is revoked then).
    fn promote(&mut self, lease: i64) -> Result<Option<u64>> {
        let mut args = vec!["PROMOTE".to_string(), self.a.replicas.clone()];
        if let Some(w) = self.a.write_quorum {
            args.push(w.to_string());
        }
        let node = self.node.clone();
        let call = std::thread::spawn(move || resp_call(&node, &args, Duration::from_secs(600)));
        while !call.is_finished() {
            std::thread::sleep(self.tick.min(Duration::from_millis(200)));
            let _ = self.etcd.keepalive(lease);
        }
        let answer = call
            .join()
            .map_err(|_| anyhow::anyhow!("the PROMOTE call panicked"))??;
        match answer {
            Ok(text) => {
                self.event("promoted", &text);
                Ok(match self.role()? {
                    NodeRole::Primary { epoch } => Some(epoch),
                    r => anyhow::bail!("after PROMOTE the node is {r:?}"),
                })
            }
            Err(e) => {
                let _ = self.etcd.revoke(lease);
                if matches!(self.role(), Ok(NodeRole::Backup)) {
                    // Refused before it stopped being a backup (too few copies answer, say):
                    // let another node try, and try again later.
                    self.event("refused", &format!("{e}; gave the leadership up"));
                    std::thread::sleep(Duration::from_secs(self.a.ttl));
                    return Ok(None);
                }
                Err(crate::outcome::CommandFailed(anyhow::anyhow!(
                    "{}: {e}; gave the leadership up",
                    self.node
                ))
                .into())
            }
        }
    }

    /// Hold the lease while the node is primary. Returns why the leadership ended.
    fn lead(&mut self, lease: i64) -> String {
        let ttl = Duration::from_secs(self.a.ttl);
        let mut renewed = Instant::now();
        loop {
            std::thread::sleep(self.tick);
            match self.role() {
                Ok(NodeRole::Primary { .. }) => {}
                Ok(r) => {
                    let _ = self.etcd.revoke(lease);
                    return format!("the node is no longer primary ({r:?})");
                }
                Err(e) => {
                    // A dead node must not keep the key; its lease goes so another can lead.
                    let _ = self.etcd.revoke(lease);
                    return format!("the node does not answer ({e:#})");
                }
            }
            match self.etcd.keepalive(lease) {
                Ok(left) if left > 0 => renewed = Instant::now(),
                Ok(_) => return "the lease expired".into(),
                Err(e) if renewed.elapsed() >= ttl => {
                    return format!("the lease could not be renewed for {ttl:?} ({e:#})");
                }
                Err(e) => self.event("leading", &format!("renewal failed, retrying: {e:#}")),
            }
        }
    }
}

/// Validate what clap cannot; the etcd client and the loop's tick.
fn check_args(a: &ElectArgs) -> Result<(Etcd, Duration)> {
    if a.cluster.is_empty() || a.cluster.contains('/') {
        anyhow::bail!("--cluster `{}`: a name without `/`", a.cluster);
    }
    let replicas = parse_replicas(&a.replicas)?;
    if let Some(w) = a.write_quorum
        && (w == 0 || w > replicas.len())
    {
        anyhow::bail!(
            "--write-quorum {w}: between 1 and the number of --replicas ({})",
            replicas.len()
        );
    }
    let tick = Duration::from_millis((a.ttl * 1000 / 3).max(100));
    Ok((Etcd::new(&a.etcd, tick.max(Duration::from_secs(1)))?, tick))
}

/// Run `kavach elect`.
pub fn run(a: &ElectArgs) -> Result<crate::outcome::Outcome> {
    let (etcd, tick) = check_args(a).map_err(crate::outcome::CommandFailed)?;
    let node = format!("{}:{}", a.host, a.port);
    let mut e = Elector {
        a,
        key: format!("/kavach/{}/leader", a.cluster),
        advertise: a.advertise.clone().unwrap_or_else(|| node.clone()),
        node,
        etcd,
        tick,
        last: String::new(),
    };
    e.event(
        "started",
        &format!("etcd {}, lease {} s", e.etcd.endpoint(), a.ttl),
    );
    loop {
        let lease = e.campaign()?;
        let epoch = match e.role().context("the node stopped answering")? {
            NodeRole::Primary { epoch } => epoch,
            _ => match e.promote(lease)? {
                Some(epoch) => epoch,
                None => continue,
            },
        };
        if !e
            .etcd
            .update(&e.key, &e.value(epoch), lease)
            .unwrap_or(false)
        {
            e.event("lost", "the leader key changed hands while promoting");
        }
        e.event("leading", &format!("epoch {epoch}"));
        let why = e.lead(lease);
        e.event("lost", &why);
        if matches!(e.role(), Ok(NodeRole::Primary { .. })) {
            // Another node may be primary by now: stop serving from this one.
            let _ = resp_call(&e.node, &["SHUTDOWN".to_string()], Duration::from_secs(30));
            return Err(crate::outcome::CommandFailed(anyhow::anyhow!(
                "lost the leadership ({why}); shut {} down: restart it as a backup \
                 (kavach serve --role backup) and this elector",
                e.node
            ))
            .into());
        }
        if !matches!(e.role(), Ok(NodeRole::Backup)) {
            return Err(crate::outcome::CommandFailed(anyhow::anyhow!(
                "lost the leadership ({why}); {} is not a backup: restart it as one and this \
                 elector",
                e.node
            ))
            .into());
        }
    }
}
