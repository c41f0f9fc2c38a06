//! The storage balancer: which device each rank of a job checkpoints to, and which part of it.
//!
//! NVMe-CR's balancer has two aims: checkpoint data must lie in a different failure domain from
//! the process that wrote it (a rack or PDU that fails takes the process down, not its
//! checkpoint), and every device should carry the same load. This module is the pure logic of
//! it; the MPI wrapper of the preload library feeds it the host name of every rank and acts on
//! the [`Plan`] it returns.
//!
//! # The topology file
//!
//! A text file (`KAVACH_CR_TOPOLOGY`), one statement a line; `#` starts a comment, blank lines
//! are ignored, words are separated by white space:
//!
//! ```text
//! # kavach-cr topology
//! node   HOST RACK [PDU]           # a node (compute or storage) in rack RACK, optionally on PDU PDU
//! hops   RACK RACK N               # switch hops between two racks (symmetric); a rack to itself is 0
//! device HOST SPEC [CAPACITY]      # a storage device attached to node HOST
//! ```
//!
//! - `HOST` is the name a rank reports (`gethostname`, or `KAVACH_CR_NODE` when set).
//! - Failure domains: nodes that share a rack or a PDU share hardware, so they are in one
//!   failure domain; a domain is the closure of that relation (two racks on one PDU make one
//!   domain). A domain is named by its racks joined with `+`, in sorted order.
//! - Hops between two domains are the fewest hops between a rack of one and a rack of the
//!   other; two racks without a `hops` line are at an unknown distance, sorted after every known
//!   one.
//! - `SPEC` is what `target::open_spec` accepts: `tcp://HOST:PORT/JOB` for a namespace on a
//!   block target, or a path (which every rank assigned to it must be able to open: a path is
//!   taken as it is, not resolved on the device's node). `CAPACITY` is a byte count with an
//!   optional suffix `K`, `M`, `G`, `T` (powers of 1024); without it the runtime's size is used.
//! - Every name is at most 255 bytes of printable ASCII without white space.
//!
//! # The algorithm
//!
//! 1. Group the job's ranks by the failure domain of their node.
//! 2. For each such domain (in name order), list the *partner* domains (every other domain that
//!    has devices) sorted by hops, then by the ranks already placed per device, then by name.
//! 3. Greedy: take the closest partner; its devices serve this domain's ranks.
//! 4. The ranks of the domain (in rank order) go to those devices round robin, continuing the
//!    round where a previous domain assigned to the same partner stopped, so that per-device
//!    counts never differ by more than one within a partner domain.
//! 5. When no other domain has devices, the domain's own devices are used and the plan says so
//!    ([`Assignment::same_domain`]): the job runs, without the failure-domain guarantee.
//!
//! The ranks of one device form its communicator (`MPI_COMM_CR` in the dissertation; an
//! `MPI_Comm_split` with the device index as colour and the world rank as key), and each gets
//! the partition numbered by its rank in it: [`Segments`] cuts the device into `parts`
//! contiguous, non-overlapping segments of `floor(capacity / parts)` bytes (after a reserved
//! head and rounded down to an alignment, when given).
//!
//! # Without a topology file
//!
//! [`plan_local`]: every rank uses the devices of `KAVACH_CR_DEVICES` (a comma-separated list of
//! specs) round robin by its rank among the ranks of its node. A path is a device of that node
//! (the same path on two nodes is two devices); a `tcp://` spec is one device whoever uses it.
//!
//! # For comparison
//!
//! [`hash_placement`] puts keys on devices with consistent hashing (a ring of virtual nodes),
//! as GlusterFS does; [`cov`] is the coefficient of variation of the bytes per device, the
//! dissertation's measure of load imbalance.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

/// What went wrong while reading a topology or planning.
#[derive(Debug, thiserror::Error)]
pub enum BalanceError {
    /// The topology file could not be read.
    #[error("cannot read topology file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A line of the topology file is malformed.
    #[error("{origin}:{line}: {what}: expected {expected}, found {found:?}")]
    Syntax {
        /// The file (or "<text>").
        origin: String,
        /// 1-based line number.
        line: usize,
        /// What was being read.
        what: String,
        /// What was expected.
        expected: String,
        /// What was found.
        found: String,
    },
    /// The plan cannot be made.
    #[error("cannot place ranks: {what}")]
    Plan {
        /// Why.
        what: String,
    },
}

/// The result type of this module.
pub type Result<T> = std::result::Result<T, BalanceError>;

/// A node of the topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its rack.
    pub rack: String,
    /// Its power distribution unit, if named.
    pub pdu: Option<String>,
}

/// A storage device of the topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceEntry {
    /// The node it is attached to.
    pub host: String,
    /// What `target::open_spec` opens.
    pub spec: String,
    /// Its capacity in bytes, when the file says.
    pub capacity: Option<u64>,
}

/// A parsed topology file.
#[derive(Debug, Clone, Default)]
pub struct Topology {
    nodes: BTreeMap<String, Node>,
    hops: BTreeMap<(String, String), u32>,
    devices: Vec<DeviceEntry>,
}

/// Hops between two domains with no `hops` line between any of their racks.
pub const UNKNOWN_HOPS: u32 = u32::MAX;

fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 255 && s.bytes().all(|b| b.is_ascii_graphic())
}

/// Parses a byte count with an optional `K`/`M`/`G`/`T` suffix (powers of 1024).
pub fn parse_size(s: &str) -> Option<u64> {
    let (digits, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        b'T' | b't' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

impl Topology {
    /// Reads and parses a topology file.
    pub fn load(path: &Path) -> Result<Topology> {
        let text = std::fs::read_to_string(path).map_err(|source| BalanceError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Topology::parse(&text, &path.display().to_string())
    }

    /// Parses the text of a topology file; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Topology> {
        let mut t = Topology::default();
        let mut pending_devices = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let err = |what: &str, expected: &str, found: &str| BalanceError::Syntax {
                origin: origin.to_string(),
                line,
                what: what.to_string(),
                expected: expected.to_string(),
                found: found.to_string(),
            };
            let body = raw.split('#').next().unwrap_or("");
            let words: Vec<&str> = body.split_whitespace().collect();
            let Some(&kw) = words.first() else { continue };
            for w in &words {
                if !valid_name(w) {
                    return Err(err(
                        "a word",
                        "at most 255 bytes of printable ASCII",
                        &w.chars().take(40).collect::<String>(),
                    ));
                }
            }
            match kw {
                "node" => {
                    if !(3..=4).contains(&words.len()) {
                        return Err(err("a node line", "node HOST RACK [PDU]", raw.trim()));
                    }
                    let node = Node {
                        rack: words[2].to_string(),
                        pdu: words.get(3).map(|s| s.to_string()),
                    };
                    if t.nodes.insert(words[1].to_string(), node).is_some() {
                        return Err(err("a node line", "each node named once", words[1]));
                    }
                }
                "hops" => {
                    if words.len() != 4 {
                        return Err(err("a hops line", "hops RACK RACK N", raw.trim()));
                    }
                    let n: u32 = words[3]
                        .parse()
                        .ok()
                        .filter(|&n| n < UNKNOWN_HOPS)
                        .ok_or_else(|| err("a hop count", "a number below 2^32-1", words[3]))?;
                    let (a, b) = (words[1].to_string(), words[2].to_string());
                    if a == b && n != 0 {
                        return Err(err(
                            "a hops line",
                            "0 hops from a rack to itself",
                            raw.trim(),
                        ));
                    }
                    let key = if a <= b { (a, b) } else { (b, a) };
                    if let Some(old) = t.hops.insert(key, n)
                        && old != n
                    {
                        return Err(err(
                            "a hops line",
                            &format!("the same count as before ({old})"),
                            words[3],
                        ));
                    }
                }
                "device" => {
                    if !(3..=4).contains(&words.len()) {
                        return Err(err(
                            "a device line",
                            "device HOST SPEC [CAPACITY]",
                            raw.trim(),
                        ));
                    }
                    let capacity = match words.get(3) {
                        None => None,
                        Some(c) => Some(parse_size(c).filter(|&c| c > 0).ok_or_else(|| {
                            err("a capacity", "a positive byte count, suffix K/M/G/T", c)
                        })?),
                    };
                    if t.devices.iter().any(|d| d.spec == words[2]) {
                        return Err(err(
                            "a device line",
                            "each device spec named once",
                            words[2],
                        ));
                    }
                    t.devices.push(DeviceEntry {
                        host: words[1].to_string(),
                        spec: words[2].to_string(),
                        capacity,
                    });
                    pending_devices.push(line);
                }
                other => {
                    return Err(err("a statement", "node, hops or device", other));
                }
            }
        }
        for (d, line) in t.devices.iter().zip(pending_devices) {
            if !t.nodes.contains_key(&d.host) {
                return Err(BalanceError::Syntax {
                    origin: origin.to_string(),
                    line,
                    what: "a device's node".into(),
                    expected: "a node named by a node line".into(),
                    found: d.host.clone(),
                });
            }
        }
        Ok(t)
    }

    /// The nodes, by name.
    pub fn nodes(&self) -> &BTreeMap<String, Node> {
        &self.nodes
    }

    /// The devices, in file order (a device's index in a [`Plan`] is its index here).
    pub fn devices(&self) -> &[DeviceEntry] {
        &self.devices
    }

    fn rack_hops(&self, a: &str, b: &str) -> u32 {
        if a == b {
            return 0;
        }
        let key = if a <= b {
            (a.to_string(), b.to_string())
        } else {
            (b.to_string(), a.to_string())
        };
        self.hops.get(&key).copied().unwrap_or(UNKNOWN_HOPS)
    }

    /// The failure domains: each a sorted set of racks, the domains sorted by name.
    pub fn domains(&self) -> Domains {
        // Union-find over racks: a PDU joins every rack it feeds.
        let racks: BTreeSet<&str> = self.nodes.values().map(|n| n.rack.as_str()).collect();
        let racks: Vec<&str> = racks.into_iter().collect();
        let idx = |r: &str| racks.binary_search(&r).expect("rack listed");
        let mut parent: Vec<usize> = (0..racks.len()).collect();
        fn find(p: &mut [usize], mut x: usize) -> usize {
            while p[x] != x {
                p[x] = p[p[x]];
                x = p[x];
            }
            x
        }
        let mut pdu_rack: BTreeMap<&str, usize> = BTreeMap::new();
        for n in self.nodes.values() {
            if let Some(pdu) = &n.pdu {
                let r = idx(&n.rack);
                match pdu_rack.get(pdu.as_str()) {
                    None => {
                        pdu_rack.insert(pdu, r);
                    }
                    Some(&other) => {
                        let (a, b) = (find(&mut parent, r), find(&mut parent, other));
                        parent[a] = b;
                    }
                }
            }
        }
        let mut groups: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (i, r) in racks.iter().enumerate() {
            let root = find(&mut parent, i);
            groups.entry(root).or_default().push(r.to_string());
        }
        let mut domains: Vec<Vec<String>> = groups.into_values().collect();
        domains.sort();
        Domains { racks: domains }
    }

    /// The failure domain (index into `domains`) of a node.
    pub fn domain_of(&self, domains: &Domains, host: &str) -> Option<usize> {
        let rack = &self.nodes.get(host)?.rack;
        domains.racks.iter().position(|d| d.contains(rack))
    }

    /// Hops between two domains: the fewest between a rack of each.
    pub fn domain_hops(&self, domains: &Domains, a: usize, b: usize) -> u32 {
        if a == b {
            return 0;
        }
        let mut best = UNKNOWN_HOPS;
        for ra in &domains.racks[a] {
            for rb in &domains.racks[b] {
                best = best.min(self.rack_hops(ra, rb));
            }
        }
        best
    }

    /// The partner domains of `domain` that have devices, closest first (then by name):
    /// `(domain, hops)`.
    pub fn partners(&self, domains: &Domains, domain: usize) -> Vec<(usize, u32)> {
        let with_devices: BTreeSet<usize> = self
            .devices
            .iter()
            .filter_map(|d| self.domain_of(domains, &d.host))
            .collect();
        let mut out: Vec<(usize, u32)> = with_devices
            .into_iter()
            .filter(|&d| d != domain)
            .map(|d| (d, self.domain_hops(domains, domain, d)))
            .collect();
        out.sort_by_key(|&(d, h)| (h, d));
        out
    }
}

/// The failure domains of a topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domains {
    /// Each domain's racks, sorted; domains sorted.
    pub racks: Vec<Vec<String>>,
}

impl Domains {
    /// A domain's name: its racks joined with `+`.
    pub fn name(&self, d: usize) -> String {
        self.racks[d].join("+")
    }
}

/// Where one rank checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// Index of the device in [`Plan::devices`] (the colour of the communicator split).
    pub device: usize,
    /// The partition of the device: the rank's position among the device's ranks (by world rank).
    pub partition: u32,
    /// How many ranks share the device.
    pub parts: u32,
    /// True when the device lies in the rank's own failure domain (no other domain had devices).
    pub same_domain: bool,
}

/// A device of a plan and the ranks it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedDevice {
    /// What `target::open_spec` opens.
    pub spec: String,
    /// The node it is attached to (for a local plan: the node whose ranks use a path; `None`
    /// for a `tcp://` spec).
    pub host: Option<String>,
    /// Its capacity, when known.
    pub capacity: Option<u64>,
    /// The world ranks it serves, ascending.
    pub ranks: Vec<u32>,
}

/// The balancer's answer: a device and partition for every rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The devices (for a topology plan, every device of the file, used or not).
    pub devices: Vec<PlannedDevice>,
    /// Indexed by world rank.
    pub ranks: Vec<Assignment>,
}

impl Plan {
    fn finish(devices: Vec<PlannedDevice>, choice: Vec<(usize, bool)>) -> Result<Plan> {
        let mut devices = devices;
        for (r, &(d, _)) in choice.iter().enumerate() {
            devices[d].ranks.push(r as u32);
        }
        let mut ranks = Vec::with_capacity(choice.len());
        for (r, &(d, same_domain)) in choice.iter().enumerate() {
            let list = &devices[d].ranks;
            let partition = list.binary_search(&(r as u32)).expect("rank listed") as u32;
            ranks.push(Assignment {
                device: d,
                partition,
                parts: list.len() as u32,
                same_domain,
            });
        }
        Ok(Plan { devices, ranks })
    }

    /// Ranks per device, for every device of the plan.
    pub fn load(&self) -> Vec<u64> {
        self.devices.iter().map(|d| d.ranks.len() as u64).collect()
    }

    /// Bytes per device if every rank writes `bytes`, over the devices that serve a rank.
    pub fn bytes_per_used_device(&self, bytes: u64) -> Vec<u64> {
        self.devices
            .iter()
            .filter(|d| !d.ranks.is_empty())
            .map(|d| d.ranks.len() as u64 * bytes)
            .collect()
    }

    /// Ranks per used device outside the dissertation's guidance of 56 to 112 processes per
    /// device (where one SSD's bandwidth was used fully): `(spec, ranks)`.
    pub fn ratio_outside_guidance(&self) -> Vec<(String, usize)> {
        self.devices
            .iter()
            .filter(|d| !d.ranks.is_empty() && !(56..=112).contains(&d.ranks.len()))
            .map(|d| (d.spec.clone(), d.ranks.len()))
            .collect()
    }
}

/// Plans with a topology: `hosts[r]` is the node of world rank `r`.
pub fn plan(topo: &Topology, hosts: &[String]) -> Result<Plan> {
    if hosts.is_empty() {
        return Err(BalanceError::Plan {
            what: "a job of no ranks".into(),
        });
    }
    if topo.devices.is_empty() {
        return Err(BalanceError::Plan {
            what: "the topology names no device".into(),
        });
    }
    let domains = topo.domains();
    let mut by_domain: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (r, h) in hosts.iter().enumerate() {
        let d = topo
            .domain_of(&domains, h)
            .ok_or_else(|| BalanceError::Plan {
                what: format!("rank {r} runs on node {h:?}, which the topology does not name"),
            })?;
        by_domain.entry(d).or_default().push(r);
    }
    let devices_of = |dom: usize| -> Vec<usize> {
        topo.devices
            .iter()
            .enumerate()
            .filter(|(_, d)| topo.domain_of(&domains, &d.host) == Some(dom))
            .map(|(i, _)| i)
            .collect()
    };
    let mut load = vec![0u64; topo.devices.len()];
    let mut next_in_domain: BTreeMap<usize, usize> = BTreeMap::new();
    let mut choice = vec![(0usize, false); hosts.len()];
    for (&dom, ranks) in &by_domain {
        let partners = topo.partners(&domains, dom);
        let (target, same) = if partners.is_empty() {
            let own = devices_of(dom);
            if own.is_empty() {
                return Err(BalanceError::Plan {
                    what: format!(
                        "no device is reachable from failure domain {}",
                        domains.name(dom)
                    ),
                });
            }
            (dom, true)
        } else {
            let best_hops = partners[0].1;
            // Among the closest partners, the least loaded per device.
            let pick = partners
                .iter()
                .take_while(|&&(_, h)| h == best_hops)
                .map(|&(p, _)| {
                    let devs = devices_of(p);
                    let l: u64 = devs.iter().map(|&i| load[i]).sum();
                    // Compare l / n by cross-multiplying.
                    (p, l, devs.len() as u64)
                })
                .min_by(|a, b| (a.1 * b.2).cmp(&(b.1 * a.2)).then(a.0.cmp(&b.0)))
                .map(|(p, _, _)| p)
                .expect("a partner");
            (pick, false)
        };
        let devs = devices_of(target);
        let next = next_in_domain.entry(target).or_insert(0);
        for &r in ranks {
            let d = devs[*next % devs.len()];
            *next += 1;
            load[d] += 1;
            choice[r] = (d, same);
        }
    }
    let devices = topo
        .devices
        .iter()
        .map(|d| PlannedDevice {
            spec: d.spec.clone(),
            host: Some(d.host.clone()),
            capacity: d.capacity,
            ranks: Vec::new(),
        })
        .collect();
    Plan::finish(devices, choice)
}

/// Splits `KAVACH_CR_DEVICES`: specs separated by commas, white space around them ignored.
pub fn parse_device_list(s: &str) -> Result<Vec<String>> {
    let list: Vec<String> = s.split(',').map(|x| x.trim().to_string()).collect();
    for x in &list {
        if x.is_empty() {
            return Err(BalanceError::Plan {
                what: format!("KAVACH_CR_DEVICES {s:?} has an empty entry"),
            });
        }
    }
    Ok(list)
}

/// Plans without a topology: the ranks of each node use `devices` round robin by their rank
/// among the node's ranks. A path is a device of its node; a `tcp://` spec is one device.
pub fn plan_local(hosts: &[String], devices: &[String]) -> Result<Plan> {
    if hosts.is_empty() {
        return Err(BalanceError::Plan {
            what: "a job of no ranks".into(),
        });
    }
    if devices.is_empty() {
        return Err(BalanceError::Plan {
            what: "no device given".into(),
        });
    }
    let mut index: BTreeMap<(Option<String>, String), usize> = BTreeMap::new();
    let mut planned: Vec<PlannedDevice> = Vec::new();
    let mut local_rank: BTreeMap<&str, usize> = BTreeMap::new();
    let mut choice = Vec::with_capacity(hosts.len());
    for h in hosts {
        let lr = local_rank.entry(h.as_str()).or_insert(0);
        let spec = &devices[*lr % devices.len()];
        *lr += 1;
        let host = if spec.starts_with("tcp://") {
            None
        } else {
            Some(h.clone())
        };
        let key = (host.clone(), spec.clone());
        let d = *index.entry(key).or_insert_with(|| {
            planned.push(PlannedDevice {
                spec: spec.clone(),
                host,
                capacity: None,
                ranks: Vec::new(),
            });
            planned.len() - 1
        });
        choice.push((d, false));
    }
    Plan::finish(planned, choice)
}

/// `parts` contiguous segments of a device: after `reserved` bytes, each
/// `floor((capacity - reserved) / parts)` rounded down to `align`, the i-th at
/// `reserved + i * segment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segments {
    /// Where the first segment starts.
    pub first: u64,
    /// The length of each.
    pub segment: u64,
    /// How many.
    pub parts: u32,
}

impl Segments {
    /// Cuts a device; `None` when a segment would be empty (or `parts` or `align` is 0).
    pub fn new(capacity: u64, reserved: u64, align: u64, parts: u32) -> Option<Segments> {
        if parts == 0 || align == 0 || reserved > capacity {
            return None;
        }
        let raw = (capacity - reserved) / u64::from(parts);
        let segment = raw - raw % align;
        (segment > 0).then_some(Segments {
            first: reserved,
            segment,
            parts,
        })
    }

    /// The i-th segment: `(base, len)`; `None` past the last.
    pub fn get(&self, i: u32) -> Option<(u64, u64)> {
        (i < self.parts).then(|| (self.first + u64::from(i) * self.segment, self.segment))
    }
}

/// The coefficient of variation (population standard deviation over mean) of `values`; 0 for
/// an empty list or a zero mean.
pub fn cov(values: &[u64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let n = values.len() as f64;
    let mean = values.iter().map(|&v| v as f64).sum::<f64>() / n;
    if mean == 0.0 {
        return 0.0;
    }
    let var = values
        .iter()
        .map(|&v| {
            let d = v as f64 - mean;
            d * d
        })
        .sum::<f64>()
        / n;
    var.sqrt() / mean
}

/// 64-bit FNV-1a followed by a finaliser (the ring needs well-spread points).
fn hash64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Consistent hashing: `devices` on a ring of `vnodes` points each; each key goes to the device
/// of the first point at or after its hash (wrapping). Returns the device index per key.
pub fn hash_placement(devices: &[String], vnodes: u32, keys: &[String]) -> Vec<usize> {
    if devices.is_empty() {
        return Vec::new();
    }
    let mut ring: Vec<(u64, usize)> = Vec::new();
    for (i, d) in devices.iter().enumerate() {
        for v in 0..vnodes.max(1) {
            ring.push((hash64(format!("{d}#{v}").as_bytes()), i));
        }
    }
    ring.sort_unstable();
    keys.iter()
        .map(|k| {
            let h = hash64(k.as_bytes());
            let at = ring.partition_point(|&(p, _)| p < h);
            ring[at % ring.len()].1
        })
        .collect()
}

/// Bytes per device of a placement (`placement[i]` the device of key i, each key `bytes`).
pub fn bytes_per_device(devices: usize, placement: &[usize], bytes: u64) -> Vec<u64> {
    let mut out = vec![0u64; devices];
    for &d in placement {
        out[d] += bytes;
    }
    out
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.devices.iter().enumerate() {
            writeln!(
                f,
                "device {i} {} ({}): ranks {:?}",
                d.spec,
                d.host.as_deref().unwrap_or("remote"),
                d.ranks
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SAMPLE: &str = "\
# two compute racks, two storage racks; r1 and r2 share a PDU
node c1 r1 p1
node c2 r2 p1
node c3 r3
node s1 r4
node s2 r5
hops r1 r4 2
hops r2 r4 2
hops r1 r5 4
hops r3 r5 1
hops r3 r4 3
device s1 tcp://s1:7420/job 1G
device s2 /mnt/ssd2 512M
";

    fn hosts(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_and_groups_racks_on_one_pdu() {
        let t = Topology::parse(SAMPLE, "sample").unwrap();
        let d = t.domains();
        assert_eq!(d.racks.len(), 4);
        assert_eq!(d.name(0), "r1+r2");
        let c1 = t.domain_of(&d, "c1").unwrap();
        assert_eq!(t.domain_of(&d, "c2"), Some(c1));
        assert_ne!(t.domain_of(&d, "c3"), Some(c1));
        assert_eq!(t.devices()[0].capacity, Some(1 << 30));
        assert_eq!(t.devices()[1].capacity, Some(512 << 20));
        // Partners of r1+r2: r4 at 2 hops, then r5 at 4.
        let p = t.partners(&d, c1);
        assert_eq!(p.len(), 2);
        assert_eq!(d.name(p[0].0), "r4");
        assert_eq!(p[0].1, 2);
        assert_eq!(d.name(p[1].0), "r5");
        // r3's closest partner is r5 (1 hop).
        let p3 = t.partners(&d, t.domain_of(&d, "c3").unwrap());
        assert_eq!(d.name(p3[0].0), "r5");
    }

    #[test]
    fn greedy_takes_the_closest_partner_and_round_robins() {
        let t = Topology::parse(SAMPLE, "sample").unwrap();
        let h = hosts(&["c1", "c2", "c1", "c3", "c3"]);
        let p = plan(&t, &h).unwrap();
        // c1 and c2 (domain r1+r2) go to s1's device, c3's ranks to s2's.
        for r in [0, 1, 2] {
            assert_eq!(p.ranks[r].device, 0, "rank {r}");
        }
        for r in [3, 4] {
            assert_eq!(p.ranks[r].device, 1, "rank {r}");
        }
        assert_eq!(p.devices[0].ranks, vec![0, 1, 2]);
        assert_eq!(p.ranks[2].partition, 2);
        assert_eq!(p.ranks[2].parts, 3);
        assert!(p.ranks.iter().all(|a| !a.same_domain));
    }

    /// The example of docs/cr.md.
    #[test]
    fn the_documented_example() {
        let text = "\
node cn01 rackA pdu1
node cn02 rackB pdu2
node st01 rackC pdu3
node st02 rackD pdu4
hops rackA rackC 1
hops rackA rackD 3
hops rackB rackD 1
hops rackB rackC 3
device st01 tcp://st01:7420/jobA 1T
device st02 tcp://st02:7420/jobA 1T
";
        let t = Topology::parse(text, "docs").unwrap();
        let p = plan(&t, &hosts(&["cn01", "cn02", "cn01", "cn02"])).unwrap();
        assert_eq!(p.devices[0].ranks, vec![0, 2]);
        assert_eq!(p.devices[1].ranks, vec![1, 3]);
        assert_eq!(cov(&p.bytes_per_used_device(1 << 30)), 0.0);
    }

    #[test]
    fn single_domain_falls_back_to_its_own_devices_and_says_so() {
        let t = Topology::parse("node a r1\ndevice a /dev/shm/x\n", "t").unwrap();
        let p = plan(&t, &hosts(&["a", "a"])).unwrap();
        assert!(p.ranks.iter().all(|a| a.same_domain && a.device == 0));
        assert_eq!(p.ranks[1].partition, 1);
    }

    #[test]
    fn bad_topologies_are_refused_with_the_line() {
        for (text, needle) in [
            ("node a\n", ":1:"),
            ("node a r1\nnode a r2\n", ":2:"),
            ("hops r1 r2 x\n", "hop count"),
            ("device b /x\n", "device's node"),
            ("node a r1\ndevice a /x 0\n", "capacity"),
            ("node a r1\ndevice a /x 12Q\n", "capacity"),
            ("frobnicate\n", "node, hops or device"),
            ("hops r1 r1 3\n", "itself"),
            ("hops r1 r2 3\nhops r2 r1 4\n", "same count"),
        ] {
            let e = Topology::parse(text, "t").unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
        let t = Topology::parse("node a r1\ndevice a /x\n", "t").unwrap();
        let e = plan(&t, &hosts(&["b"])).unwrap_err().to_string();
        assert!(e.contains("\"b\""), "{e}");
    }

    #[test]
    fn local_plan_round_robins_per_node_and_keys_paths_by_node() {
        let devs = vec!["/dev/shm/a".to_string(), "tcp://h:1/j".to_string()];
        let h = hosts(&["n1", "n1", "n2", "n1", "n2"]);
        let p = plan_local(&h, &devs).unwrap();
        // n1: ranks 0,1,3 -> a, tcp, a; n2: ranks 2,4 -> a, tcp.
        let spec = |r: usize| p.devices[p.ranks[r].device].spec.clone();
        assert_eq!(spec(0), "/dev/shm/a");
        assert_eq!(spec(1), "tcp://h:1/j");
        assert_eq!(spec(3), "/dev/shm/a");
        assert_eq!(spec(2), "/dev/shm/a");
        // The path on n1 and the path on n2 are two devices; the tcp spec is one.
        assert_ne!(p.ranks[0].device, p.ranks[2].device);
        assert_eq!(p.ranks[1].device, p.ranks[4].device);
        assert_eq!(p.devices.len(), 3);
        assert_eq!(p.ranks[4].partition, 1);
        assert_eq!(p.ranks[4].parts, 2);
        assert!(parse_device_list("a,,b").is_err());
        assert_eq!(parse_device_list(" a , b ").unwrap(), vec!["a", "b"]);
    }

    #[test]
    fn cov_and_hash_placement() {
        assert_eq!(cov(&[5, 5, 5]), 0.0);
        assert!((cov(&[0, 2]) - 1.0).abs() < 1e-12);
        let devs: Vec<String> = (0..4).map(|i| format!("tcp://s{i}:1/j")).collect();
        let keys: Vec<String> = (0..8).map(|r| format!("rank.{r}")).collect();
        let place = hash_placement(&devs, 16, &keys);
        assert_eq!(place.len(), 8);
        assert!(place.iter().all(|&d| d < 4));
        // Deterministic.
        assert_eq!(place, hash_placement(&devs, 16, &keys));
    }

    #[test]
    fn guidance_names_devices_outside_56_to_112_ranks() {
        let t = Topology::parse("node a r1\nnode s r2\ndevice s /x\ndevice s /y\n", "t").unwrap();
        let p = plan(&t, &vec!["a".to_string(); 120]).unwrap();
        assert!(p.ratio_outside_guidance().is_empty(), "60 ranks each");
        let p = plan(&t, &vec!["a".to_string(); 4]).unwrap();
        assert_eq!(
            p.ratio_outside_guidance(),
            vec![("/x".to_string(), 2), ("/y".to_string(), 2)]
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4K"), Some(4096));
        assert_eq!(parse_size("3"), Some(3));
        assert_eq!(parse_size("G"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999T"), None);
    }

    /// A random topology: `racks` racks, each of `per_rack` compute nodes and maybe a storage
    /// node with devices; random hops; PDUs joining some racks.
    fn arb_topology() -> impl Strategy<Value = (String, Vec<String>)> {
        (
            2usize..6,
            1usize..4,
            prop::collection::vec(0u32..3, 6),
            prop::collection::vec(1u32..6, 36),
            prop::collection::vec(0usize..6, 6),
            prop::collection::vec(0usize..40, 1..64),
        )
            .prop_map(|(racks, per_rack, devs, hops, pdu, rank_nodes)| {
                let mut text = String::new();
                let mut compute = Vec::new();
                for r in 0..racks {
                    for n in 0..per_rack {
                        let pdu = if pdu[r] < racks && pdu[r] != r {
                            format!(" p{}", pdu[r].min(r))
                        } else {
                            String::new()
                        };
                        text += &format!("node c{r}x{n} r{r}{pdu}\n");
                        compute.push(format!("c{r}x{n}"));
                    }
                    text += &format!("node s{r} r{r}\n");
                    for d in 0..devs[r] {
                        text += &format!("device s{r} tcp://s{r}:{d}/job 1G\n");
                    }
                }
                for a in 0..racks {
                    for b in a + 1..racks {
                        text += &format!("hops r{a} r{b} {}\n", hops[a * 6 + b]);
                    }
                }
                let hosts = rank_nodes
                    .iter()
                    .map(|&i| compute[i % compute.len()].clone())
                    .collect();
                (text, hosts)
            })
    }

    proptest! {
        #[test]
        fn every_rank_gets_one_device_in_another_domain_when_one_exists(
            (text, hosts) in arb_topology()
        ) {
            let t = Topology::parse(&text, "prop").unwrap();
            let d = t.domains();
            match plan(&t, &hosts) {
                Err(e) => {
                    // Only when no device is reachable at all.
                    prop_assert!(t.devices().is_empty(), "{}", e);
                }
                Ok(p) => {
                    prop_assert_eq!(p.ranks.len(), hosts.len());
                    let mut seen = 0;
                    for (i, dev) in p.devices.iter().enumerate() {
                        for &r in &dev.ranks {
                            prop_assert_eq!(p.ranks[r as usize].device, i);
                            seen += 1;
                        }
                    }
                    prop_assert_eq!(seen, hosts.len(), "each rank on exactly one device");
                    // Within a domain, the devices' rank counts differ by at most one.
                    for dom in 0..d.racks.len() {
                        let loads: Vec<usize> = p.devices.iter()
                            .filter(|x| t.domain_of(&d, x.host.as_ref().unwrap()) == Some(dom))
                            .map(|x| x.ranks.len()).collect();
                        if let (Some(lo), Some(hi)) = (loads.iter().min(), loads.iter().max()) {
                            if loads.iter().any(|&l| l > 0) {
                                prop_assert!(hi - lo <= 1, "domain {} loads {:?}", dom, loads);
                            }
                        }
                    }
                    for (r, a) in p.ranks.iter().enumerate() {
                        let mine = t.domain_of(&d, &hosts[r]).unwrap();
                        let dev_dom = t.domain_of(&d, p.devices[a.device].host.as_ref().unwrap()).unwrap();
                        let other_exists = !t.partners(&d, mine).is_empty();
                        prop_assert_eq!(a.same_domain, !other_exists);
                        if other_exists {
                            prop_assert_ne!(dev_dom, mine);
                            // The chosen domain is at the fewest hops.
                            prop_assert_eq!(t.domain_hops(&d, mine, dev_dom), t.partners(&d, mine)[0].1);
                        } else {
                            prop_assert_eq!(dev_dom, mine);
                        }
                        prop_assert!(a.partition < a.parts);
                        prop_assert_eq!(a.parts as usize, p.devices[a.device].ranks.len());
                    }
                }
            }
        }

        #[test]
        fn local_plans_round_robin_each_node_s_ranks(
            nodes in prop::collection::vec(0usize..4, 1..40),
            devs in prop::collection::vec(prop::bool::ANY, 1..5),
        ) {
            // devs[i]: true = a tcp spec (shared by every node), false = a path (per node).
            let specs: Vec<String> = devs.iter().enumerate().map(|(i, &tcp)| {
                if tcp { format!("tcp://s:{i}/j") } else { format!("/dev/shm/d{i}") }
            }).collect();
            let hosts: Vec<String> = nodes.iter().map(|n| format!("n{n}")).collect();
            let p = plan_local(&hosts, &specs).unwrap();
            let mut seen_on_node: BTreeMap<&str, usize> = BTreeMap::new();
            for (r, a) in p.ranks.iter().enumerate() {
                let lr = seen_on_node.entry(hosts[r].as_str()).or_insert(0);
                let d = &p.devices[a.device];
                prop_assert_eq!(&d.spec, &specs[*lr % specs.len()]);
                *lr += 1;
                match &d.host {
                    Some(h) => prop_assert_eq!(h, &hosts[r]),
                    None => prop_assert!(d.spec.starts_with("tcp://")),
                }
                prop_assert_eq!(d.ranks.iter().position(|&x| x as usize == r), Some(a.partition as usize));
                prop_assert_eq!(a.parts as usize, d.ranks.len());
            }
            // A spec appears once per node for paths, once in all for tcp.
            let mut keys = BTreeSet::new();
            for d in &p.devices {
                prop_assert!(keys.insert((d.host.clone(), d.spec.clone())), "device listed twice");
            }
        }

        #[test]
        fn cov_is_zero_when_ranks_divide_evenly(devs in 1usize..9, per in 1usize..9, nodes in 1usize..4) {
            // One compute domain, one storage domain of `devs` devices, devs*per ranks.
            let mut text = String::from("node s rs\nhops rc rs 1\n");
            for n in 0..nodes { text += &format!("node c{n} rc\n"); }
            for d in 0..devs { text += &format!("device s /d{d} 1G\n"); }
            let t = Topology::parse(&text, "prop").unwrap();
            let hosts: Vec<String> = (0..devs * per).map(|r| format!("c{}", r % nodes)).collect();
            let p = plan(&t, &hosts).unwrap();
            prop_assert_eq!(cov(&p.bytes_per_used_device(1 << 20)), 0.0);
            prop_assert!(p.load().iter().all(|&l| l == per as u64));
        }

        #[test]
        fn segments_never_overlap_and_fit(capacity in 0u64..(1 << 44), reserved in 0u64..(1 << 22),
                                          align_pow in 0u32..21, parts in 0u32..2000) {
            let align = 1u64 << align_pow;
            match Segments::new(capacity, reserved, align, parts) {
                None => prop_assert!(parts == 0 || reserved > capacity
                    || (capacity - reserved) / u64::from(parts) < align),
                Some(s) => {
                    prop_assert_eq!(s.segment % align, 0);
                    prop_assert!(s.segment <= (capacity - reserved) / u64::from(parts));
                    let mut end = reserved;
                    for i in 0..parts {
                        let (base, len) = s.get(i).unwrap();
                        prop_assert!(base >= end, "overlap at {}", i);
                        prop_assert_eq!(len, s.segment);
                        end = base + len;
                    }
                    prop_assert!(end <= capacity);
                    prop_assert!(s.get(parts).is_none());
                }
            }
        }
    }
}
