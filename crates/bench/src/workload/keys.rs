//! Key choice and content generation shared by the workloads: uniform and Zipfian key
//! distributions (the Zipfian generator of Gray et al., "Quickly generating billion-record
//! synthetic databases", as YCSB uses it, with the ranks scrambled by an FNV hash so popular keys
//! are spread over the key space), think-time distributions, and deterministic values whose
//! content can be checked when read back. Pure computation over a caller-supplied RNG.

use rand::Rng;
use serde::Serialize;

/// How keys are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum KeyDist {
    /// Every key equally likely.
    Uniform,
    /// Zipfian (theta 0.99), ranks scrambled over the key space.
    Zipfian,
}

/// Draws key indexes in `0..n`.
#[derive(Debug, Clone)]
pub struct KeyChooser {
    n: u64,
    zipf: Option<Zipf>,
}

#[derive(Debug, Clone)]
struct Zipf {
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl KeyChooser {
    /// A chooser over `n` keys (at least one).
    pub fn new(n: u64, dist: KeyDist) -> KeyChooser {
        let n = n.max(1);
        let zipf = (dist == KeyDist::Zipfian).then(|| {
            let theta = 0.99;
            let zetan = zeta(n, theta);
            let zeta2 = zeta(2, theta);
            Zipf {
                theta,
                alpha: 1.0 / (1.0 - theta),
                zetan,
                eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
            }
        });
        KeyChooser { n, zipf }
    }

    /// One key index.
    pub fn next(&self, rng: &mut impl Rng) -> u64 {
        match &self.zipf {
            None => rng.gen_range(0..self.n),
            Some(z) => {
                let u: f64 = rng.gen();
                let uz = u * z.zetan;
                let rank = if uz < 1.0 {
                    0
                } else if uz < 1.0 + 0.5f64.powf(z.theta) {
                    1
                } else {
                    ((self.n as f64) * (z.eta * u - z.eta + 1.0).powf(z.alpha)) as u64
                };
                fnv64(rank.min(self.n - 1)) % self.n
            }
        }
    }
}

fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

/// FNV-1a over the 8 bytes of `v`.
fn fnv64(v: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in v.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Think-time distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ThinkDist {
    /// Exactly the mean.
    Constant,
    /// Uniform between half and one and a half times the mean.
    Uniform,
    /// Exponential with the given mean (capped at ten times the mean).
    Exponential,
}

/// Draws one think time in milliseconds.
pub fn think_ms(mean_ms: f64, dist: ThinkDist, rng: &mut impl Rng) -> f64 {
    if mean_ms <= 0.0 {
        return 0.0;
    }
    match dist {
        ThinkDist::Constant => mean_ms,
        ThinkDist::Uniform => rng.gen_range(0.5 * mean_ms..1.5 * mean_ms),
        ThinkDist::Exponential => {
            let u: f64 = rng.gen_range(f64::EPSILON..1.0);
            (-u.ln() * mean_ms).min(10.0 * mean_ms)
        }
    }
}

/// Fragments of PHP-serialized arrays, the filler of [`tagged_value`].
const FILLER_WORDS: [&str; 12] = [
    "a:4:{",
    "s:2:\"id\";i:",
    "s:4:\"name\";s:12:\"",
    "s:7:\"visible\";b:1;",
    "s:8:\"courseid\";i:",
    "s:11:\"timemodified\";i:",
    "s:6:\"format\";s:6:\"topics\";",
    "s:5:\"value\";N;",
    "}",
    "s:4:\"sort\";d:0.",
    "s:9:\"component\";s:4:\"core\";",
    "\";",
];

/// A value of exactly `size` bytes that starts with `tag|` and continues with a filler derived
/// from `tag`, so a reader can tell whether what came back belongs to the key it asked for. The
/// filler reads like a PHP-serialized array (field names repeat, numbers vary), so client-side
/// compression finds about as much to remove as in real cache values rather than a repeating
/// pattern it would shrink to nothing.
pub fn tagged_value(tag: &str, size: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(size.max(tag.len() + 1) + 48);
    v.extend_from_slice(tag.as_bytes());
    v.push(b'|');
    let mut seed = fnv64(
        tag.len() as u64
            ^ tag
                .bytes()
                .fold(0u64, |a, b| a.rotate_left(5) ^ u64::from(b)),
    ) | 1;
    while v.len() < size {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v.extend_from_slice(FILLER_WORDS[(seed % FILLER_WORDS.len() as u64) as usize].as_bytes());
        v.extend_from_slice(
            itoa::Buffer::new()
                .format((seed >> 20) % 100_000)
                .as_bytes(),
        );
        v.push(b';');
    }
    v.truncate(size.max(tag.len() + 1));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn zipfian_is_skewed_and_in_range() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let chooser = KeyChooser::new(1000, KeyDist::Zipfian);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[chooser.next(&mut rng) as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top10: u32 = counts[..10].iter().sum();
        // Uniform would give ~1% to the ten most drawn keys; theta 0.99 gives far more.
        assert!(top10 > 20_000, "top ten keys drew {top10} of 100000");
        let uniform = KeyChooser::new(1000, KeyDist::Uniform);
        assert!((0..1000).all(|_| uniform.next(&mut rng) < 1000));
    }

    #[test]
    fn think_times_follow_their_bounds() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        assert_eq!(think_ms(100.0, ThinkDist::Constant, &mut rng), 100.0);
        for _ in 0..1000 {
            let u = think_ms(100.0, ThinkDist::Uniform, &mut rng);
            assert!((50.0..150.0).contains(&u));
            let e = think_ms(100.0, ThinkDist::Exponential, &mut rng);
            assert!((0.0..=1000.0).contains(&e));
        }
        assert_eq!(think_ms(0.0, ThinkDist::Exponential, &mut rng), 0.0);
    }

    #[test]
    fn tagged_values_have_the_size_and_tag() {
        let v = tagged_value("core_string:k12", 512);
        assert_eq!(v.len(), 512);
        assert!(v.starts_with(b"core_string:k12|"));
        assert_ne!(tagged_value("a", 64), tagged_value("b", 64));
        assert_eq!(tagged_value("a", 64), tagged_value("a", 64));
    }
}
