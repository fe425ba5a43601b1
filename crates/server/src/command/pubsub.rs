//! Pub/sub commands: (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PUBLISH, SPUBLISH and PUBSUB.
//!
//! Subscriptions are the connection's ([`crate::pubsub::Subscriptions`]) and the server's
//! ([`crate::pubsub::PubSub`]), always in the connection's tenant. A (un)subscribe confirmation
//! goes through the connection's outbox, like the messages, so a confirmation is always written
//! before any message of the channel it confirms (Redis writes both into one output buffer);
//! the handler then tells the connection that its reply is already queued. Inside EXEC the
//! confirmations are the command's reply instead.
//!
//! Shard channels behave as ordinary channels of their own table (one node owns every slot).
//!
//! May import: `pubsub`, `args`, `client`, `state`.

use super::{cmd, flags, sub, CommandSpec, Ctx, NO_KEYS};
use crate::args::show;
use crate::error::{CmdError, CmdResult};
use crate::pubsub::Kind;
use bytes::Bytes;
use gradus_proto::Frame;

/// Allowed while a RESP2 connection is subscribed, and Redis' `pubsub` flag.
const SUBS: u32 = flags::PUBSUB | flags::SUBSCRIBED_OK | flags::NOSCRIPT | flags::LOADING;
const PUBLISHES: u32 = flags::PUBSUB | flags::LOADING | flags::FAST | flags::REPLICATES;
const INTROSPECT: u32 = flags::PUBSUB | flags::LOADING;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("subscribe", -2, SUBS, NO_KEYS, "pubsub", "Listens for messages published to channels.", subscribe).with_channels(1, -1, false),
    cmd("unsubscribe", -1, SUBS, NO_KEYS, "pubsub", "Stops listening to messages posted to channels.", unsubscribe),
    cmd("psubscribe", -2, SUBS, NO_KEYS, "pubsub", "Listens for messages published to channels that match one or more patterns.", psubscribe).with_channels(1, -1, true),
    cmd("punsubscribe", -1, SUBS, NO_KEYS, "pubsub", "Stops listening to messages published to channels that match one or more patterns.", punsubscribe),
    cmd("ssubscribe", -2, SUBS, NO_KEYS, "pubsub", "Listens for messages published to shard channels.", ssubscribe).with_channels(1, -1, false),
    cmd("sunsubscribe", -1, SUBS, NO_KEYS, "pubsub", "Stops listening to messages posted to shard channels.", sunsubscribe),
    cmd("publish", 3, PUBLISHES, NO_KEYS, "pubsub", "Posts a message to a channel.", publish).with_channels(1, 1, false),
    cmd("spublish", 3, PUBLISHES, NO_KEYS, "pubsub", "Post a message to a shard channel", spublish).with_channels(1, 1, false),
    cmd("pubsub", -2, INTROSPECT, NO_KEYS, "pubsub", "A container for Pub/Sub commands.", pubsub).with_subcommands(&[
        sub("pubsub|channels", -2, INTROSPECT, "Returns the active channels."),
        sub("pubsub|numsub", -2, INTROSPECT, "Returns a count of subscribers to channels."),
        sub("pubsub|numpat", 2, INTROSPECT, "Returns a count of unique pattern subscriptions."),
        sub("pubsub|shardchannels", -2, INTROSPECT, "Returns the active shard channels."),
        sub("pubsub|shardnumsub", -2, INTROSPECT, "Returns the count of subscribers of shard channels."),
        sub("pubsub|help", 2, INTROSPECT, "Returns helpful text about the different subcommands."),
    ]),
];

fn subscribe(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    add(ctx, Kind::Channel, &args[1..])
}

fn psubscribe(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    add(ctx, Kind::Pattern, &args[1..])
}

fn ssubscribe(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    add(ctx, Kind::Shard, &args[1..])
}

fn unsubscribe(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    remove(ctx, Kind::Channel, &args[1..])
}

fn punsubscribe(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    remove(ctx, Kind::Pattern, &args[1..])
}

fn sunsubscribe(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    remove(ctx, Kind::Shard, &args[1..])
}

/// The confirmation's type word, as Redis sends it.
fn word(kind: Kind, subscribing: bool) -> &'static str {
    match (kind, subscribing) {
        (Kind::Channel, true) => "subscribe",
        (Kind::Channel, false) => "unsubscribe",
        (Kind::Pattern, true) => "psubscribe",
        (Kind::Pattern, false) => "punsubscribe",
        (Kind::Shard, true) => "ssubscribe",
        (Kind::Shard, false) => "sunsubscribe",
    }
}

fn confirmation(kind: Kind, subscribing: bool, name: Option<Bytes>, count: usize) -> Frame {
    Frame::Push(vec![
        Frame::Bulk(Bytes::from_static(word(kind, subscribing).as_bytes())),
        name.map_or(Frame::Null, Frame::Bulk),
        Frame::Integer(count as i64),
    ])
}

/// Subscribe to `names`: one confirmation each, with the connection's count after it.
fn add(ctx: &mut Ctx<'_>, kind: Kind, names: &[Bytes]) -> CmdResult {
    let shared = ctx.shared;
    let tenant = ctx.client.tenant;
    let outbox = ctx.client.outbox();
    let mut replies = Vec::with_capacity(names.len());
    for name in names {
        let subs = ctx.client.subscriptions();
        if subs.insert(kind, name.clone()) {
            shared.pubsub.subscribe(kind, tenant, name.clone(), &outbox);
        }
        let reply = confirmation(kind, true, Some(name.clone()), subs.count(kind));
        // Queued before the next channel is added: no message of it can come first.
        if ctx.client.in_transaction() {
            replies.push(reply);
        } else {
            ctx.client.queue_reply(&reply);
        }
    }
    ctx.client.note_subscriptions();
    done(ctx, replies)
}

/// Unsubscribe from `names`, or from every subscription of the kind when none are named.
fn remove(ctx: &mut Ctx<'_>, kind: Kind, names: &[Bytes]) -> CmdResult {
    let shared = ctx.shared;
    let tenant = ctx.client.tenant;
    let id = ctx.client.id;
    let named = !names.is_empty();
    let names: Vec<Bytes> = if named {
        names.to_vec()
    } else {
        ctx.client.subscriptions().names(kind)
    };
    let subs = ctx.client.subscriptions();
    let mut replies = Vec::with_capacity(names.len().max(1));
    for name in &names {
        if subs.remove(kind, name) {
            shared.pubsub.unsubscribe(kind, tenant, name, id);
        }
        replies.push(confirmation(
            kind,
            false,
            Some(name.clone()),
            subs.count(kind),
        ));
    }
    if names.is_empty() {
        replies.push(confirmation(kind, false, None, subs.count(kind)));
    }
    ctx.client.note_subscriptions();
    if !ctx.client.in_transaction() {
        for reply in replies.drain(..) {
            ctx.client.queue_reply(&reply);
        }
    }
    done(ctx, replies)
}

/// The command's reply: already queued (outside EXEC), else the confirmations themselves.
fn done(ctx: &mut Ctx<'_>, mut replies: Vec<Frame>) -> CmdResult {
    if replies.is_empty() {
        ctx.client.reply_queued = true;
        return Ok(Frame::Null);
    }
    if replies.len() == 1 {
        return Ok(replies.pop().expect("one"));
    }
    Ok(Frame::Array(replies))
}

fn publish(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let n = ctx
        .shared
        .pubsub
        .publish(Kind::Channel, ctx.client.tenant, &args[1], &args[2]);
    Ok(Frame::Integer(n as i64))
}

fn spublish(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let n = ctx
        .shared
        .pubsub
        .publish(Kind::Shard, ctx.client.tenant, &args[1], &args[2]);
    Ok(Frame::Integer(n as i64))
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
    "    Print this help.",
];

/// PUBSUB introspection: the caller's tenant, or every tenant for an admin.
fn pubsub(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_lowercase();
    let hub = &ctx.shared.pubsub;
    let tenant = (!ctx.client.perms.contains(crate::tenancy::Perms::ADMIN)
        || ctx.shared.tenancy.tenants.len() == 1)
        .then_some(ctx.client.tenant);
    let bulks = |names: Vec<Bytes>| Frame::Array(names.into_iter().map(Frame::Bulk).collect());
    let counts = |kind: Kind| {
        Frame::Array(
            args[2..]
                .iter()
                .flat_map(|c| {
                    [
                        Frame::Bulk(c.clone()),
                        Frame::Integer(hub.numsub(kind, tenant, c) as i64),
                    ]
                })
                .collect(),
        )
    };
    match (sub.as_str(), args.len()) {
        ("channels", 2 | 3) => Ok(bulks(hub.channels(
            Kind::Channel,
            tenant,
            args.get(2).map(|p| &p[..]),
        ))),
        ("shardchannels", 2 | 3) => Ok(bulks(hub.channels(
            Kind::Shard,
            tenant,
            args.get(2).map(|p| &p[..]),
        ))),
        ("numsub", _) => Ok(counts(Kind::Channel)),
        ("shardnumsub", _) => Ok(counts(Kind::Shard)),
        ("numpat", 2) => Ok(Frame::Integer(hub.numpat(tenant) as i64)),
        ("help", 2) => Ok(Frame::Array(
            PUBSUB_HELP
                .iter()
                .map(|l| Frame::Simple((*l).into()))
                .collect(),
        )),
        // Their arity is -2, so Redis' handler words it itself.
        ("channels" | "shardchannels", _) => Err(CmdError::err(format!(
            "unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
            show(&args[1])
        ))),
        ("numpat" | "help", _) => Err(CmdError::err(format!(
            "wrong number of arguments for 'pubsub|{sub}' command"
        ))),
        _ => Err(CmdError::UnknownSubcommand {
            cmd: "PUBSUB".into(),
            sub: show(&args[1]),
        }),
    }
}
