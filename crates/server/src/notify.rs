//! What the server learns of each write: the keys it touched, for WATCH and for clients blocked
//! on a key (BLPOP and kin).

use model::{Db, Effect};

/// What one effect wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Touch {
    /// One key.
    Key(Db, Vec<u8>),
    /// Every key of a database (FLUSHDB, one side of SWAPDB).
    Db(Db),
    /// Every key (FLUSHALL).
    All,
}

impl Touch {
    /// The touches of a list of effects.
    pub(crate) fn of(effects: &[Effect]) -> Vec<Touch> {
        effects
            .iter()
            .flat_map(|e| match e {
                Effect::FlushDb { db } => vec![Touch::Db(*db)],
                Effect::FlushAll => vec![Touch::All],
                Effect::SwapDb { a, b } => vec![Touch::Db(*a), Touch::Db(*b)],
                other => other
                    .key()
                    .map(|(db, k)| Touch::Key(db, k.to_vec()))
                    .into_iter()
                    .collect(),
            })
            .collect()
    }
}

/// Hears of every applied write.
#[derive(Debug, Default)]
pub(crate) struct Notifier {}

impl Notifier {
    /// Effects that wrote `touched` were applied.
    pub(crate) fn touched(&self, touched: &[Touch]) {
        let _ = touched;
    }
}
