//! `kavach target`: the block target over TCP (`target::server`).

use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};
use clap::{Args, Subcommand, ValueEnum};
use target::Direct;
use target::server::{ServerOptions, TargetServer, install_signal_handlers};

use crate::outcome::{CommandFailed, Outcome};

#[derive(Debug, Subcommand)]
pub enum TargetCommand {
    /// Serve namespaces (one file DIR/JOB.ns per job) to checkpoint/restart runtimes over TCP.
    ///
    /// Clients name a namespace in their device spec, tcp://HOST:PORT/JOB (KAVACH_CR_DEVICE for
    /// the LD_PRELOAD runtime). A client creates its namespace at its first connection; a
    /// write is answered only once it is durable in the namespace file (O_DSYNC, and O_DIRECT
    /// where the file system allows it). The protocol is docs/format/target-protocol.md.
    ///
    /// DIR must exist and be a directory (it is not created, so that a mistyped path is an
    /// error); a lock file in it (.kavach-target.lock) keeps a second server out. When the
    /// server is up it prints one line on stdout, `kavach: listening on ADDR (...)`, or with
    /// --json a JSON object {"event":"listening","listen":ADDR,"dir":DIR}; when it stops, one
    /// more line (`kavach: target stopped after ...`, or {"event":"stopped",...}). Errors go
    /// to stderr. SIGTERM or SIGINT stop it cleanly; kill -9 loses nothing that was
    /// acknowledged. There is no authentication: listen on a trusted network only.
    #[command(after_help = "Examples:\n  \
        mkdir -p /srv/cr && kavach target serve --dir /srv/cr\n  \
        kavach target serve --dir /srv/cr --listen 0.0.0.0:7420 --json\n  \
        KAVACH_CR_DIR=/ckpt KAVACH_CR_DEVICE=tcp://server:7420/job42 \\\n      \
        LD_PRELOAD=libkavach_cr.so ./app\n\n\
        Exit status: 0 stopped by a signal, 2 could not start (or failed while serving).")]
    Serve(ServeArgs),
}

/// Whether namespace files use O_DIRECT.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DirectArg {
    /// Where the file system allows it.
    Auto,
    /// Always; a namespace on a file system without it cannot be opened.
    On,
    /// Never (the page cache, written through with O_DSYNC).
    Off,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory holding one file per namespace (must exist).
    #[arg(long)]
    dir: PathBuf,
    /// Address to listen on, HOST:PORT (port 0: any free port; the first line on stdout says
    /// which).
    #[arg(long, default_value = "127.0.0.1:7420")]
    listen: String,
    /// O_DIRECT for the namespace files.
    #[arg(long, value_enum, default_value_t = DirectArg::Auto)]
    direct: DirectArg,
    /// Most connections served at once (at least 1); one more is refused.
    #[arg(long, default_value_t = 256)]
    max_connections: usize,
    /// Print the lines on stdout (listening, stopped) as JSON objects.
    #[arg(long)]
    json: bool,
}

fn refused(e: impl std::fmt::Display) -> anyhow::Error {
    CommandFailed(anyhow!("{e}")).into()
}

pub fn run(c: TargetCommand) -> Result<Outcome> {
    match c {
        TargetCommand::Serve(a) => serve(&a),
    }
}

fn serve(a: &ServeArgs) -> Result<Outcome> {
    if a.max_connections == 0 {
        return Err(refused("--max-connections must be at least 1"));
    }
    let opts = ServerOptions {
        max_connections: a.max_connections,
        direct: match a.direct {
            DirectArg::Auto => Direct::Auto,
            DirectArg::On => Direct::On,
            DirectArg::Off => Direct::Off,
        },
        ..ServerOptions::default()
    };
    // Bind first, then take the directory: a bad address or directory creates nothing.
    let srv = TargetServer::bind(&a.listen, &a.dir, opts).map_err(|e| {
        refused(format!(
            "kavach target serve --dir {}: {e}",
            a.dir.display()
        ))
    })?;
    install_signal_handlers(&srv.handle())
        .map_err(|e| refused(format!("cannot install signal handlers: {e}")))?;
    let addr = srv.local_addr();
    if a.json {
        server::say_out!(
            "{}",
            serde_json::json!({ "event": "listening", "listen": addr.to_string(), "dir": a.dir })
        );
    } else {
        server::say_out!(
            "kavach: listening on {addr} (namespaces in {}); stop with Ctrl-C or SIGTERM",
            a.dir.display()
        );
    }
    let summary = srv.run().context("the target failed")?;
    if a.json {
        server::say_out!(
            "{}",
            serde_json::json!({
                "event": "stopped",
                "requests": summary.requests,
                "connections": summary.connections,
            })
        );
    } else {
        server::say_out!(
            "kavach: target stopped after {} requests on {} connections",
            summary.requests,
            summary.connections
        );
    }
    Ok(Outcome::Ok)
}
