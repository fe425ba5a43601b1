//! Geo commands on sorted sets: GEOADD, GEOHASH, GEOPOS and GEODIST. A position is kept as its member's
//! score, a 52-bit geohash (26 bits of longitude and 26 of latitude, interleaved, over Redis'
//! latitude range ±85.05112878°), so GEOADD is a ZADD of those scores and runs ZADD itself
//! through the write path (logged and notified as the ZADD it is, as Redis propagates it).
//! Distances are haversine great-circle distances on Redis' Earth radius.
//!
//! May import: the sorted-set module (its score parsing and reads), `crate::dispatch` (to run
//! the ZADD), the store's values.

use super::{cmd, flags, table, CommandSpec, Ctx, KEY1};
use crate::args::is;
use crate::error::{CmdError, CmdResult};
use bytes::Bytes;
use gradus_proto::Frame;
use gradus_store::Value;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("geoadd", -5, flags::WRITE | flags::DENYOOM | flags::SELF_LOGGED, KEY1, "geo", "Adds one or more members to a geospatial index. The key is created if it doesn't exist.", geoadd),
    cmd("geohash", -2, flags::READONLY, KEY1, "geo", "Returns members from a geospatial index as geohash strings.", geohash),
    cmd("geopos", -2, flags::READONLY, KEY1, "geo", "Returns the longitude and latitude of members from a geospatial index.", geopos),
    cmd("geodist", -4, flags::READONLY, KEY1, "geo", "Returns the distance between two members of a geospatial index.", geodist),
];

/// Bits per coordinate.
const STEP: u32 = 26;
const LAT_MIN: f64 = -85.05112878;
const LAT_MAX: f64 = 85.05112878;
const LONG_MIN: f64 = -180.0;
const LONG_MAX: f64 = 180.0;
const EARTH_RADIUS_IN_METERS: f64 = 6372797.560856;

/// Spread the low 32 bits of `v` to the even bit positions.
fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// The even bit positions of `v`, packed.
fn squash(v: u64) -> u32 {
    let mut x = v & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((x | (x >> 16)) & 0x0000_0000_FFFF_FFFF) as u32
}

/// The geohash of a position over the given ranges: latitude bits at even positions,
/// longitude bits at odd ones. None outside Redis' supported area.
fn encode(lon: f64, lat: f64, lon_range: (f64, f64), lat_range: (f64, f64)) -> Option<u64> {
    if !(LONG_MIN..=LONG_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return None;
    }
    let scale = (1u64 << STEP) as f64;
    let lat_offset = (lat - lat_range.0) / (lat_range.1 - lat_range.0) * scale;
    let lon_offset = (lon - lon_range.0) / (lon_range.1 - lon_range.0) * scale;
    Some(spread(lat_offset as u32) | (spread(lon_offset as u32) << 1))
}

/// A position's score in a geo set.
fn encode_wgs84(lon: f64, lat: f64) -> Option<u64> {
    encode(lon, lat, (LONG_MIN, LONG_MAX), (LAT_MIN, LAT_MAX))
}

/// The centre of the cell a geo score names, as (longitude, latitude).
fn decode(score: f64) -> (f64, f64) {
    let bits = score as u64;
    let (ilat, ilon) = (squash(bits), squash(bits >> 1));
    let cells = (1u64 << STEP) as f64;
    let (lat_scale, lon_scale) = (LAT_MAX - LAT_MIN, LONG_MAX - LONG_MIN);
    let lat_min = LAT_MIN + (f64::from(ilat) / cells) * lat_scale;
    let lat_max = LAT_MIN + ((f64::from(ilat) + 1.0) / cells) * lat_scale;
    let lon_min = LONG_MIN + (f64::from(ilon) / cells) * lon_scale;
    let lon_max = LONG_MIN + ((f64::from(ilon) + 1.0) / cells) * lon_scale;
    let lon = ((lon_min + lon_max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let lat = ((lat_min + lat_max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (lon, lat)
}

/// Haversine distance in meters (Redis' `geohashGetDistance`).
fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let v = ((lon2.to_radians() - lon1.to_radians()) / 2.0).sin();
    if v == 0.0 {
        return EARTH_RADIUS_IN_METERS * (lat2.to_radians() - lat1.to_radians()).abs();
    }
    let (lat1r, lat2r) = (lat1.to_radians(), lat2.to_radians());
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_IN_METERS * a.sqrt().asin()
}

/// Meters per unit of a unit argument.
fn unit_arg(arg: &[u8]) -> Result<f64, CmdError> {
    Ok(if is(arg, "m") {
        1.0
    } else if is(arg, "km") {
        1000.0
    } else if is(arg, "ft") {
        0.3048
    } else if is(arg, "mi") {
        1609.34
    } else {
        return Err(CmdError::err(
            "unsupported unit provided. please use M, KM, FT, MI",
        ));
    })
}

/// GEOADD key [NX|XX] [CH] longitude latitude member …: run as the ZADD of the positions'
/// scores.
fn geoadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mut first = 2;
    let (mut nx, mut xx) = (false, false);
    while first < args.len() {
        let arg = &args[first];
        if is(arg, "nx") {
            nx = true;
        } else if is(arg, "xx") {
            xx = true;
        } else if !is(arg, "ch") {
            break;
        }
        first += 1;
    }
    if !(args.len() - first).is_multiple_of(3) || (nx && xx) {
        return Err(CmdError::Syntax);
    }
    let mut zadd: Vec<Bytes> = vec![Bytes::from_static(b"zadd")];
    zadd.extend_from_slice(&args[1..first]);
    for triple in args[first..].chunks(3) {
        let lon = super::zsets::score_arg(&triple[0])?;
        let lat = super::zsets::score_arg(&triple[1])?;
        let score = encode_wgs84(lon, lat).ok_or_else(|| {
            CmdError::err(format!("invalid longitude,latitude pair {lon:.6},{lat:.6}"))
        })?;
        zadd.push(Bytes::from(score.to_string()));
        zadd.push(triple[2].clone());
    }
    let spec = table()
        .get(&zadd[0])
        .ok_or_else(|| CmdError::err("zadd is not available"))?;
    match crate::dispatch::run_write(ctx.shared, ctx.client, spec, zadd, ctx.now_ms) {
        Frame::Error(e) => Err(CmdError::Other(e)),
        reply => Ok(reply),
    }
}

/// The scores of `members` in the geo set at `key` (None for a missing member or key).
fn scores_of(ctx: &Ctx<'_>, key: &[u8], members: &[Bytes]) -> Result<Vec<Option<f64>>, CmdError> {
    let mut shard = ctx.db().lock(key);
    let zset = super::lookup_typed(ctx, &mut shard, key, Value::as_zset)?;
    Ok(members
        .iter()
        .map(|m| zset.and_then(|z| z.score(m)))
        .collect())
}

/// GEOHASH key member …: standard 11-character geohashes (re-encoded over latitude ±90°).
fn geohash(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let scores = scores_of(ctx, &args[1], &args[2..])?;
    Ok(Frame::Array(
        scores
            .into_iter()
            .map(|score| match score {
                None => Frame::Null,
                Some(score) => {
                    let (lon, lat) = decode(score);
                    let bits = encode(lon, lat, (LONG_MIN, LONG_MAX), (-90.0, 90.0)).unwrap_or(0);
                    let text: Vec<u8> = (0..11)
                        .map(|i| {
                            let idx = if i == 10 {
                                0
                            } else {
                                (bits >> (52 - (i + 1) * 5)) & 0x1f
                            };
                            ALPHABET[idx as usize]
                        })
                        .collect();
                    Frame::Bulk(Bytes::from(text))
                }
            })
            .collect(),
    ))
}

/// GEOPOS key member …: each member's cell centre as [longitude, latitude], written as Redis 7.2
/// writes long doubles; a null array for a missing member.
fn geopos(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let scores = scores_of(ctx, &args[1], &args[2..])?;
    Ok(Frame::Array(
        scores
            .into_iter()
            .map(|score| match score {
                None => Frame::NullArray,
                Some(score) => {
                    let (lon, lat) = decode(score);
                    Frame::Array(vec![Frame::HumanDouble(lon), Frame::HumanDouble(lat)])
                }
            })
            .collect(),
    ))
}

/// GEODIST key member1 member2 [M|KM|FT|MI]: four decimals, as a bulk string in both protocols.
fn geodist(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let to_meter = match args.len() {
        4 => 1.0,
        5 => unit_arg(&args[4])?,
        _ => return Err(CmdError::Syntax),
    };
    let scores = scores_of(ctx, &args[1], &args[2..4])?;
    let (Some(a), Some(b)) = (scores[0], scores[1]) else {
        return Ok(Frame::Null);
    };
    let ((lon1, lat1), (lon2, lat2)) = (decode(a), decode(b));
    let meters = distance(lon1, lat1, lon2, lat2) / to_meter;
    Ok(Frame::Bulk(Bytes::from(format!("{meters:.4}"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_match_redis_for_known_places() {
        // GEOADD Sicily 13.361389 38.115556 Palermo; ZSCORE Sicily Palermo on redis-server.
        assert_eq!(encode_wgs84(13.361389, 38.115556), Some(3479099956230698));
        assert_eq!(encode_wgs84(15.087269, 37.502669), Some(3479447370796909));
        assert_eq!(encode_wgs84(181.0, 0.0), None);
        assert_eq!(encode_wgs84(0.0, 85.1), None);
    }

    #[test]
    fn spread_and_squash_are_inverse() {
        for v in [0u32, 1, 0x3ff_ffff, 0x155_5555, 12345] {
            assert_eq!(squash(spread(v)), v);
        }
    }
}
