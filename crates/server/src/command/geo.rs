//! Geo commands on sorted sets: GEOADD, GEOHASH, GEOPOS, GEODIST and the searches (GEOSEARCH,
//! GEOSEARCHSTORE, GEORADIUS, GEORADIUSBYMEMBER and their `_RO` forms). A position is kept as its member's
//! score, a 52-bit geohash (26 bits of longitude and 26 of latitude, interleaved, over Redis'
//! latitude range ±85.05112878°), so GEOADD is a ZADD of those scores and runs ZADD itself
//! through the write path (logged and notified as the ZADD it is, as Redis propagates it).
//! Distances are haversine great-circle distances on Redis' Earth radius.
//!
//! A search is Redis' `georadiusGeneric`, step for step, so its replies are Redis' to the member
//! and the order: the area is covered by a geohash cell at a precision estimated from the radius
//! and its eight neighbours (`Shape::areas`), each cell is a score range read in score order,
//! and each member in it is kept when it lies within the circle or box; sorted as Redis sorts
//! (a stable sort, or its partial quicksort under COUNT). The searches that store
//! (GEOSEARCHSTORE; GEORADIUS … STORE) read the source and write the destination under both
//! keys' locks; GEORADIUS is flagged `write` as in Redis but logs itself only when it stores.
//!
//! May import: the sorted-set module (its score parsing, reads and limits), `crate::dispatch`
//! (to run the ZADD), the store's values and key locks.

use super::{cmd, flags, table, CommandSpec, Ctx, KEY1};
use crate::args::{int_arg, is};
use crate::error::{CmdError, CmdResult};
use bytes::Bytes;
use gradus_proto::Frame;
use gradus_store::{ScoreBound, Value, ZSetValue};
use std::cmp::Ordering;

/// GEORADIUS and GEORADIUSBYMEMBER: a write only with STORE/STOREDIST, which they log themselves.
const RADIUS_WRITE: u32 = flags::WRITE | flags::DENYOOM | flags::SELF_LOGGED;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("geoadd", -5, flags::WRITE | flags::DENYOOM | flags::SELF_LOGGED, KEY1, "geo", "Adds one or more members to a geospatial index. The key is created if it doesn't exist.", geoadd).key_flags(&["RW update"]),
    cmd("geohash", -2, flags::READONLY, KEY1, "geo", "Returns members from a geospatial index as geohash strings.", geohash),
    cmd("geopos", -2, flags::READONLY, KEY1, "geo", "Returns the longitude and latitude of members from a geospatial index.", geopos),
    cmd("geodist", -4, flags::READONLY, KEY1, "geo", "Returns the distance between two members of a geospatial index.", geodist),
    cmd("geosearch", -7, flags::READONLY, KEY1, "geo", "Queries a geospatial index for members inside an area of a box or a circle.", geosearch),
    cmd("geosearchstore", -8, flags::WRITE | flags::DENYOOM, (1, 2, 1), "geo", "Queries a geospatial index for members inside an area of a box or a circle, optionally stores the result.", geosearchstore).reads(2, 2).key_flags(&["OW update", "RO access"]),
    cmd("georadius", -6, RADIUS_WRITE, KEY1, "geo", "Queries a geospatial index for members within a distance from a coordinate, optionally stores the result.", georadius).with_store_keyword(6).reads(1, 1).key_flags(&["RO access", "OW update"]),
    cmd("georadius_ro", -6, flags::READONLY, KEY1, "geo", "Returns members from a geospatial index that are within a distance from a coordinate.", georadius_ro),
    cmd("georadiusbymember", -5, RADIUS_WRITE, KEY1, "geo", "Queries a geospatial index for members within a distance from a member, optionally stores the result.", georadiusbymember).with_store_keyword(5).reads(1, 1).key_flags(&["RO access", "OW update"]),
    cmd("georadiusbymember_ro", -5, flags::READONLY, KEY1, "geo", "Returns members from a geospatial index that are within a distance from a member.", georadiusbymember_ro),
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
    encode_step(lon, lat, lon_range, lat_range, STEP)
}

/// [`encode`] at `step` bits per coordinate (Redis' `geohashEncode`).
fn encode_step(
    lon: f64,
    lat: f64,
    lon_range: (f64, f64),
    lat_range: (f64, f64),
    step: u32,
) -> Option<u64> {
    if !(LONG_MIN..=LONG_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return None;
    }
    let scale = (1u64 << step) as f64;
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
    Ok(distance_reply(meters))
}

/// A distance as Redis 7.2 writes it (`addReplyDoubleDistance`): a bulk string with four
/// decimals, rounded as `llrint(d * 10000)` rounds (to even), in both protocols.
fn distance_reply(d: f64) -> Frame {
    Frame::Bulk(Bytes::from(distance_text(d)))
}

fn distance_text(d: f64) -> String {
    let scaled = (d * 10000.0).round_ties_even();
    if !scaled.is_finite() || scaled.abs() >= 9.2e18 {
        // Past what `llrint` can return Redis writes nothing useful either; keep the value.
        return format!("{d:.4}");
    }
    let scaled = scaled as i64;
    let sign = if scaled < 0 { "-" } else { "" };
    let v = scaled.unsigned_abs();
    format!("{sign}{}.{:04}", v / 10000, v % 10000)
}

// --- searches ------------------------------------------------------------------------------

const MERCATOR_MAX: f64 = 20037726.37;

/// Redis' `deg_rad` and `rad_deg` (`to_degrees` multiplies by 180/π, which may round otherwise).
fn deg_rad(angle: f64) -> f64 {
    angle * (std::f64::consts::PI / 180.0)
}

fn rad_deg(angle: f64) -> f64 {
    angle / (std::f64::consts::PI / 180.0)
}

/// Redis' `geohashGetLatDistance`.
fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_IN_METERS * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// A geohash cell: `bits` over `step` bits per coordinate. Bits and step both zero is "no cell"
/// (a neighbour a search left out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cell {
    bits: u64,
    step: u32,
}

impl Cell {
    const NONE: Cell = Cell { bits: 0, step: 0 };

    fn is_none(self) -> bool {
        self.bits == 0 && self.step == 0
    }

    /// The cell's corners: (lon_min, lon_max, lat_min, lat_max) (Redis' `geohashDecode`).
    fn area(self) -> (f64, f64, f64, f64) {
        let (ilat, ilon) = (squash(self.bits), squash(self.bits >> 1));
        let cells = (1u64 << self.step) as f64;
        let (lat_scale, lon_scale) = (LAT_MAX - LAT_MIN, LONG_MAX - LONG_MIN);
        (
            LONG_MIN + (f64::from(ilon) * 1.0 / cells) * lon_scale,
            LONG_MIN + ((f64::from(ilon) + 1.0) * 1.0 / cells) * lon_scale,
            LAT_MIN + (f64::from(ilat) * 1.0 / cells) * lat_scale,
            LAT_MIN + ((f64::from(ilat) + 1.0) * 1.0 / cells) * lat_scale,
        )
    }

    /// The score range [min, max) of the members in this cell (Redis' `scoresOfGeoHashBox`).
    fn score_range(self) -> (u64, u64) {
        let shift = 52 - self.step * 2;
        (self.bits << shift, (self.bits + 1) << shift)
    }

    /// The cell `d` cells east (positive) or west, wrapping around (Redis' `geohash_move_x`).
    fn moved_x(self, d: i8) -> Cell {
        if d == 0 {
            return self;
        }
        let mut x = self.bits & 0xaaaa_aaaa_aaaa_aaaa;
        let y = self.bits & 0x5555_5555_5555_5555;
        let zz = 0x5555_5555_5555_5555u64 >> (64 - self.step * 2);
        if d > 0 {
            x = x.wrapping_add(zz + 1);
        } else {
            x |= zz;
            x = x.wrapping_sub(zz + 1);
        }
        x &= 0xaaaa_aaaa_aaaa_aaaau64 >> (64 - self.step * 2);
        Cell {
            bits: x | y,
            step: self.step,
        }
    }

    /// The cell north (positive) or south, wrapping around (Redis' `geohash_move_y`).
    fn moved_y(self, d: i8) -> Cell {
        if d == 0 {
            return self;
        }
        let x = self.bits & 0xaaaa_aaaa_aaaa_aaaa;
        let mut y = self.bits & 0x5555_5555_5555_5555;
        let zz = 0xaaaa_aaaa_aaaa_aaaau64 >> (64 - self.step * 2);
        if d > 0 {
            y = y.wrapping_add(zz + 1);
        } else {
            y |= zz;
            y = y.wrapping_sub(zz + 1);
        }
        y &= 0x5555_5555_5555_5555u64 >> (64 - self.step * 2);
        Cell {
            bits: x | y,
            step: self.step,
        }
    }

    fn moved(self, dx: i8, dy: i8) -> Cell {
        self.moved_x(dx).moved_y(dy)
    }
}

/// What a search covers: a circle or an axis-aligned box around a centre, in the unit whose
/// meters per unit are `conversion`.
#[derive(Debug, Clone, Copy, Default)]
struct Shape {
    lon: f64,
    lat: f64,
    conversion: f64,
    kind: ShapeKind,
}

#[derive(Debug, Clone, Copy)]
enum ShapeKind {
    Radius(f64),
    Box { width: f64, height: f64 },
}

impl Default for ShapeKind {
    fn default() -> Self {
        ShapeKind::Radius(0.0)
    }
}

impl Shape {
    /// Whether the point lies in the shape, and its distance in meters from the centre
    /// (Redis' `geoWithinShape`).
    fn distance_within(&self, lon: f64, lat: f64) -> Option<f64> {
        match self.kind {
            ShapeKind::Radius(radius) => {
                let d = distance(self.lon, self.lat, lon, lat);
                (d <= radius * self.conversion).then_some(d)
            }
            ShapeKind::Box { width, height } => {
                let (width_m, height_m) = (width * self.conversion, height * self.conversion);
                if lat_distance(lat, self.lat) > height_m / 2.0 {
                    return None;
                }
                if distance(lon, lat, self.lon, lat) > width_m / 2.0 {
                    return None;
                }
                Some(distance(self.lon, self.lat, lon, lat))
            }
        }
    }

    /// [min lon, min lat, max lon, max lat] (Redis' `geohashBoundingBox`).
    fn bounding_box(&self) -> [f64; 4] {
        let (height, width) = match self.kind {
            ShapeKind::Radius(r) => (self.conversion * r, self.conversion * r),
            ShapeKind::Box { width, height } => (
                self.conversion * (height / 2.0),
                self.conversion * (width / 2.0),
            ),
        };
        let lat_delta = rad_deg(height / EARTH_RADIUS_IN_METERS);
        let long_delta_top =
            rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(self.lat + lat_delta).cos());
        let long_delta_bottom =
            rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(self.lat - lat_delta).cos());
        let delta = if self.lat < 0.0 {
            long_delta_bottom
        } else {
            long_delta_top
        };
        [
            self.lon - delta,
            self.lat - lat_delta,
            self.lon + delta,
            self.lat + lat_delta,
        ]
    }

    /// The centre cell and its eight neighbours that cover the shape, in Redis' order (centre,
    /// N, S, E, W, NE, NW, SE, SW), unneeded ones [`Cell::NONE`] (Redis'
    /// `geohashCalculateAreasByShapeWGS84`).
    fn areas(&self) -> [Cell; 9] {
        let [min_lon, min_lat, max_lon, max_lat] = self.bounding_box();
        let radius_meters = match self.kind {
            ShapeKind::Radius(r) => r,
            ShapeKind::Box { width, height } => {
                ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
            }
        } * self.conversion;
        let mut steps = estimate_steps(radius_meters, self.lat);
        let centre = |steps: u32| Cell {
            bits: encode_step(
                self.lon,
                self.lat,
                (LONG_MIN, LONG_MAX),
                (LAT_MIN, LAT_MAX),
                steps,
            )
            .unwrap_or(0),
            step: steps,
        };
        let mut cell = centre(steps);
        let decrease_step = {
            let (_, _, _, north_lat_max) = cell.moved(0, 1).area();
            let (_, _, south_lat_min, _) = cell.moved(0, -1).area();
            let (_, east_lon_max, _, _) = cell.moved(1, 0).area();
            let (west_lon_min, _, _, _) = cell.moved(-1, 0).area();
            north_lat_max < max_lat
                || south_lat_min > min_lat
                || east_lon_max < max_lon
                || west_lon_min > min_lon
        };
        if steps > 1 && decrease_step {
            steps -= 1;
            cell = centre(steps);
        }
        let mut cells = [
            cell,
            cell.moved(0, 1),
            cell.moved(0, -1),
            cell.moved(1, 0),
            cell.moved(-1, 0),
            cell.moved(1, 1),
            cell.moved(-1, 1),
            cell.moved(1, -1),
            cell.moved(-1, -1),
        ];
        const N: usize = 1;
        const S: usize = 2;
        const E: usize = 3;
        const W: usize = 4;
        const NE: usize = 5;
        const NW: usize = 6;
        const SE: usize = 7;
        const SW: usize = 8;
        if steps >= 2 {
            let (lon_lo, lon_hi, lat_lo, lat_hi) = cell.area();
            let mut drop = |which: [usize; 3]| which.iter().for_each(|&i| cells[i] = Cell::NONE);
            if lat_lo < min_lat {
                drop([S, SW, SE]);
            }
            if lat_hi > max_lat {
                drop([N, NE, NW]);
            }
            if lon_lo < min_lon {
                drop([W, SW, NW]);
            }
            if lon_hi > max_lon {
                drop([E, SE, NE]);
            }
        }
        cells
    }
}

/// The precision of the nine cells of a search (Redis' `geohashEstimateStepsByRadius`).
fn estimate_steps(range_meters: f64, lat: f64) -> u32 {
    if range_meters == 0.0 {
        return 26;
    }
    let mut range = range_meters;
    let mut step: i32 = 1;
    while range < MERCATOR_MAX {
        range *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u32
}

/// A member a search found.
struct Found {
    member: Bytes,
    lon: f64,
    lat: f64,
    /// Meters from the centre until the reply converts it.
    dist: f64,
    score: f64,
}

/// The members of `zset` in the cells (Redis' `membersOfAllNeighbors`), in cell order and score
/// order within a cell; with `limit` (COUNT … ANY), stopping once that many are found.
fn members_in(zset: &ZSetValue, shape: &Shape, limit: usize) -> Vec<Found> {
    let cells = shape.areas();
    let mut found = Vec::new();
    let mut last_processed = 0;
    let full = |found: &Vec<Found>| !found.is_empty() && limit > 0 && found.len() >= limit;
    for (i, cell) in cells.iter().enumerate() {
        if cell.is_none() {
            continue;
        }
        // A huge radius may make neighbours the same cell: skip one equal to the last searched.
        if last_processed != 0 && *cell == cells[last_processed] {
            continue;
        }
        if full(&found) {
            break;
        }
        let (min, max) = cell.score_range();
        let min = ScoreBound {
            value: min as f64,
            exclusive: false,
        };
        let max = ScoreBound {
            value: max as f64,
            exclusive: true,
        };
        for (member, score) in zset.range_by_score(min, max) {
            let (lon, lat) = decode(score);
            if let Some(dist) = shape.distance_within(lon, lat) {
                found.push(Found {
                    member: member.to_bytes(),
                    lon,
                    lat,
                    dist,
                    score,
                });
            }
            if full(&found) {
                break;
            }
        }
        last_processed = i;
    }
    found
}

/// Which search command runs (Redis' `georadiusGeneric` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// GEORADIUS (`store`: STORE/STOREDIST allowed) and GEORADIUS_RO.
    Coords { store: bool },
    /// GEORADIUSBYMEMBER and GEORADIUSBYMEMBER_RO.
    Member { store: bool },
    /// GEOSEARCH.
    Search,
    /// GEOSEARCHSTORE.
    SearchStore,
}

impl Form {
    fn is_geosearch(self) -> bool {
        matches!(self, Form::Search | Form::SearchStore)
    }

    fn src_index(self) -> usize {
        if self == Form::SearchStore {
            2
        } else {
            1
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sort {
    None,
    Asc,
    Desc,
}

/// A search's options, parsed in Redis' order.
struct Query {
    shape: Shape,
    with_dist: bool,
    with_hash: bool,
    with_coord: bool,
    sort: Sort,
    any: bool,
    /// 0: no COUNT.
    count: usize,
    /// The destination (STORE, STOREDIST, GEOSEARCHSTORE's first key) and whether it stores
    /// distances rather than positions.
    store: Option<(Bytes, bool)>,
}

/// The centre of a search at a member (Redis' `longLatFromMember`).
fn member_position(zset: &ZSetValue, member: &[u8]) -> Result<(f64, f64), CmdError> {
    zset.score(member)
        .map(decode)
        .ok_or_else(|| CmdError::err("could not decode requested zset member"))
}

/// A longitude and latitude argument pair (Redis' `extractLongLatOrReply`).
fn lon_lat_args(lon: &[u8], lat: &[u8]) -> Result<(f64, f64), CmdError> {
    let lon = super::zsets::score_arg(lon)?;
    let lat = super::zsets::score_arg(lat)?;
    if !(LONG_MIN..=LONG_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return Err(CmdError::err(format!(
            "invalid longitude,latitude pair {lon:.6},{lat:.6}"
        )));
    }
    Ok((lon, lat))
}

/// A length argument with its error text, non-negative.
fn length_arg(arg: &[u8], what: &str) -> Result<f64, CmdError> {
    super::zsets::score_arg(arg).map_err(|_| CmdError::err(format!("need numeric {what}")))
}

/// `radius unit` (Redis' `extractDistanceOrReply`): the radius and the unit's meters.
fn radius_args(radius: &[u8], unit: &[u8]) -> Result<(f64, f64), CmdError> {
    let radius = length_arg(radius, "radius")?;
    if radius < 0.0 {
        return Err(CmdError::err("radius cannot be negative"));
    }
    Ok((radius, unit_arg(unit)?))
}

/// `width height unit` (Redis' `extractBoxOrReply`).
fn box_args(width: &[u8], height: &[u8], unit: &[u8]) -> Result<(f64, f64, f64), CmdError> {
    let width = length_arg(width, "width")?;
    let height = length_arg(height, "height")?;
    if height < 0.0 || width < 0.0 {
        return Err(CmdError::err("height or width cannot be negative"));
    }
    Ok((width, height, unit_arg(unit)?))
}

/// Parse a search's arguments as Redis' `georadiusGeneric` does, error for error in its order.
/// `zset` is the source (None: absent, when a member's position is not looked up).
fn parse_query(args: &[Bytes], search: Form, zset: Option<&ZSetValue>) -> Result<Query, CmdError> {
    let mut shape = Shape::default();
    let mut store: Option<(Bytes, bool)> = None;
    let base = match search {
        Form::Coords { .. } => {
            (shape.lon, shape.lat) = lon_lat_args(&args[2], &args[3])?;
            let (radius, conversion) = radius_args(&args[4], &args[5])?;
            shape.kind = ShapeKind::Radius(radius);
            shape.conversion = conversion;
            6
        }
        Form::Member { .. } => {
            // With no source Redis looks neither the member nor the radius up.
            if let Some(zset) = zset {
                (shape.lon, shape.lat) = member_position(zset, &args[2])?;
                let (radius, conversion) = radius_args(&args[3], &args[4])?;
                shape.kind = ShapeKind::Radius(radius);
                shape.conversion = conversion;
            }
            5
        }
        Form::Search => 2,
        Form::SearchStore => {
            store = Some((args[1].clone(), false));
            3
        }
    };
    let store_words = matches!(
        search,
        Form::Coords { store: true } | Form::Member { store: true }
    );
    let geosearch = search.is_geosearch();
    let (mut with_dist, mut with_hash, mut with_coord) = (false, false, false);
    let (mut from_member, mut from_lonlat, mut by_radius, mut by_box) =
        (false, false, false, false);
    let mut sort = Sort::None;
    let mut any = false;
    let mut count = 0usize;
    let rest = &args[base.min(args.len())..];
    let mut i = 0;
    while i < rest.len() {
        let arg = &rest[i];
        let left = rest.len() - i - 1;
        if is(arg, "withdist") {
            with_dist = true;
        } else if is(arg, "withhash") {
            with_hash = true;
        } else if is(arg, "withcoord") {
            with_coord = true;
        } else if is(arg, "any") {
            any = true;
        } else if is(arg, "asc") {
            sort = Sort::Asc;
        } else if is(arg, "desc") {
            sort = Sort::Desc;
        } else if is(arg, "count") && left >= 1 {
            let n = int_arg(&rest[i + 1])?;
            if n <= 0 {
                return Err(CmdError::err("COUNT must be > 0"));
            }
            count = usize::try_from(n).unwrap_or(usize::MAX);
            i += 1;
        } else if (is(arg, "store") || is(arg, "storedist")) && left >= 1 && store_words {
            store = Some((rest[i + 1].clone(), is(arg, "storedist")));
            i += 1;
        } else if is(arg, "storedist") && search == Form::SearchStore {
            if let Some((_, dist)) = store.as_mut() {
                *dist = true;
            }
        } else if is(arg, "frommember") && left >= 1 && geosearch && !from_lonlat {
            if let Some(zset) = zset {
                (shape.lon, shape.lat) = member_position(zset, &rest[i + 1])?;
            }
            from_member = true;
            i += 1;
        } else if is(arg, "fromlonlat") && left >= 2 && geosearch && !from_member {
            (shape.lon, shape.lat) = lon_lat_args(&rest[i + 1], &rest[i + 2])?;
            from_lonlat = true;
            i += 2;
        } else if is(arg, "byradius") && left >= 2 && geosearch && !by_box {
            let (radius, conversion) = radius_args(&rest[i + 1], &rest[i + 2])?;
            shape.kind = ShapeKind::Radius(radius);
            shape.conversion = conversion;
            by_radius = true;
            i += 2;
        } else if is(arg, "bybox") && left >= 3 && geosearch && !by_radius {
            let (width, height, conversion) = box_args(&rest[i + 1], &rest[i + 2], &rest[i + 3])?;
            shape.kind = ShapeKind::Box { width, height };
            shape.conversion = conversion;
            by_box = true;
            i += 3;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if store.is_some() && (with_dist || with_hash || with_coord) {
        let what = if search == Form::SearchStore {
            "GEOSEARCHSTORE"
        } else {
            "STORE option in GEORADIUS"
        };
        return Err(CmdError::err(format!(
            "{what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        )));
    }
    let name = String::from_utf8_lossy(&args[0]);
    if geosearch && !(from_member || from_lonlat) {
        return Err(CmdError::err(format!(
            "exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        )));
    }
    if geosearch && !(by_radius || by_box) {
        return Err(CmdError::err(format!(
            "exactly one of BYRADIUS and BYBOX can be specified for {name}"
        )));
    }
    if any && count == 0 {
        return Err(CmdError::err("the ANY argument requires COUNT argument"));
    }
    Ok(Query {
        shape,
        with_dist,
        with_hash,
        with_coord,
        sort,
        any,
        count,
        store,
    })
}

/// An order of found members (by distance, ascending or descending).
type FoundOrder<'a> = dyn Fn(&Found, &Found) -> Ordering + 'a;

/// The members `query` finds in `zset`, sorted as asked and cut to COUNT, distances in the
/// query's unit.
fn run_query(zset: &ZSetValue, query: &Query) -> Vec<Found> {
    let mut sort = query.sort;
    // COUNT without an order means the nearest ones (not so with ANY).
    if query.count != 0 && sort == Sort::None && !query.any {
        sort = Sort::Asc;
    }
    let limit = if query.any { query.count } else { 0 };
    let mut found = members_in(zset, &query.shape, limit);
    let asc = |a: &Found, b: &Found| a.dist.partial_cmp(&b.dist).unwrap_or(Ordering::Equal);
    let desc = |a: &Found, b: &Found| asc(b, a);
    let cmp: Option<&FoundOrder<'_>> = match sort {
        Sort::None => None,
        Sort::Asc => Some(&asc),
        Sort::Desc => Some(&desc),
    };
    if let Some(cmp) = cmp {
        if query.count != 0 && query.count < found.len() {
            // Only the first COUNT need be in order: Redis' partial quicksort, whose order of
            // members at the same distance is its own.
            pqsort(&mut found, cmp, 0, query.count - 1);
        } else {
            // glibc's qsort is a merge sort: members at the same distance keep the order found.
            found.sort_by(cmp);
        }
    }
    if query.count != 0 {
        found.truncate(query.count);
    }
    for f in &mut found {
        f.dist /= query.shape.conversion;
    }
    found
}

/// Redis' `pqsort` (NetBSD's quicksort that recurses only into the parts overlapping elements
/// `lrange..=rrange`), element for element, so members at the same distance come out in the
/// order Redis gives them.
fn pqsort<T>(v: &mut [T], cmp: &dyn Fn(&T, &T) -> Ordering, lrange: usize, rrange: usize) {
    let len = v.len();
    pqsort_part(v, 0, len, cmp, (lrange, rrange));
}

/// `_pqsort` over the `n` elements from `a`.
fn pqsort_part<T>(
    v: &mut [T],
    mut a: usize,
    mut n: usize,
    cmp: &dyn Fn(&T, &T) -> Ordering,
    range: (usize, usize),
) {
    use Ordering::{Equal, Greater, Less};
    // Whether elements `start..start + count` overlap the range to sort.
    let overlaps = |start: usize, count: usize| {
        let end = start + count;
        !((range.0 < start && range.1 < start) || (range.0 >= end && range.1 >= end))
    };
    let med3 = |v: &[T], a: usize, b: usize, c: usize| {
        if cmp(&v[a], &v[b]) == Less {
            if cmp(&v[b], &v[c]) == Less {
                b
            } else if cmp(&v[a], &v[c]) == Less {
                c
            } else {
                a
            }
        } else if cmp(&v[b], &v[c]) == Greater {
            b
        } else if cmp(&v[a], &v[c]) == Less {
            a
        } else {
            c
        }
    };
    let vecswap = |v: &mut [T], i: usize, j: usize, k: usize| {
        for t in 0..k {
            v.swap(i + t, j + t);
        }
    };
    loop {
        if n < 7 {
            for pm in a + 1..a + n {
                let mut pl = pm;
                while pl > a && cmp(&v[pl - 1], &v[pl]) == Greater {
                    v.swap(pl, pl - 1);
                    pl -= 1;
                }
            }
            return;
        }
        let mut pm = a + n / 2;
        if n > 7 {
            let mut pl = a;
            let mut pn = a + n - 1;
            if n > 40 {
                let d = n / 8;
                pl = med3(v, pl, pl + d, pl + 2 * d);
                pm = med3(v, pm - d, pm, pm + d);
                pn = med3(v, pn - 2 * d, pn - d, pn);
            }
            pm = med3(v, pl, pm, pn);
        }
        v.swap(a, pm);
        let (mut pa, mut pb) = (a + 1, a + 1);
        let (mut pc, mut pd) = (a + n - 1, a + n - 1);
        loop {
            while pb <= pc {
                match cmp(&v[pb], &v[a]) {
                    Greater => break,
                    Equal => {
                        v.swap(pa, pb);
                        pa += 1;
                    }
                    Less => {}
                }
                pb += 1;
            }
            while pb <= pc {
                match cmp(&v[pc], &v[a]) {
                    Less => break,
                    Equal => {
                        v.swap(pc, pd);
                        pd -= 1;
                    }
                    Greater => {}
                }
                pc -= 1;
            }
            if pb > pc {
                break;
            }
            v.swap(pb, pc);
            pb += 1;
            pc -= 1;
        }
        let pn = a + n;
        let r = (pa - a).min(pb - pa);
        vecswap(v, a, pb - r, r);
        let r = (pd - pc).min(pn - pd - 1);
        vecswap(v, pb, pn - r, r);
        let left = pb - pa;
        if left > 1 && overlaps(a, left) {
            pqsort_part(v, a, left, cmp, range);
        }
        let right = pd - pc;
        if right > 1 {
            a = pn - right;
            n = right;
            if overlaps(a, n) {
                continue;
            }
        }
        return;
    }
}

/// The reply of a search that does not store.
fn search_reply(found: Vec<Found>, query: &Query) -> Frame {
    let options =
        usize::from(query.with_dist) + usize::from(query.with_hash) + usize::from(query.with_coord);
    Frame::Array(
        found
            .into_iter()
            .map(|f| {
                if options == 0 {
                    return Frame::Bulk(f.member);
                }
                let mut item = Vec::with_capacity(options + 1);
                item.push(Frame::Bulk(f.member));
                if query.with_dist {
                    item.push(distance_reply(f.dist));
                }
                if query.with_hash {
                    item.push(Frame::Integer(f.score as i64));
                }
                if query.with_coord {
                    item.push(Frame::Array(vec![
                        Frame::HumanDouble(f.lon),
                        Frame::HumanDouble(f.lat),
                    ]));
                }
                Frame::Array(item)
            })
            .collect(),
    )
}

/// Every search command: Redis' `georadiusGeneric`.
fn search(ctx: &mut Ctx<'_>, args: &[Bytes], search: Form) -> CmdResult {
    let src = &args[search.src_index()];
    // Every destination a storing search may write (any argument after a STORE or STOREDIST
    // word: the parse decides which), locked with the source from the start so the read and the
    // write are one step (a replay of the logged command finds what it read).
    let dests: Vec<&Bytes> = match search {
        Form::SearchStore => vec![&args[1]],
        Form::Coords { store: true } | Form::Member { store: true } => (5..args.len() - 1)
            .filter(|&i| is(&args[i], "store") || is(&args[i], "storedist"))
            .map(|i| &args[i + 1])
            .collect(),
        _ => Vec::new(),
    };
    let now = ctx.now_ms;
    let limits = super::zsets::zset_limits(ctx);
    let db = ctx.db();
    let mut locked = db.lock_keys(std::iter::once(&src[..]).chain(dests.iter().map(|d| &d[..])));
    let source = locked.shard(src);
    ctx.lookup(source.get(src, now).is_some());
    let zset = super::read_typed(source, src, now, Value::as_zset)?;
    let query = parse_query(args, search, zset)?;
    let found = zset.map(|z| run_query(z, &query));
    let Some((store_key, store_dist)) = query.store.clone() else {
        return Ok(search_reply(found.unwrap_or_default(), &query));
    };
    if !dests.contains(&&store_key) {
        // Not reached: the parsed destination follows a STORE word, and all of those are locked.
        return Err(CmdError::Syntax);
    }
    let found = found.unwrap_or_default();
    let stored = found.len();
    let target = locked.shard(&store_key);
    let changed = if stored == 0 {
        target.remove(&store_key, now).is_some()
    } else {
        let first_len = found.first().map_or(0, |f| f.member.len());
        let mut z = ZSetValue::sized_for(stored, first_len, limits);
        z.extend(
            found
                .iter()
                .map(|f| (&f.member[..], if store_dist { f.dist } else { f.score })),
            limits,
        );
        target.set(&store_key, Value::zset(z), None, now);
        true
    };
    drop(locked);
    if matches!(search, Form::Coords { .. } | Form::Member { .. }) {
        // GEORADIUS is a self-logged write: only a store is logged (as the command itself, which
        // a replay runs again on the same data).
        ctx.log_effect(args.to_vec());
    }
    if stored > 0 {
        let event = if search.is_geosearch() {
            "geosearchstore"
        } else {
            "georadiusstore"
        };
        ctx.notify(crate::notify::ZSET, event, &store_key);
    } else if changed {
        ctx.notify(crate::notify::GENERIC, "del", &store_key);
    }
    Ok(Frame::Integer(stored as i64))
}

/// GEOSEARCH key FROMMEMBER member|FROMLONLAT lon lat BYRADIUS r unit|BYBOX w h unit
/// [ASC|DESC] [COUNT n [ANY]] [WITHCOORD] [WITHDIST] [WITHHASH].
fn geosearch(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    search(ctx, args, Form::Search)
}

/// GEOSEARCHSTORE dest src … [STOREDIST]: the found members into `dest`, scored by position
/// (or by distance).
fn geosearchstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    search(ctx, args, Form::SearchStore)
}

/// GEORADIUS key lon lat radius unit [options] [STORE key|STOREDIST key].
fn georadius(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    search(ctx, args, Form::Coords { store: true })
}

fn georadius_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    search(ctx, args, Form::Coords { store: false })
}

/// GEORADIUSBYMEMBER key member radius unit [options] [STORE key|STOREDIST key].
fn georadiusbymember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    search(ctx, args, Form::Member { store: true })
}

fn georadiusbymember_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    search(ctx, args, Form::Member { store: false })
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
    fn distances_round_as_redis_fixedpoint_does() {
        assert_eq!(distance_text(0.0), "0.0000");
        assert_eq!(distance_text(166274.15156960033), "166274.1516");
        assert_eq!(distance_text(0.00005), "0.0000");
        // Rounded after scaling, as `llrint(d * 10000)`: 0.00015 × 10000 is just under 1.5.
        assert_eq!(distance_text(0.00015), "0.0001");
        assert_eq!(distance_text(0.00025), "0.0002");
        assert_eq!(distance_text(12.5), "12.5000");
    }

    #[test]
    fn cells_wrap_around_the_antimeridian_and_the_poles() {
        // At one bit per coordinate there are two columns and two rows: east of the east one is
        // the west one, north of the north one the south one.
        let ne = Cell {
            bits: 0b11,
            step: 1,
        };
        assert_eq!(
            ne.moved(1, 0),
            Cell {
                bits: 0b01,
                step: 1
            }
        );
        assert_eq!(
            ne.moved(0, 1),
            Cell {
                bits: 0b10,
                step: 1
            }
        );
        assert_eq!(
            ne.moved(-1, -1),
            Cell {
                bits: 0b00,
                step: 1
            }
        );
        let (lon_lo, lon_hi, lat_lo, lat_hi) = ne.area();
        assert_eq!((lon_lo, lon_hi), (0.0, 180.0));
        assert_eq!((lat_lo, lat_hi), (0.0, LAT_MAX));
    }

    #[test]
    fn search_precision_follows_the_radius_and_the_latitude() {
        assert_eq!(estimate_steps(0.0, 0.0), 26);
        assert_eq!(estimate_steps(1.0, 0.0), 24);
        assert_eq!(estimate_steps(200_000.0, 0.0), 6);
        assert_eq!(estimate_steps(200_000.0, 70.0), 5);
        assert_eq!(estimate_steps(200_000.0, -85.0), 4);
        assert_eq!(estimate_steps(1e12, 0.0), 1);
    }

    #[test]
    fn partial_sort_orders_the_first_elements_as_redis_pqsort_does() {
        // Twelve members found in score order at three distances, four at each (m0 m3 m6 m9,
        // m1 m10 m4 m7, m11 m2 m5 m8): Redis 7 answers m3 m6 m0 m9 m4 to ASC COUNT 5.
        let dists = [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0];
        let mut v: Vec<(usize, f64)> = dists.iter().copied().enumerate().collect();
        let asc = |a: &(usize, f64), b: &(usize, f64)| a.1.partial_cmp(&b.1).unwrap();
        pqsort(&mut v, &asc, 0, 4);
        let first: Vec<usize> = v[..5].iter().map(|e| e.0).collect();
        assert_eq!(first, vec![1, 2, 0, 3, 6]);
        // Sorted for any range, on random input.
        let mut seed = 7u64;
        for len in [0usize, 1, 6, 7, 8, 40, 41, 200] {
            let mut v: Vec<u64> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (seed >> 33) % 50
                })
                .collect();
            let mut sorted = v.clone();
            sorted.sort();
            let k = len / 3;
            if len > 0 {
                pqsort(&mut v, &|a: &u64, b: &u64| a.cmp(b), 0, k);
                assert_eq!(v[..=k], sorted[..=k], "len {len}");
            }
        }
    }

    #[test]
    fn spread_and_squash_are_inverse() {
        for v in [0u32, 1, 0x3ff_ffff, 0x155_5555, 12345] {
            assert_eq!(squash(spread(v)), v);
        }
    }
}
