//! How a command ends: its [`Outcome`] (exit 0 or 1), the errors that say it could not run (exit
//! 2), and its JSON output. Every command module takes these from here; `main` turns them into
//! the exit code.

/// How a command that ran ended, as an exit code.
///
/// The contract, the same for every command (`docs/design.md`, "The command line's contract"):
///
/// | exit | meaning | how a command says it |
/// | --- | --- | --- |
/// | 0 | success (and, for a checker, nothing found) | `Ok(Outcome::Ok)` |
/// | 1 | the command ran and found damage, or could not repair all of it | `Ok(Outcome::Damage)`, after printing the findings |
/// | 2 | the command could not run: bad arguments, no such file, not a pool, pool in use, no space, a refusal | any `Err` |
///
/// So damage is never an error value: a command that found damage prints what and where, and
/// returns `Outcome::Damage`. Everything that kept it from doing its job is an `Err`, and a
/// command that returns `Err` has left every file as it found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Ok,
    /// Exit 1: the command ran and found damage, or could not repair all of it.
    Damage,
}

/// Marks an error after which a checking command could not run at all. Every `Err` exits 2;
/// this only adds "the check could not run" to the message.
#[derive(Debug)]
pub struct CouldNotRun;

impl std::fmt::Display for CouldNotRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the check could not run")
    }
}

impl std::error::Error for CouldNotRun {}

/// An error after which a command could not run (exit 2, like every `Err`). It reads as the
/// error it wraps, without the suffix [`CouldNotRun`] adds.
#[derive(Debug)]
pub struct CommandFailed(pub anyhow::Error);

impl std::fmt::Display for CommandFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for CommandFailed {}

/// Print `value` as pretty JSON on stdout.
pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// An error saying the command refused to run (exit 2), reading as `msg`.
pub fn refused(msg: impl std::fmt::Display) -> anyhow::Error {
    CommandFailed(anyhow::anyhow!("{msg}")).into()
}

/// Check a path that option `flag` names for the command to write, before anything is done:
/// its directory must exist and it must not be a directory; with `overwrite` false it must not
/// exist at all.
pub fn check_output_path(flag: &str, p: &std::path::Path, overwrite: bool) -> anyhow::Result<()> {
    if !overwrite && std::fs::symlink_metadata(p).is_ok() {
        return Err(refused(format!(
            "{flag} {}: already exists, expected a new file",
            p.display()
        )));
    }
    if p.is_dir() {
        return Err(refused(format!(
            "{flag} {}: is a directory, expected a file to write",
            p.display()
        )));
    }
    if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !d.is_dir() {
            return Err(refused(format!(
                "{flag} {}: the directory {} does not exist",
                p.display(),
                d.display()
            )));
        }
    }
    Ok(())
}
