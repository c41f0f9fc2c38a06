//! The DRAM state of a namespace (inodes, the per-directory B-tree index, block ownership and
//! the circular free pool), the log records that change it, and its checkpoint encoding.
//!
//! Every metadata-changing call builds an [`Op`], makes it durable in the log and then applies
//! it with [`State::apply`]; recovery applies the same ops from the log. So what a call did
//! and what replay rebuilds are the same code.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::codec::{Dec, Enc};
use crate::error::{FsError, Result};
use crate::layout::{self, KIND_DIR, KIND_FILE, ROOT_INO, kinds};

/// File or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
}

impl Kind {
    pub(crate) fn code(self) -> u8 {
        match self {
            Kind::File => KIND_FILE,
            Kind::Dir => KIND_DIR,
        }
    }
    pub(crate) fn from_code(c: u8, what: &str, at: u64) -> Result<Kind> {
        match c {
            KIND_FILE => Ok(Kind::File),
            KIND_DIR => Ok(Kind::Dir),
            _ => Err(FsError::damage(
                format!("{what} (kind)"),
                at,
                "1 (file) or 2 (directory)",
                c.to_string(),
            )),
        }
    }
}

/// An inode in DRAM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inode {
    pub kind: Kind,
    pub mode: u32,
    pub size: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    /// File block index -> hugeblock number (sparse).
    pub blocks: BTreeMap<u64, u32>,
    /// Directories: name -> inode (the B-tree index of this directory).
    pub entries: BTreeMap<String, u64>,
    /// Directories: the parent directory (the root's is itself).
    pub parent: u64,
}

impl Inode {
    pub(crate) fn new(kind: Kind, mode: u32, time: i64, parent: u64) -> Inode {
        Inode {
            kind,
            mode,
            size: 0,
            atime: time,
            mtime: time,
            ctime: time,
            blocks: BTreeMap::new(),
            entries: BTreeMap::new(),
            parent,
        }
    }
}

/// New hugeblocks of a file or directory file, with its new size.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Grow {
    pub ino: u64,
    pub size: u64,
    pub blocks: Vec<(u64, u32)>,
}

/// One metadata change: the payload of one log record (after the provenance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    Create {
        parent: u64,
        ino: u64,
        kind: Kind,
        mode: u32,
        time: i64,
        name: String,
        dir: Grow,
    },
    /// A write run: `[start, end)` written, the file's size now `size`, new blocks.
    Write {
        run: u64,
        start: u64,
        end: u64,
        mtime: i64,
        grow: Grow,
    },
    Truncate {
        ino: u64,
        len: u64,
        time: i64,
    },
    Remove {
        parent: u64,
        name: String,
        ino: u64,
        time: i64,
        dir: Grow,
    },
    Rename {
        from_parent: u64,
        from_name: String,
        to_parent: u64,
        to_name: String,
        time: i64,
        dirs: Vec<Grow>,
    },
    SetAttr {
        ino: u64,
        mode: Option<u32>,
        atime: Option<i64>,
        mtime: Option<i64>,
        time: i64,
    },
}

/// The writer named in every record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Provenance {
    /// MPI rank (or partition number; 0 without MPI).
    pub rank: u32,
    /// Epoch: which run of the job (a restart is a new epoch).
    pub epoch: u64,
}

fn put_extents(e: &mut Enc, blocks: &[(u64, u32)]) {
    let ext = to_extents(blocks);
    e.u32(ext.len() as u32);
    for (idx, blk, n) in ext {
        e.u64(idx).u32(blk).u32(n);
    }
}

/// Runs of consecutive file indices on consecutive hugeblocks: (index, block, count).
pub(crate) fn to_extents(blocks: &[(u64, u32)]) -> Vec<(u64, u32, u32)> {
    let mut out: Vec<(u64, u32, u32)> = Vec::new();
    for &(i, b) in blocks {
        if let Some((si, sb, n)) = out.last_mut()
            && *si + *n as u64 == i
            && (*sb as u64) + *n as u64 == b as u64
        {
            *n += 1;
            continue;
        }
        out.push((i, b, 1));
    }
    out
}

fn get_extents(d: &mut Dec<'_>) -> Result<Vec<(u64, u32)>> {
    let at = d.at();
    let n = d.count("extent count", 16)?;
    let mut out = Vec::new();
    for _ in 0..n {
        let idx = d.u64("extent index")?;
        let blk = d.u32("extent block")?;
        let cnt = d.u32("extent length")?;
        if cnt == 0
            || idx.checked_add(cnt as u64).is_none()
            || (blk as u64) + cnt as u64 > u32::MAX as u64
        {
            return Err(FsError::damage(
                "extent",
                at,
                "a non-empty extent inside the index and block ranges",
                format!("index {idx}, block {blk}, {cnt} blocks"),
            ));
        }
        if out.len() + cnt as usize > (1 << 26) {
            return Err(FsError::damage(
                "extent list",
                at,
                "at most 2^26 blocks",
                "more",
            ));
        }
        for k in 0..cnt {
            out.push((idx + k as u64, blk + k));
        }
    }
    Ok(out)
}

fn put_grow(e: &mut Enc, g: &Grow) {
    e.u64(g.ino).u64(g.size);
    put_extents(e, &g.blocks);
}

fn get_grow(d: &mut Dec<'_>) -> Result<Grow> {
    Ok(Grow {
        ino: d.u64("ino")?,
        size: d.u64("size")?,
        blocks: get_extents(d)?,
    })
}

fn put_opt_u32(e: &mut Enc, v: Option<u32>) {
    match v {
        Some(v) => e.u8(1).u32(v),
        None => e.u8(0).u32(0),
    };
}
fn put_opt_i64(e: &mut Enc, v: Option<i64>) {
    match v {
        Some(v) => e.u8(1).i64(v),
        None => e.u8(0).i64(0),
    };
}
fn get_flag(d: &mut Dec<'_>, field: &str) -> Result<bool> {
    let at = d.at();
    match d.u8(field)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(FsError::damage(field, at, "0 or 1", v.to_string())),
    }
}

impl Op {
    /// The record payload: kind, provenance, fields.
    pub(crate) fn encode(&self, prov: Provenance) -> Vec<u8> {
        let mut e = Enc::new();
        let kind = match self {
            Op::Create { .. } => kinds::CREATE,
            Op::Write { .. } => kinds::WRITE,
            Op::Truncate { .. } => kinds::TRUNCATE,
            Op::Remove { .. } => kinds::REMOVE,
            Op::Rename { .. } => kinds::RENAME,
            Op::SetAttr { .. } => kinds::SETATTR,
        };
        e.u8(kind).u32(prov.rank).u64(prov.epoch);
        match self {
            Op::Create {
                parent,
                ino,
                kind,
                mode,
                time,
                name,
                dir,
            } => {
                e.u64(*parent)
                    .u64(*ino)
                    .u8(kind.code())
                    .u32(*mode)
                    .i64(*time)
                    .name(name);
                put_grow(&mut e, dir);
            }
            Op::Write {
                run,
                start,
                end,
                mtime,
                grow,
            } => {
                e.u64(*run).u64(*start).u64(*end).i64(*mtime);
                put_grow(&mut e, grow);
            }
            Op::Truncate { ino, len, time } => {
                e.u64(*ino).u64(*len).i64(*time);
            }
            Op::Remove {
                parent,
                name,
                ino,
                time,
                dir,
            } => {
                e.u64(*parent).name(name).u64(*ino).i64(*time);
                put_grow(&mut e, dir);
            }
            Op::Rename {
                from_parent,
                from_name,
                to_parent,
                to_name,
                time,
                dirs,
            } => {
                e.u64(*from_parent)
                    .name(from_name)
                    .u64(*to_parent)
                    .name(to_name)
                    .i64(*time)
                    .u32(dirs.len() as u32);
                for g in dirs {
                    put_grow(&mut e, g);
                }
            }
            Op::SetAttr {
                ino,
                mode,
                atime,
                mtime,
                time,
            } => {
                e.u64(*ino);
                put_opt_u32(&mut e, *mode);
                put_opt_i64(&mut e, *atime);
                put_opt_i64(&mut e, *mtime);
                e.i64(*time);
            }
        }
        e.buf
    }

    /// Decode a record payload read from device byte `at`.
    pub(crate) fn decode(payload: &[u8], at: u64) -> Result<(Provenance, Op)> {
        let mut d = Dec::new(payload, at, "log record");
        let kind = d.u8("kind")?;
        let prov = Provenance {
            rank: d.u32("rank")?,
            epoch: d.u64("epoch")?,
        };
        let op = match kind {
            kinds::CREATE => Op::Create {
                parent: d.u64("parent")?,
                ino: d.u64("ino")?,
                kind: {
                    let a = d.at();
                    Kind::from_code(d.u8("kind")?, "log record", a)?
                },
                mode: d.u32("mode")?,
                time: d.i64("time")?,
                name: d.name("name")?,
                dir: get_grow(&mut d)?,
            },
            kinds::WRITE => Op::Write {
                run: d.u64("run")?,
                start: d.u64("start")?,
                end: d.u64("end")?,
                mtime: d.i64("mtime")?,
                grow: get_grow(&mut d)?,
            },
            kinds::TRUNCATE => Op::Truncate {
                ino: d.u64("ino")?,
                len: d.u64("length")?,
                time: d.i64("time")?,
            },
            kinds::REMOVE => Op::Remove {
                parent: d.u64("parent")?,
                name: d.name("name")?,
                ino: d.u64("ino")?,
                time: d.i64("time")?,
                dir: get_grow(&mut d)?,
            },
            kinds::RENAME => {
                let from_parent = d.u64("from parent")?;
                let from_name = d.name("from name")?;
                let to_parent = d.u64("to parent")?;
                let to_name = d.name("to name")?;
                let time = d.i64("time")?;
                let n = d.count("directory updates", 20)?;
                let mut dirs = Vec::new();
                for _ in 0..n {
                    dirs.push(get_grow(&mut d)?);
                }
                Op::Rename {
                    from_parent,
                    from_name,
                    to_parent,
                    to_name,
                    time,
                    dirs,
                }
            }
            kinds::SETATTR => {
                let ino = d.u64("ino")?;
                let m = get_flag(&mut d, "mode flag")?;
                let mv = d.u32("mode")?;
                let a = get_flag(&mut d, "atime flag")?;
                let av = d.i64("atime")?;
                let t = get_flag(&mut d, "mtime flag")?;
                let tv = d.i64("mtime")?;
                Op::SetAttr {
                    ino,
                    mode: m.then_some(mv),
                    atime: a.then_some(av),
                    mtime: t.then_some(tv),
                    time: d.i64("time")?,
                }
            }
            k => {
                return Err(FsError::damage(
                    "log record (kind)",
                    at,
                    "a record kind 1..=6",
                    k.to_string(),
                ));
            }
        };
        d.expect_end()?;
        Ok((prov, op))
    }
}

/// The DRAM state.
#[derive(Debug, Clone)]
pub(crate) struct State {
    pub inodes: HashMap<u64, Inode>,
    pub next_ino: u64,
    /// Owner of each hugeblock (0: free).
    pub owner: Vec<u64>,
    /// The circular pool of free hugeblocks: allocate from the front, free to the back.
    pub free: VecDeque<u32>,
    pub hugeblock: u32,
    /// Highest write-run id folded into the log (or a checkpoint).
    pub folded_run: u64,
    /// Set while recovering: frees do not go to the ring (it is rebuilt at the end).
    pub replaying: bool,
}

fn dmg(what: &str, expected: impl Into<String>, found: impl Into<String>) -> FsError {
    FsError::damage(format!("replayed state: {what}"), 0, expected, found)
}

impl State {
    /// A fresh namespace: the root directory alone, every hugeblock free.
    pub(crate) fn new(blocks: u64, hugeblock: u32, time: i64) -> State {
        let mut inodes = HashMap::new();
        inodes.insert(ROOT_INO, Inode::new(Kind::Dir, 0o755, time, ROOT_INO));
        State {
            inodes,
            next_ino: ROOT_INO + 1,
            owner: vec![0; blocks as usize],
            free: (0..blocks as u32).collect(),
            hugeblock,
            folded_run: 0,
            replaying: false,
        }
    }

    /// The largest file size: 2^36 - 16 hugeblocks.
    pub(crate) fn max_file(&self) -> u64 {
        (u32::MAX as u64 * 16).saturating_mul(self.hugeblock as u64)
    }

    pub(crate) fn blocks(&self) -> u64 {
        self.owner.len() as u64
    }

    /// Rebuild the free ring from ownership (ascending block numbers).
    pub(crate) fn rebuild_free(&mut self) {
        self.free = (0..self.owner.len() as u32)
            .filter(|&b| self.owner[b as usize] == 0)
            .collect();
    }

    pub(crate) fn get(&self, ino: u64) -> Option<&Inode> {
        self.inodes.get(&ino)
    }

    fn dir(&self, ino: u64) -> Result<&Inode> {
        match self.inodes.get(&ino) {
            Some(i) if i.kind == Kind::Dir => Ok(i),
            Some(_) => Err(dmg(
                "directory",
                format!("inode {ino} a directory"),
                "a file",
            )),
            None => Err(dmg(
                "directory",
                format!("inode {ino} to exist"),
                "no such inode",
            )),
        }
    }

    /// Check that a grow's blocks are in range and free (or already the inode's own at that
    /// index, for a write run re-folded after recovery), and the inode exists.
    fn check_grow(&self, g: &Grow, kind: Option<Kind>) -> Result<()> {
        let inode = self
            .inodes
            .get(&g.ino)
            .ok_or_else(|| dmg("grow", format!("inode {} to exist", g.ino), "no such inode"))?;
        if let Some(k) = kind
            && inode.kind != k
        {
            return Err(dmg(
                "grow",
                format!("inode {} a {k:?}", g.ino),
                format!("{:?}", inode.kind),
            ));
        }
        if g.size > self.max_file() {
            return Err(dmg(
                "size",
                format!("at most {}", self.max_file()),
                g.size.to_string(),
            ));
        }
        if inode.kind == Kind::Dir {
            let mapped = inode.blocks.len() as u64 + g.blocks.len() as u64;
            if g.size > mapped * self.hugeblock as u64 {
                return Err(dmg(
                    "directory file size",
                    format!("at most its {mapped} hugeblocks"),
                    g.size.to_string(),
                ));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for &(idx, blk) in &g.blocks {
            if blk as u64 >= self.blocks() {
                return Err(dmg(
                    "hugeblock",
                    format!("below {}", self.blocks()),
                    blk.to_string(),
                ));
            }
            if !seen.insert(blk) {
                return Err(dmg(
                    "hugeblock",
                    "named once in a record",
                    format!("{blk} twice"),
                ));
            }
            let own = self.owner[blk as usize];
            let mine = own == g.ino && inode.blocks.get(&idx) == Some(&blk);
            if own != 0 && !mine {
                return Err(dmg(
                    "hugeblock ownership",
                    format!("block {blk} free for inode {}", g.ino),
                    format!("owned by inode {own}"),
                ));
            }
            if !mine && inode.blocks.contains_key(&idx) {
                return Err(dmg(
                    "file block",
                    format!("index {idx} of inode {} unmapped", g.ino),
                    "mapped already",
                ));
            }
            if idx.checked_mul(self.hugeblock as u64).is_none() {
                return Err(dmg(
                    "file block index",
                    "below 2^64 / hugeblock",
                    idx.to_string(),
                ));
            }
        }
        Ok(())
    }

    fn apply_grow(&mut self, g: &Grow) {
        let mut freed = Vec::new();
        if let Some(inode) = self.inodes.get_mut(&g.ino) {
            for &(idx, blk) in &g.blocks {
                if let Some(old) = inode.blocks.insert(idx, blk)
                    && old != blk
                {
                    freed.push(old);
                }
                self.owner[blk as usize] = g.ino;
            }
            inode.size = inode.size.max(g.size);
        }
        for b in freed {
            self.free_block(b);
        }
    }

    /// A write's effect on DRAM (its record comes later, when its run is folded).
    pub(crate) fn apply_write(&mut self, g: &Grow, mtime: i64) {
        self.apply_grow(g);
        if let Some(i) = self.inodes.get_mut(&g.ino) {
            i.mtime = mtime;
            i.ctime = mtime;
        }
    }

    fn free_block(&mut self, blk: u32) {
        self.owner[blk as usize] = 0;
        if !self.replaying {
            self.free.push_back(blk);
        }
    }

    /// Free every block of `ino` at index >= `from`.
    fn free_from(&mut self, ino: u64, from: u64) {
        let mut gone = Vec::new();
        if let Some(inode) = self.inodes.get_mut(&ino) {
            let tail = inode.blocks.split_off(&from);
            gone.extend(tail.values().copied());
        }
        for b in gone {
            self.free_block(b);
        }
    }

    /// Drop an inode and free its blocks.
    fn drop_inode(&mut self, ino: u64) {
        self.free_from(ino, 0);
        self.inodes.remove(&ino);
    }

    fn is_ancestor(&self, anc: u64, mut d: u64) -> bool {
        for _ in 0..=self.inodes.len() {
            if d == anc {
                return true;
            }
            if d == ROOT_INO {
                return false;
            }
            match self.inodes.get(&d) {
                Some(i) => d = i.parent,
                None => return false,
            }
        }
        false
    }

    /// Validate `op` against the state, then apply it. A failed check changes nothing.
    pub(crate) fn apply(&mut self, op: &Op) -> Result<()> {
        match op {
            Op::Create {
                parent,
                ino,
                kind,
                mode,
                time,
                name,
                dir,
            } => {
                let p = self.dir(*parent)?;
                if p.entries.contains_key(name) {
                    return Err(dmg("create", format!("{name:?} free in {parent}"), "taken"));
                }
                if self.inodes.contains_key(ino) || *ino <= ROOT_INO {
                    return Err(dmg("create", format!("inode {ino} unused"), "in use"));
                }
                if dir.ino != *parent {
                    return Err(dmg(
                        "create",
                        format!("directory update of {parent}"),
                        dir.ino.to_string(),
                    ));
                }
                self.check_grow(dir, Some(Kind::Dir))?;
                self.apply_grow(dir);
                let p = self.inodes.get_mut(parent).expect("checked");
                p.entries.insert(name.clone(), *ino);
                p.mtime = *time;
                p.ctime = *time;
                self.inodes
                    .insert(*ino, Inode::new(*kind, *mode, *time, *parent));
                self.next_ino = self.next_ino.max(ino + 1);
            }
            Op::Write {
                run, mtime, grow, ..
            } => {
                self.check_grow(grow, Some(Kind::File))?;
                self.apply_grow(grow);
                let i = self.inodes.get_mut(&grow.ino).expect("checked");
                i.mtime = *mtime;
                i.ctime = *mtime;
                self.folded_run = self.folded_run.max(*run);
            }
            Op::Truncate { ino, len, time } => {
                if *len > self.max_file() {
                    return Err(dmg(
                        "truncate length",
                        format!("at most {}", self.max_file()),
                        len.to_string(),
                    ));
                }
                match self.inodes.get(ino) {
                    Some(i) if i.kind == Kind::File => {}
                    _ => return Err(dmg("truncate", format!("file inode {ino}"), "none")),
                }
                let hb = self.hugeblock as u64;
                self.free_from(*ino, len.div_ceil(hb));
                let i = self.inodes.get_mut(ino).expect("checked");
                i.size = *len;
                i.mtime = *time;
                i.ctime = *time;
            }
            Op::Remove {
                parent,
                name,
                ino,
                time,
                dir,
            } => {
                let p = self.dir(*parent)?;
                if p.entries.get(name) != Some(ino) {
                    return Err(dmg(
                        "remove",
                        format!("{name:?} -> {ino} in {parent}"),
                        "missing",
                    ));
                }
                let victim = self
                    .inodes
                    .get(ino)
                    .ok_or_else(|| dmg("remove", "inode", "none"))?;
                if victim.kind == Kind::Dir && !victim.entries.is_empty() {
                    return Err(dmg("rmdir", "an empty directory", "entries"));
                }
                if dir.ino != *parent {
                    return Err(dmg(
                        "remove",
                        format!("directory update of {parent}"),
                        dir.ino.to_string(),
                    ));
                }
                self.check_grow(dir, Some(Kind::Dir))?;
                self.apply_grow(dir);
                let p = self.inodes.get_mut(parent).expect("checked");
                p.entries.remove(name);
                p.mtime = *time;
                p.ctime = *time;
                self.drop_inode(*ino);
            }
            Op::Rename {
                from_parent,
                from_name,
                to_parent,
                to_name,
                time,
                dirs,
            } => {
                let src = *self
                    .dir(*from_parent)?
                    .entries
                    .get(from_name)
                    .ok_or_else(|| {
                        dmg(
                            "rename",
                            format!("{from_name:?} in {from_parent}"),
                            "missing",
                        )
                    })?;
                let to_dir = self.dir(*to_parent)?;
                let old = to_dir.entries.get(to_name).copied();
                let skind = self.inodes.get(&src).map(|i| i.kind);
                if let Some(o) = old
                    && o != src
                {
                    let oi = self
                        .inodes
                        .get(&o)
                        .ok_or_else(|| dmg("rename", "target inode", "none"))?;
                    let ok = match (skind, oi.kind) {
                        (Some(Kind::Dir), Kind::Dir) => oi.entries.is_empty(),
                        (Some(Kind::File), Kind::File) => true,
                        _ => false,
                    };
                    if !ok {
                        return Err(dmg(
                            "rename",
                            "a replaceable target",
                            "kind mismatch or not empty",
                        ));
                    }
                }
                if skind == Some(Kind::Dir) && self.is_ancestor(src, *to_parent) {
                    return Err(dmg(
                        "rename",
                        "a directory not moved under itself",
                        "a loop",
                    ));
                }
                for g in dirs {
                    if g.ino != *from_parent && g.ino != *to_parent {
                        return Err(dmg(
                            "rename",
                            "updates of the two directories",
                            g.ino.to_string(),
                        ));
                    }
                    self.check_grow(g, Some(Kind::Dir))?;
                }
                for g in dirs {
                    self.apply_grow(g);
                }
                if old == Some(src) {
                    // Renaming a name onto itself (or onto another name of the same inode).
                    if from_parent == to_parent && from_name == to_name {
                        return Ok(());
                    }
                }
                if let Some(o) = old
                    && o != src
                {
                    self.drop_inode(o);
                }
                let fp = self.inodes.get_mut(from_parent).expect("checked");
                fp.entries.remove(from_name);
                fp.mtime = *time;
                fp.ctime = *time;
                let tp = self.inodes.get_mut(to_parent).expect("checked");
                tp.entries.insert(to_name.clone(), src);
                tp.mtime = *time;
                tp.ctime = *time;
                if let Some(s) = self.inodes.get_mut(&src) {
                    s.parent = if s.kind == Kind::Dir {
                        *to_parent
                    } else {
                        s.parent
                    };
                    s.ctime = *time;
                }
            }
            Op::SetAttr {
                ino,
                mode,
                atime,
                mtime,
                time,
            } => {
                let i = self
                    .inodes
                    .get_mut(ino)
                    .ok_or_else(|| dmg("setattr", format!("inode {ino}"), "none"))?;
                if let Some(m) = mode {
                    i.mode = *m & 0o7777;
                }
                if let Some(a) = atime {
                    i.atime = *a;
                }
                if let Some(m) = mtime {
                    i.mtime = *m;
                }
                i.ctime = *time;
            }
        }
        Ok(())
    }

    /// The checkpoint body (without its header).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.u64(self.next_ino)
            .u64(self.folded_run)
            .u32(self.inodes.len() as u32);
        let mut inos: Vec<&u64> = self.inodes.keys().collect();
        inos.sort_unstable();
        for ino in inos {
            let i = &self.inodes[ino];
            e.u64(*ino)
                .u8(i.kind.code())
                .u32(i.mode)
                .u64(i.size)
                .i64(i.atime)
                .i64(i.mtime)
                .i64(i.ctime)
                .u64(i.parent);
            let blocks: Vec<(u64, u32)> = i.blocks.iter().map(|(&a, &b)| (a, b)).collect();
            put_extents(&mut e, &blocks);
            e.u32(i.entries.len() as u32);
            for (name, child) in &i.entries {
                e.name(name).u64(*child);
            }
        }
        e.buf
    }

    /// Decode a checkpoint body and validate it whole: every entry names an inode, every
    /// inode but the root is named once, parents match, blocks owned once.
    pub(crate) fn decode(body: &[u8], at: u64, blocks: u64, hugeblock: u32) -> Result<State> {
        let mut d = Dec::new(body, at, "metadata checkpoint");
        let mut st = State::new(blocks, hugeblock, 0);
        st.inodes.clear();
        st.next_ino = d.u64("next ino")?;
        st.folded_run = d.u64("folded run")?;
        let n = d.count("inode count", 40)?;
        for _ in 0..n {
            let iat = d.at();
            let ino = d.u64("ino")?;
            let kat = d.at();
            let kind = Kind::from_code(d.u8("kind")?, "metadata checkpoint", kat)?;
            let mut i = Inode::new(kind, d.u32("mode")?, 0, 0);
            i.size = d.u64("size")?;
            i.atime = d.i64("atime")?;
            i.mtime = d.i64("mtime")?;
            i.ctime = d.i64("ctime")?;
            i.parent = d.u64("parent")?;
            for (idx, blk) in get_extents(&mut d)? {
                if blk as u64 >= blocks
                    || st.owner[blk as usize] != 0
                    || i.blocks.insert(idx, blk).is_some()
                {
                    return Err(FsError::damage(
                        "metadata checkpoint (block)",
                        iat,
                        format!("block {blk} below {blocks}, owned once"),
                        "out of range or owned twice",
                    ));
                }
                st.owner[blk as usize] = ino;
            }
            let limit = match kind {
                Kind::Dir => i.blocks.len() as u64 * hugeblock as u64,
                Kind::File => st.max_file(),
            };
            if i.size > limit {
                return Err(FsError::damage(
                    "metadata checkpoint (size)",
                    iat,
                    format!("at most {limit} bytes"),
                    i.size.to_string(),
                ));
            }
            let ne = d.count("entry count", 11)?;
            for _ in 0..ne {
                let name = d.name("entry name")?;
                let child = d.u64("entry ino")?;
                i.entries.insert(name, child);
            }
            if ino == 0 || ino >= st.next_ino || st.inodes.insert(ino, i).is_some() {
                return Err(FsError::damage(
                    "metadata checkpoint (ino)",
                    iat,
                    format!("a unique inode number in 1..{}", st.next_ino),
                    ino.to_string(),
                ));
            }
        }
        d.expect_end()?;
        // Structure: the root is a directory, every other inode is named exactly once, by its
        // parent if it is a directory.
        match st.inodes.get(&ROOT_INO) {
            Some(r) if r.kind == Kind::Dir => {}
            _ => {
                return Err(FsError::damage(
                    "metadata checkpoint (root)",
                    at,
                    "a root directory",
                    "none",
                ));
            }
        }
        let mut named: HashMap<u64, u64> = HashMap::new();
        for (&dino, i) in &st.inodes {
            if i.kind != Kind::Dir && !i.entries.is_empty() {
                return Err(FsError::damage(
                    "metadata checkpoint (entries)",
                    at,
                    "entries only in directories",
                    format!("file {dino} has some"),
                ));
            }
            for &child in i.entries.values() {
                let ok = st
                    .inodes
                    .get(&child)
                    .is_some_and(|c| c.kind == Kind::File || c.parent == dino);
                if child == ROOT_INO || !ok || named.insert(child, dino).is_some() {
                    return Err(FsError::damage(
                        "metadata checkpoint (directory entry)",
                        at,
                        format!("inode {child} named once, by its parent"),
                        format!("named in {dino}"),
                    ));
                }
            }
        }
        if named.len() + 1 != st.inodes.len() {
            return Err(FsError::damage(
                "metadata checkpoint (inodes)",
                at,
                format!("{} named inodes", st.inodes.len() - 1),
                named.len().to_string(),
            ));
        }
        st.rebuild_free();
        let _ = layout::ROOT_INO;
        Ok(st)
    }
}
