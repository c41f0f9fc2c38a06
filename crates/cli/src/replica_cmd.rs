//! `kavach promote` and the RESP call it and `kavach elect` make. Replicated serving itself is
//! the library `replicated::serve`.

use std::time::Duration;

use anyhow::{Context, Result, bail};

pub use replicated::serve::parse_replicas;

// ---------------------------------------------------------------------------------------------
// `kavach promote`.

/// Make a running backup the primary (manual failover).
///
/// Sends PROMOTE to the backup's RESP port. The backup stops taking replication traffic,
/// recovers as primary with the given backups (it needs a majority of all copies, its own
/// included), takes a new epoch so that the old primary's writes are refused everywhere, repairs
/// the other copies, rebuilds its store from the log, and starts accepting writes. Stop the old
/// primary first, or at least make sure clients stop writing to it: its writes fail once a
/// majority follows the new epoch.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example (backups on 7001 and 7002, RESP ports 6380 and 6381):\n  \
    kavach promote --port 6380 --replicas 127.0.0.1:7002 --write-quorum 1"
)]
pub struct PromoteArgs {
    /// The backup's RESP host.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The backup's RESP port.
    #[arg(long)]
    port: u16,
    /// The new primary's backups (their --listen addresses): usually the other backups, and
    /// the old primary once it is restarted as a backup.
    #[arg(long, value_name = "ADDR,ADDR")]
    replicas: Option<String>,
    /// Backups that must persist each write.
    #[arg(long, value_name = "W")]
    write_quorum: Option<usize>,
    /// Seconds to wait for the answer (recovery may copy the whole log), at least 1.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    timeout: u64,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
}

/// Run `kavach promote`.
pub fn run_promote(a: &PromoteArgs) -> Result<crate::outcome::Outcome> {
    let mut args: Vec<String> = vec!["PROMOTE".into()];
    if let Some(r) = &a.replicas {
        args.push(parse_replicas(r)?.join(","));
    }
    if let Some(w) = a.write_quorum {
        if a.replicas.is_none() {
            bail!("--write-quorum needs --replicas");
        }
        args.push(w.to_string());
    }
    let addr = format!("{}:{}", a.host, a.port);
    let answer = resp_call(&addr, &args, Duration::from_secs(a.timeout))?;
    let (ok, text) = match &answer {
        Ok(t) => (true, t.as_str()),
        Err(t) => (false, t.as_str()),
    };
    if a.json {
        crate::outcome::print_json(
            &serde_json::json!({ "ok": ok, "server": addr, "answer": text }),
        )?;
    } else if ok {
        println!("{addr}: {text}");
    }
    if !ok {
        return Err(
            crate::outcome::CommandFailed(anyhow::anyhow!("{addr} refused: {text}")).into(),
        );
    }
    Ok(crate::outcome::Outcome::Ok)
}

/// Send one RESP command to `addr` and read its answer: `Ok` with a simple or bulk string,
/// `Err` with an error reply's text. Connection failures are `CommandFailed`.
pub(crate) fn resp_call(
    addr: &str,
    args: &[String],
    timeout: Duration,
) -> Result<std::result::Result<String, String>> {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| {
        crate::outcome::CommandFailed(anyhow::anyhow!("cannot connect to {addr}: {e}"))
    })?;
    s.set_read_timeout(Some(timeout))?;
    let mut req = format!("*{}\r\n", args.len());
    for x in args {
        req.push_str(&format!("${}\r\n{x}\r\n", x.len()));
    }
    s.write_all(req.as_bytes())?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line)
        .with_context(|| format!("no answer from {addr}"))?;
    let line = line.trim_end();
    Ok(match line.split_at_checked(1) {
        Some(("+", t)) => Ok(t.to_string()),
        Some(("-", t)) => Err(t.to_string()),
        Some(("$", n)) => {
            let n: usize = n
                .parse()
                .map_err(|_| anyhow::anyhow!("{addr}: bad bulk length `{n}`"))?;
            if n > 64 << 20 {
                bail!("{addr}: an answer of {n} bytes");
            }
            let mut b = vec![0; n + 2];
            r.read_exact(&mut b)
                .with_context(|| format!("{addr}: short answer"))?;
            b.truncate(n);
            Ok(String::from_utf8_lossy(&b).into_owned())
        }
        _ => Err(format!("unexpected answer `{line}`")),
    })
}
