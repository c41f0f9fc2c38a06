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

//!
//! The rules live in the library (`replicated::elect`); this command runs them with real time,
//! the node's RESP port and etcd.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Result;
use replicated::{Elector, ElectorConfig, Etcd, Next, Node, NodeRole, Promotion};
use serde_json::json;

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

/// The node, over its RESP port.
struct RespNode {
    addr: String,
    /// How long INFO may take.
    timeout: Duration,
    /// PROMOTE's arguments.
    promote_args: Vec<String>,
    /// The PROMOTE call under way.
    promote: Option<JoinHandle<Result<std::result::Result<String, String>>>>,
}

impl Node for RespNode {
    fn role(&mut self) -> std::result::Result<NodeRole, String> {
        let args = ["INFO".to_string(), "replication".to_string()];
        let text = match resp_call(&self.addr, &args, self.timeout) {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return Err(format!("INFO: {e}")),
            Err(e) => return Err(format!("{e:#}")),
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

    fn start_promote(&mut self) {
        let (node, args) = (self.addr.clone(), self.promote_args.clone());
        self.promote = Some(std::thread::spawn(move || {
            resp_call(&node, &args, Duration::from_secs(600))
        }));
    }

    fn poll_promote(&mut self) -> Promotion {
        match self.promote.take() {
            None => Promotion::Failed("no PROMOTE was sent".into()),
            Some(call) if !call.is_finished() => {
                self.promote = Some(call);
                Promotion::Running
            }
            Some(call) => match call.join() {
                Err(_) => Promotion::Failed("the PROMOTE call panicked".into()),
                Ok(Err(e)) => Promotion::Failed(format!("{e:#}")),
                Ok(Ok(Ok(text))) => Promotion::Done(text),
                Ok(Ok(Err(e))) => Promotion::Refused(e),
            },
        }
    }

    fn shutdown(&mut self) {
        let _ = resp_call(
            &self.addr,
            &["SHUTDOWN".to_string()],
            Duration::from_secs(30),
        );
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
    let advertise = a.advertise.clone().unwrap_or_else(|| node.clone());
    let key = format!("/kavach/{}/leader", a.cluster);
    let mut cfg = ElectorConfig::new(&key, &node, &advertise, a.ttl);
    cfg.tick_ms = u64::try_from(tick.as_millis()).unwrap_or(u64::MAX);
    let endpoint = etcd.endpoint().to_string();
    let mut promote_args = vec!["PROMOTE".to_string(), a.replicas.clone()];
    if let Some(w) = a.write_quorum {
        promote_args.push(w.to_string());
    }
    let resp = RespNode {
        addr: node,
        timeout: tick.max(Duration::from_secs(2)),
        promote_args,
        promote: None,
    };
    let mut e = Elector::new(cfg, etcd, resp);
    let say = |ev: replicated::Event| {
        // The elector's job is failover, not printing: a reader that went away or a full
        // disk must not stop it (a failed line is dropped, see `server::console`).
        if a.json {
            server::say_out!(
                "{}",
                json!({ "event": ev.kind, "detail": ev.detail, "node": advertise, "key": key })
            );
        }
        server::say!("kavach elect: {}: {}", ev.kind, ev.detail);
    };
    if let Some(ev) = e.report("started", &format!("etcd {endpoint}, lease {} s", a.ttl)) {
        say(ev);
    }
    let start = Instant::now();
    let now = || u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut due = e.first_step_at(now());
    loop {
        let t = now();
        if due > t {
            std::thread::sleep(Duration::from_millis(due - t));
        }
        let step = e.step(now());
        for ev in step.events {
            say(ev);
        }
        match step.next {
            Next::At(t) => due = t,
            Next::Exit(why) => {
                return Err(crate::outcome::CommandFailed(anyhow::anyhow!("{why}")).into());
            }
        }
    }
}
