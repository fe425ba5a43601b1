//! Lua scripting (EVAL/EVALSHA/SCRIPT): not implemented yet; no commands are registered.
use super::CommandSpec;
pub const COMMANDS: &[CommandSpec] = &[];
