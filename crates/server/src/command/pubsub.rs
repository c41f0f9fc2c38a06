//! Pub/sub: SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH, PUBSUB. Nothing of it is
//! persisted. Messages travel through the [`Notifier`](crate::notify::Notifier) to each
//! subscriber's mailbox; the subscriber's worker writes them (RESP3 push frames, or RESP2
//! arrays) between its replies ([`write_message`]).

use super::{Action, CommandError, CommandResult, Ctx, Spec, is, quote};
use crate::notify::Message;
use crate::resp::{
    Reply, write_array_header, write_bulk, write_integer, write_null, write_push_header,
};

const PUBSUB: &[&str] = &["pubsub", "noscript", "loading", "stale"];

/// This family's commands, sorted by name.
pub(super) static SPECS: &[Spec] = &[
    spec!("psubscribe", -2, PUBSUB, 0, 0, 0, cmd_psubscribe),
    spec!(
        "publish",
        3,
        &["pubsub", "loading", "stale", "fast", "may_replicate"],
        0,
        0,
        0,
        cmd_publish
    ),
    spec!("pubsub", -2, PUBSUB, 0, 0, 0, cmd_pubsub),
    spec!("punsubscribe", -1, PUBSUB, 0, 0, 0, cmd_punsubscribe),
    spec!("subscribe", -2, PUBSUB, 0, 0, 0, cmd_subscribe),
    spec!("unsubscribe", -1, PUBSUB, 0, 0, 0, cmd_unsubscribe),
];

/// The commands a RESP2 connection may run while subscribed.
pub(super) fn allowed_when_subscribed(name: &str) -> bool {
    matches!(
        name,
        "subscribe"
            | "unsubscribe"
            | "psubscribe"
            | "punsubscribe"
            | "ssubscribe"
            | "sunsubscribe"
            | "ping"
            | "quit"
            | "reset"
    )
}

/// Appends a message as the subscriber receives it: `message channel payload` or `pmessage
/// pattern channel payload`, a push frame in RESP3.
pub(crate) fn write_message(out: &mut Vec<u8>, m: &Message, resp3: bool) {
    match &m.pattern {
        None => {
            write_push_header(out, 3, resp3);
            write_bulk(out, b"message");
        }
        Some(pattern) => {
            write_push_header(out, 4, resp3);
            write_bulk(out, b"pmessage");
            write_bulk(out, pattern);
        }
    }
    write_bulk(out, &m.channel);
    write_bulk(out, &m.payload);
}

/// One confirmation: `[kind, name or null, subscriptions left]`.
fn confirm(ctx: &Ctx<'_>, out: &mut Vec<u8>, kind: &str, name: Option<&[u8]>) {
    let resp3 = ctx.resp3();
    write_push_header(out, 3, resp3);
    write_bulk(out, kind.as_bytes());
    match name {
        Some(n) => write_bulk(out, n),
        None => write_null(out, resp3),
    }
    write_integer(out, ctx.session.subscriptions() as i64);
}

fn cmd_subscribe(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    for channel in &args[1..] {
        if ctx.shared.notifier.subscribe(&ctx.session.mailbox, channel) {
            ctx.session.channels.insert(channel.clone());
        }
        confirm(ctx, out, "subscribe", Some(channel));
    }
    Ok(Action::Continue)
}

fn cmd_psubscribe(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    for pattern in &args[1..] {
        if ctx
            .shared
            .notifier
            .psubscribe(&ctx.session.mailbox, pattern)
        {
            ctx.session.patterns.insert(pattern.clone());
        }
        confirm(ctx, out, "psubscribe", Some(pattern));
    }
    Ok(Action::Continue)
}

fn cmd_unsubscribe(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let names: Vec<Vec<u8>> = if args.len() > 1 {
        args[1..].to_vec()
    } else {
        ctx.session.channels.iter().cloned().collect()
    };
    if names.is_empty() {
        confirm(ctx, out, "unsubscribe", None);
    }
    for channel in &names {
        ctx.shared.notifier.unsubscribe(ctx.session.id, channel);
        ctx.session.channels.remove(channel);
        confirm(ctx, out, "unsubscribe", Some(channel));
    }
    Ok(Action::Continue)
}

fn cmd_punsubscribe(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let names: Vec<Vec<u8>> = if args.len() > 1 {
        args[1..].to_vec()
    } else {
        ctx.session.patterns.iter().cloned().collect()
    };
    if names.is_empty() {
        confirm(ctx, out, "punsubscribe", None);
    }
    for pattern in &names {
        ctx.shared.notifier.punsubscribe(ctx.session.id, pattern);
        ctx.session.patterns.remove(pattern);
        confirm(ctx, out, "punsubscribe", Some(pattern));
    }
    Ok(Action::Continue)
}

fn cmd_publish(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = ctx.shared.notifier.publish(&args[1], &args[2]);
    write_integer(out, i64::try_from(n).unwrap_or(i64::MAX));
    Ok(Action::Continue)
}

const PUBSUB_HELP: &[&str] = &[
    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "SHARDCHANNELS [<pattern>]",
    "    Return the currently active shard level channels matching a <pattern> (default: '*').",
    "SHARDNUMSUB [<shardchannel> ...]",
    "    Return the number of subscribers for the specified shard level channel(s)",
    "HELP",
    "    Prints this help.",
];

fn cmd_pubsub(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let sub = &args[1];
    let notifier = &ctx.shared.notifier;
    if is(sub, "help") && args.len() == 2 {
        write_array_header(out, PUBSUB_HELP.len());
        for line in PUBSUB_HELP {
            crate::resp::write_simple(out, line.as_bytes());
        }
    } else if is(sub, "channels") && args.len() <= 3 {
        let mut channels = notifier.channels(args.get(2).map(Vec::as_slice));
        channels.sort();
        Reply::Array(channels.into_iter().map(Reply::Bulk).collect()).encode_as(out, ctx.resp3());
    } else if is(sub, "shardchannels") && args.len() <= 3 {
        // No shard channels: SSUBSCRIBE is not served.
        write_array_header(out, 0);
    } else if is(sub, "numpat") && args.len() == 2 {
        write_integer(out, notifier.numpat() as i64);
    } else if is(sub, "numsub") || is(sub, "shardnumsub") {
        let shard = is(sub, "shardnumsub");
        write_array_header(out, (args.len() - 2) * 2);
        for channel in &args[2..] {
            write_bulk(out, channel);
            let n = if shard { 0 } else { notifier.numsub(channel) };
            write_integer(out, n as i64);
        }
    } else if is(sub, "help") || is(sub, "numpat") {
        let name = String::from_utf8_lossy(sub).to_ascii_lowercase();
        return Err(CommandError::Arity(format!("pubsub|{name}")));
    } else if is(sub, "channels") || is(sub, "shardchannels") {
        // Redis checks these two in the handler, with this message.
        return Err(CommandError::Other(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
            quote(sub)
        )));
    } else {
        return Err(CommandError::UnknownSubcommand {
            command: "PUBSUB",
            sub: quote(sub),
        });
    }
    Ok(Action::Continue)
}
