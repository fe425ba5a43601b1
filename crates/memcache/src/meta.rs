//! The flags of the meta commands (`mg`, `ms`, `md`, `ma`): single-character codes, some with a
//! token (`T30`, `Oabc`), checked and parsed once into a [`MetaFlags`]. The order in which the
//! client sent them is kept, because reply flags come back in request order.
//!
//! Rules follow memcached 1.6's `_meta_flag_preparse`: a repeated flag, an unknown flag, or a bad
//! numeric token is a `CLIENT_ERROR` (texts as memcached's); `P` and `L` (proxy hints) are
//! accepted and ignored; an opaque token is at most 32 bytes.

use bytes::Bytes;

/// Longest opaque (`O`) token, as in memcached.
pub const MAX_OPAQUE_LEN: usize = 32;
/// Most tokens on one meta command line (command and key included), as in memcached.
pub const MAX_META_TOKENS: usize = 24;

/// The `M` mode switch of `ms` and `ma`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaMode {
    /// `ms` modes.
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    /// `ma` modes.
    Incr,
    Decr,
}

/// Parsed meta flags. `None` / `false` = the flag was not sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaFlags {
    /// Every flag code in request order (reply flags are written in this order).
    pub order: Vec<u8>,
    /// `b`: the key was base64 (it has been decoded already); `k` returns it encoded.
    pub base64: bool,
    /// `O`: opaque token copied back.
    pub opaque: Option<Bytes>,
    /// `q`: suppress the nominal reply (`EN` for mg, `HD` for ms/md/ma).
    pub quiet: bool,
    /// `v`: return the value.
    pub value: bool,
    /// `u`: do not bump (no hit/last-access update).
    pub no_bump: bool,
    /// `x`: md removes the value but keeps the item.
    pub remove_value: bool,
    /// `I`: invalidate (md: mark stale; ms: allow a stale CAS).
    pub invalidate: bool,
    /// `C`: compare CAS.
    pub compare_cas: Option<u64>,
    /// `E`: use this as the new CAS value.
    pub new_cas: Option<u64>,
    /// `N`: vivify on miss with this TTL (memcached exptime form).
    pub vivify: Option<i64>,
    /// `R`: win the recache right when the remaining TTL is below this many seconds.
    pub recache: Option<i64>,
    /// `T`: new TTL (memcached exptime form).
    pub ttl: Option<i64>,
    /// `F`: client flags to store.
    pub client_flags: Option<u32>,
    /// `M`: mode switch (the raw mode byte; see [`MetaFlags::set_mode`]/[`MetaFlags::arith_mode`]).
    pub mode: Option<u8>,
    /// `J`: ma initial value on vivify.
    pub initial: Option<u64>,
    /// `D`: ma delta.
    pub delta: Option<u64>,
}

fn num<T: std::str::FromStr>(token: &[u8]) -> Option<T> {
    if token.is_empty() || !token.iter().all(|c| c.is_ascii_digit() || *c == b'-') {
        return None;
    }
    std::str::from_utf8(token).ok()?.parse().ok()
}

/// A 32-bit signed exptime token (memcached parses these with a 32-bit strtol).
fn exptime(token: &[u8]) -> Option<i64> {
    num::<i32>(token).map(i64::from)
}

impl MetaFlags {
    /// Parse the flag tokens that follow the key (and, for `ms`, the data length).
    /// Err is the complete error line to send (without CRLF).
    pub fn parse(tokens: &[Bytes]) -> Result<MetaFlags, &'static str> {
        let mut f = MetaFlags::default();
        let mut seen = [false; 128];
        for t in tokens {
            let code = t[0];
            if code >= 127 || seen[code as usize] {
                return Err("CLIENT_ERROR duplicate flag");
            }
            seen[code as usize] = true;
            let arg = &t[1..];
            const BAD_TOKEN: &str = "CLIENT_ERROR bad token in command line format";
            match code {
                b'b' => f.base64 = true,
                b'N' => f.vivify = Some(exptime(arg).ok_or(BAD_TOKEN)?),
                b'T' => f.ttl = Some(exptime(arg).ok_or(BAD_TOKEN)?),
                b'R' => f.recache = Some(exptime(arg).ok_or(BAD_TOKEN)?),
                b'O' => {
                    if arg.len() > MAX_OPAQUE_LEN {
                        return Err("CLIENT_ERROR opaque token too long");
                    }
                    f.opaque = Some(t.slice(1..));
                }
                b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'l' | b'h' => {}
                b'v' => f.value = true,
                b'u' => f.no_bump = true,
                b'q' => f.quiet = true,
                b'x' => f.remove_value = true,
                b'I' => f.invalidate = true,
                b'F' => {
                    f.client_flags =
                        Some(num::<u32>(arg).ok_or("CLIENT_ERROR bad command line format")?)
                }
                b'C' => f.compare_cas = Some(num::<u64>(arg).ok_or(BAD_TOKEN)?),
                b'E' => f.new_cas = Some(num::<u64>(arg).ok_or(BAD_TOKEN)?),
                b'M' => f.mode = Some(arg.first().copied().ok_or(BAD_TOKEN)?),
                b'J' => {
                    f.initial =
                        Some(num::<u64>(arg).ok_or("CLIENT_ERROR invalid numeric initial value")?)
                }
                b'D' => {
                    f.delta =
                        Some(num::<u64>(arg).ok_or("CLIENT_ERROR invalid numeric delta value")?)
                }
                _ => return Err("CLIENT_ERROR invalid flag"),
            }
            f.order.push(code);
        }
        Ok(f)
    }

    /// The `ms` mode (`M` absent = set). Err is the error line.
    pub fn set_mode(&self) -> Result<MetaMode, &'static str> {
        Ok(match self.mode {
            None | Some(b'S' | b's') => MetaMode::Set,
            Some(b'E' | b'e') => MetaMode::Add,
            Some(b'R' | b'r') => MetaMode::Replace,
            Some(b'A' | b'a') => MetaMode::Append,
            Some(b'P' | b'p') => MetaMode::Prepend,
            Some(_) => return Err("CLIENT_ERROR invalid mode for ms M token"),
        })
    }

    /// The `ma` mode (`M` absent = increment). Err is the error line.
    pub fn arith_mode(&self) -> Result<MetaMode, &'static str> {
        Ok(match self.mode {
            None | Some(b'I' | b'i' | b'+') => MetaMode::Incr,
            Some(b'D' | b'd' | b'-') => MetaMode::Decr,
            Some(_) => return Err("CLIENT_ERROR invalid mode for ma M token"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Bytes> {
        s.split(' ')
            .filter(|t| !t.is_empty())
            .map(|t| Bytes::copy_from_slice(t.as_bytes()))
            .collect()
    }

    #[test]
    fn parses_tokens_and_keeps_order() {
        let f = MetaFlags::parse(&toks("s v N30 t Oabc k c F7 C12 E99 Mr")).unwrap();
        assert_eq!(f.order, b"svNtOkcFCEM");
        assert_eq!(f.vivify, Some(30));
        assert_eq!(f.opaque.as_deref(), Some(&b"abc"[..]));
        assert_eq!(f.client_flags, Some(7));
        assert_eq!(f.compare_cas, Some(12));
        assert_eq!(f.new_cas, Some(99));
        assert_eq!(f.set_mode(), Ok(MetaMode::Replace));
        assert!(f.value);
    }

    #[test]
    fn rejects_like_memcached() {
        assert_eq!(
            MetaFlags::parse(&toks("v v")),
            Err("CLIENT_ERROR duplicate flag")
        );
        assert_eq!(
            MetaFlags::parse(&toks("Y")),
            Err("CLIENT_ERROR invalid flag")
        );
        assert_eq!(
            MetaFlags::parse(&toks("Tabc")),
            Err("CLIENT_ERROR bad token in command line format")
        );
        assert_eq!(
            MetaFlags::parse(&toks(&format!("O{}", "x".repeat(33)))),
            Err("CLIENT_ERROR opaque token too long")
        );
        assert!(MetaFlags::parse(&toks("Mz")).unwrap().set_mode().is_err());
    }
}
