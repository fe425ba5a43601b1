//! What a standalone redis-server answers to cluster and module commands: CLUSTER (every
//! subcommand), READONLY, READWRITE and ASKING refuse with "This instance has cluster support
//! disabled"; MODULE LIST lists no modules, MODULE HELP helps, and MODULE LOAD/LOADEX/UNLOAD are
//! refused (Gradus loads no modules; Redis 7 refuses them by default too).
//!
//! Clients and tools probe these to learn what they talk to (a cluster-aware client sends
//! `CLUSTER SLOTS` or `CLUSTER INFO` and falls back to one node on that error; module-aware
//! libraries send `MODULE LIST`), so the replies are Redis' own rather than "unknown command".
//!
//! May import: `args`, `error`, `tenancy::acl::category` (READONLY and co. are `@connection`). Nothing here touches keys or server state.

use super::{cmd, flags, sub, CommandSpec, Ctx, NO_KEYS};
use crate::args::is;
use crate::error::{CmdError, CmdResult};
use crate::tenancy::acl::category;
use bytes::Bytes;
use gradus_proto::Frame;

/// Redis' reply to every cluster command when `cluster-enabled` is off.
const NO_CLUSTER: &str = "This instance has cluster support disabled";
/// Redis 7's reply to MODULE LOAD/LOADEX/UNLOAD with `enable-module-command no`, its default;
/// Gradus has no module support at all, so it always answers this.
const NO_MODULES: &str = "MODULE command not allowed. If the enable-module-command option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server.";

/// Redis' flags of the cluster subcommands that change the cluster.
const CLUSTER_ADMIN: u32 = flags::ADMIN;
const CONN: u32 = flags::FAST | flags::LOADING;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("cluster", -2, 0, NO_KEYS, "cluster", "A container for Redis Cluster commands.", cluster).with_subcommands(&[
        sub("cluster|addslots", -3, CLUSTER_ADMIN, "Assigns new hash slots to a node."),
        sub("cluster|addslotsrange", -4, CLUSTER_ADMIN, "Assigns new hash slot ranges to a node."),
        sub("cluster|bumpepoch", 2, CLUSTER_ADMIN, "Advances the cluster config epoch."),
        sub("cluster|count-failure-reports", 3, CLUSTER_ADMIN, "Returns the number of active failure reports active for a node."),
        sub("cluster|countkeysinslot", 3, 0, "Returns the number of keys in a hash slot."),
        sub("cluster|delslots", -3, CLUSTER_ADMIN, "Sets hash slots as unbound for a node."),
        sub("cluster|delslotsrange", -4, CLUSTER_ADMIN, "Sets hash slot ranges as unbound for a node."),
        sub("cluster|failover", -2, CLUSTER_ADMIN, "Forces a replica to perform a manual failover of its master."),
        sub("cluster|flushslots", 2, CLUSTER_ADMIN, "Deletes all slots information from a node."),
        sub("cluster|forget", 3, CLUSTER_ADMIN, "Removes a node from the nodes table."),
        sub("cluster|getkeysinslot", 4, 0, "Returns the key names in a hash slot."),
        sub("cluster|help", 2, flags::LOADING, "Returns helpful text about the different subcommands."),
        sub("cluster|info", 2, 0, "Returns information about the state of a node."),
        sub("cluster|keyslot", 3, 0, "Returns the hash slot for a key."),
        sub("cluster|links", 2, 0, "Returns a list of all TCP links to and from peer nodes."),
        sub("cluster|meet", -4, CLUSTER_ADMIN, "Forces a node to handshake with another node."),
        sub("cluster|myid", 2, 0, "Returns the ID of a node."),
        sub("cluster|nodes", 2, 0, "Returns the cluster configuration for a node."),
        sub("cluster|replicas", 3, CLUSTER_ADMIN, "Lists the replica nodes of a master node."),
        sub("cluster|replicate", 3, CLUSTER_ADMIN, "Configure a node as replica of a master node."),
        sub("cluster|reset", -2, CLUSTER_ADMIN | flags::NOSCRIPT, "Resets a node."),
        sub("cluster|saveconfig", 2, CLUSTER_ADMIN, "Forces a node to save the cluster configuration to disk."),
        sub("cluster|set-config-epoch", 3, CLUSTER_ADMIN, "Sets the configuration epoch for a new node."),
        sub("cluster|setslot", -4, CLUSTER_ADMIN, "Binds a hash slot to a node."),
        sub("cluster|shards", 2, 0, "Returns the mapping of cluster slots to shards."),
        sub("cluster|slaves", 3, CLUSTER_ADMIN, "Lists the replica nodes of a master node."),
        sub("cluster|slots", 2, 0, "Returns the mapping of cluster slots to nodes."),
    ]),
    cmd("readonly", 1, CONN, NO_KEYS, "cluster", "Enables read-only queries for a connection to a Redis Cluster replica node.", no_cluster).with_acl(category::CONNECTION),
    // "Reids": Redis' own summary, typo included (COMMAND DOCS shows it).
    cmd("readwrite", 1, CONN, NO_KEYS, "cluster", "Enables read-write queries for a connection to a Reids Cluster replica node.", no_cluster).with_acl(category::CONNECTION),
    cmd("asking", 1, flags::FAST, NO_KEYS, "cluster", "Signals that a cluster client is following an -ASK redirect.", no_cluster).with_acl(category::CONNECTION),
    cmd("module", -2, 0, NO_KEYS, "server", "A container for module commands.", module).with_subcommands(&[
        sub("module|help", 2, flags::LOADING, "Returns helpful text about the different subcommands."),
        sub("module|list", 2, flags::ADMIN | flags::NOSCRIPT, "Returns all loaded modules."),
        sub("module|load", -3, flags::ADMIN | flags::NOSCRIPT, "Loads a module."),
        sub("module|loadex", -3, flags::ADMIN | flags::NOSCRIPT, "Loads a module using extended parameters."),
        sub("module|unload", 3, flags::ADMIN | flags::NOSCRIPT, "Unloads a module."),
    ]),
];

const MODULE_HELP: &[&str] = &[
    "MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LIST",
    "    Return a list of loaded modules.",
    "LOAD <path> [<arg> ...]",
    "    Load a module library from <path>, passing to it any optional arguments.",
    "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
    "    Load a module library from <path>, while passing it module configurations and optional arguments.",
    "UNLOAD <name>",
    "    Unload a module.",
    "HELP",
    "    Print this help.",
];

fn unknown(cmd: &str, sub: &Bytes) -> CmdError {
    CmdError::UnknownSubcommand {
        cmd: cmd.into(),
        sub: String::from_utf8_lossy(sub).into_owned(),
    }
}

fn cluster(_ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    // Redis checks the subcommand (and its arity) before the command runs, and every known
    // one, HELP included, then finds cluster mode off.
    let name = format!(
        "cluster|{}",
        String::from_utf8_lossy(&args[1]).to_lowercase()
    );
    if COMMANDS[0].subcommands.iter().any(|s| s.name == name) {
        Err(CmdError::err(NO_CLUSTER))
    } else {
        Err(unknown("CLUSTER", &args[1]))
    }
}

fn no_cluster(_ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    Err(CmdError::err(NO_CLUSTER))
}

fn module(_ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = &args[1];
    if is(sub, "list") {
        Ok(Frame::Array(Vec::new()))
    } else if is(sub, "help") {
        Ok(Frame::Array(
            MODULE_HELP
                .iter()
                .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
                .collect(),
        ))
    } else if is(sub, "load") || is(sub, "loadex") || is(sub, "unload") {
        Err(CmdError::err(NO_MODULES))
    } else {
        Err(unknown("MODULE", sub))
    }
}
