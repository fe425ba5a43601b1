//! Who a connection is: the configured [`User`]s and the check of their passwords (the live
//! `requirepass` for the Redis-style default user, PBKDF2-HMAC-SHA256 hashes printed by
//! `gradus passwd` for the others, never a password in clear), and the [`AuthThrottle`] that
//! slows down repeated failed AUTH attempts from one address.
//!
//! May import: `tenancy::acl` (a user's rights), `error`. Must not import `config` (the model in
//! `tenancy` turns the configuration into users), `state` or anything that runs commands.

use super::acl::Perms;
use crate::error::ServerError;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How a user proves who it is.
pub(super) enum Secret {
    /// The Redis-style default user: the live `requirepass` (empty = no password).
    RequirePass,
    /// `pbkdf2-sha256$rounds$salt-hex$hash-hex`.
    Pbkdf2 {
        rounds: u32,
        salt: Vec<u8>,
        hash: [u8; 32],
    },
}

/// A configured user.
pub struct User {
    pub name: String,
    pub tenant: usize,
    pub perms: Perms,
    secret: Secret,
    /// SHA-256(salt ‖ password) of the last password that passed the slow check, so a client
    /// that connects for every page does not pay the key derivation every time.
    verified: Mutex<Option<[u8; 32]>>,
}

impl User {
    pub(super) fn new(name: String, tenant: usize, perms: Perms, secret: Secret) -> User {
        User {
            name,
            tenant,
            perms,
            secret,
            verified: Mutex::new(None),
        }
    }

    /// Check `pass` (constant time in the compared bytes). `requirepass` is the live setting.
    pub fn verify(&self, pass: &[u8], requirepass: &str) -> bool {
        match &self.secret {
            Secret::RequirePass => {
                requirepass.is_empty() || same_secret(requirepass.as_bytes(), pass)
            }
            Secret::Pbkdf2 { rounds, salt, hash } => {
                let quick: [u8; 32] = Sha256::new()
                    .chain_update(salt)
                    .chain_update(pass)
                    .finalize()
                    .into();
                if self
                    .verified
                    .lock()
                    .is_some_and(|v| same_secret(&v, &quick))
                {
                    return true;
                }
                let derived = derive(pass, salt, *rounds);
                let ok = same_secret(&derived, hash);
                if ok {
                    *self.verified.lock() = Some(quick);
                }
                ok
            }
        }
    }
}

/// Compare without an early exit on the first differing byte.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn derive(pass: &[u8], salt: &[u8], rounds: u32) -> [u8; 32] {
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(pass, salt, rounds, &mut out);
    out
}

/// Rounds of PBKDF2-HMAC-SHA256 for new hashes (`gradus passwd`).
pub const PASSWD_ROUNDS: u32 = 20_000;

/// The stored form of `password` with a fresh random salt (what `gradus passwd` prints).
pub fn hash_password(password: &str) -> String {
    let salt: [u8; 16] = rand::random();
    let hash = derive(password.as_bytes(), &salt, PASSWD_ROUNDS);
    format!(
        "pbkdf2-sha256${PASSWD_ROUNDS}${}${}",
        hex(&salt),
        hex(&hash)
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

pub(super) fn parse_secret(user: &str, stored: &str) -> Result<Secret, ServerError> {
    let bad = || {
        ServerError::Config(format!(
            "user {user:?}: password must be a hash printed by `gradus passwd` \
             (pbkdf2-sha256$rounds$salt$hash); passwords are never stored in clear"
        ))
    };
    let parts: Vec<&str> = stored.split('$').collect();
    let [scheme, rounds, salt, hash] = parts[..] else {
        return Err(bad());
    };
    if scheme != "pbkdf2-sha256" {
        return Err(bad());
    }
    let rounds: u32 = rounds
        .parse()
        .ok()
        .filter(|r| (1..=10_000_000).contains(r))
        .ok_or_else(bad)?;
    let salt = unhex(salt).filter(|s| !s.is_empty()).ok_or_else(bad)?;
    let hash: [u8; 32] = unhex(hash)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(bad)?;
    Ok(Secret::Pbkdf2 { rounds, salt, hash })
}

/// Failed AUTH attempts per source address, and the delay they earn: every attempt from an
/// address with `n` recent failures waits 10 ms × 2^(n-1), at most 2 s; failures older than a
/// minute are forgotten, and a success clears the address.
#[derive(Default)]
pub struct AuthThrottle {
    failures: Mutex<HashMap<IpAddr, (u32, Instant)>>,
    pub total_failures: AtomicU64,
}

const FORGET_AFTER: Duration = Duration::from_secs(60);
const MAX_DELAY: Duration = Duration::from_secs(2);

impl AuthThrottle {
    /// How long an attempt from `ip` must wait before its answer.
    pub fn delay(&self, ip: IpAddr) -> Duration {
        let map = self.failures.lock();
        match map.get(&ip) {
            Some(&(n, at)) if n > 0 && at.elapsed() < FORGET_AFTER => {
                let ms = 10u64.saturating_mul(1 << (n - 1).min(16));
                Duration::from_millis(ms).min(MAX_DELAY)
            }
            _ => Duration::ZERO,
        }
    }

    pub fn failed(&self, ip: IpAddr) {
        self.total_failures.fetch_add(1, Ordering::Relaxed);
        let mut map = self.failures.lock();
        if map.len() > 100_000 {
            map.retain(|_, (_, at)| at.elapsed() < FORGET_AFTER);
        }
        let e = map.entry(ip).or_insert((0, Instant::now()));
        if e.1.elapsed() >= FORGET_AFTER {
            e.0 = 0;
        }
        e.0 = e.0.saturating_add(1);
        e.1 = Instant::now();
    }

    pub fn succeeded(&self, ip: IpAddr) {
        self.failures.lock().remove(&ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_hash_round_trip() {
        let stored = hash_password("alpha-pass");
        let secret = parse_secret("u", &stored).unwrap();
        let user = User {
            name: "u".into(),
            tenant: 0,
            perms: Perms::READ,
            secret,
            verified: Mutex::new(None),
        };
        assert!(user.verify(b"alpha-pass", ""));
        assert!(user.verify(b"alpha-pass", ""), "cached path");
        assert!(!user.verify(b"alpha-pas", ""));
        assert!(!user.verify(b"", ""));
        assert!(parse_secret("u", "alpha-pass").is_err());
    }

    #[test]
    fn throttle_grows_and_clears() {
        let t = AuthThrottle::default();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(t.delay(ip), Duration::ZERO);
        t.failed(ip);
        assert_eq!(t.delay(ip), Duration::from_millis(10));
        t.failed(ip);
        t.failed(ip);
        assert_eq!(t.delay(ip), Duration::from_millis(40));
        for _ in 0..30 {
            t.failed(ip);
        }
        assert_eq!(t.delay(ip), MAX_DELAY);
        t.succeeded(ip);
        assert_eq!(t.delay(ip), Duration::ZERO);
    }
}
