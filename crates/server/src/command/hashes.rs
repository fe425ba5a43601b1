//! (being written)
use super::CommandSpec;
pub const COMMANDS: &[CommandSpec] = &[];
