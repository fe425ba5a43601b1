"""GEOADD, GEOHASH, GEOPOS, GEODIST and the searches (GEOSEARCH, GEOSEARCHSTORE, GEORADIUS,
GEORADIUSBYMEMBER and their _RO forms) against a real redis-server: the scores GEOADD stores (read
back with ZSCORE and ZRANGE), NX/XX/CH, the geohash strings, the positions (Redis 7.2's
long-double text), distances in every unit, missing keys and members, and the error texts (bad
floats, positions out of range, units, syntax, WRONGTYPE, arity), in RESP2 and RESP3.

The searches are compared reply for reply, order included (Redis returns an unsorted search in
the order of the geohash cells it scans, so the same order means the same cells): circles and
boxes, ASC/DESC, COUNT [ANY], WITH* options, STORE/STOREDIST and GEOSEARCHSTORE (the stored sets
read back), searches at the poles and across the antimeridian, huge radii, every argument error
in Redis' order, missing and wrong-type keys, and storing into the source key; plus random
searches over random points.
"""

from __future__ import annotations

import random

import pytest

from differential import assert_same, assert_same_replies
from resp import Err, RawConnection

SCRIPT = [
    ["GEOADD", "Sicily", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania"],
    ["ZRANGE", "Sicily", "0", "-1", "WITHSCORES"],
    ["GEOADD", "Sicily", "13.361389", "38.115556", "Palermo"],
    ["GEOADD", "Sicily", "CH", "13.5", "38.1", "Palermo"],
    ["GEOADD", "Sicily", "NX", "1", "1", "Palermo", "2", "2", "New"],
    ["GEOADD", "Sicily", "XX", "CH", "13.361389", "38.115556", "Palermo", "3", "3", "Absent"],
    ["GEOADD", "Sicily", "xx", "ch", "nx", "1", "1", "a"],
    ["ZRANGE", "Sicily", "0", "-1", "WITHSCORES"],
    ["GEOADD", "edge", "180", "85.05112878", "ne", "-180", "-85.05112878", "sw", "0", "0", "zero"],
    ["ZRANGE", "edge", "0", "-1", "WITHSCORES"],
    ["GEOHASH", "edge", "ne", "sw", "zero"],
    ["GEOHASH", "Sicily", "Palermo", "Catania", "nope"],
    ["GEOHASH", "nokey", "a", "b"],
    ["GEOHASH", "Sicily"],
    ["GEOPOS", "Sicily", "Palermo", "nope", "Catania"],
    ["GEOPOS", "edge", "ne", "sw", "zero"],
    ["GEOPOS", "nokey", "a"],
    ["GEOPOS", "Sicily"],
    ["GEODIST", "Sicily", "Palermo", "Catania"],
    ["GEODIST", "Sicily", "Palermo", "Catania", "km"],
    ["GEODIST", "Sicily", "Palermo", "Catania", "MI"],
    ["GEODIST", "Sicily", "Palermo", "Catania", "ft"],
    ["GEODIST", "Sicily", "Palermo", "Palermo"],
    ["GEODIST", "Sicily", "Palermo", "nope"],
    ["GEODIST", "nokey", "a", "b"],
    ["GEODIST", "edge", "ne", "sw"],
    ["GEODIST", "edge", "zero", "ne", "m"],
    # Errors.
    ["GEODIST", "Sicily", "Palermo", "Catania", "yards"],
    ["GEODIST", "Sicily", "Palermo", "Catania", "km", "extra"],
    ["GEODIST", "nokey", "a", "b", "parsec"],
    ["GEOADD", "Sicily", "181", "10", "x"],
    ["GEOADD", "Sicily", "10", "85.06", "x"],
    ["GEOADD", "Sicily", "-180.5", "-86", "x"],
    ["GEOADD", "Sicily", "abc", "10", "x"],
    ["GEOADD", "Sicily", "10", "nan", "x"],
    ["GEOADD", "Sicily", "10", "inf", "x"],
    ["GEOADD", "Sicily", "10", "10", "x", "20"],
    ["GEOADD", "Sicily", "NX", "XX", "10", "10", "x"],
    ["GEOADD", "Sicily", "GT", "10", "10", "x"],
    ["GEOADD", "Sicily", "CH", "CH", "CH"],
    ["GEOADD", "Sicily", "10", "10"],
    ["SET", "str", "v"],
    ["GEOADD", "str", "10", "10", "x"],
    ["GEOHASH", "str", "x"],
    ["GEODIST", "str", "a", "b"],
    ["GEOPOS", "str", "a"],
    ["GEODIST", "Sicily", "a"],
]


@pytest.mark.parametrize("protocol", [2, 3])
def test_geo_matches_redis(gradus, redis_server, protocol):
    assert_same_replies(gradus, redis_server, SCRIPT, protocol)


def test_geo_random_positions_match_redis(gradus, redis_server):
    rng = random.Random(7)
    script = []
    for n in range(200):
        lon = f"{rng.uniform(-180, 180):.6f}"
        lat = f"{rng.uniform(-85.05, 85.05):.6f}"
        script.append(["GEOADD", "g", lon, lat, f"m{n}"])
    script.append(["ZRANGE", "g", "0", "-1", "WITHSCORES"])
    script.append(["GEOHASH", "g"] + [f"m{n}" for n in range(200)])
    script.append(["GEOPOS", "g"] + [f"m{n}" for n in range(200)])
    script += [["GEODIST", "g", f"m{n}", f"m{n + 1}", "km"] for n in range(199)]
    assert_same_replies(gradus, redis_server, script, 2)


def test_geo_command_info_matches_redis(gradus, redis_server):
    def info(server):
        conn = RawConnection(server.host, server.port, timeout=10)
        return [[e[:2], sorted(map(str, e[2])), e[3:6], sorted(map(str, e[6]))]
                for e in conn.call("COMMAND", "INFO", "geoadd", "geohash", "geopos", "geodist")]

    assert_same(gradus, redis_server, info)


def test_geoadd_and_zmpop_from_scripts_match_redis(gradus, redis_server):
    script = ("redis.call('geoadd', KEYS[1], 13.361389, 38.115556, 'Palermo'); "
              "local pos = redis.call('geopos', KEYS[1], 'Palermo'); "
              "local popped = redis.call('zmpop', 1, KEYS[1], 'MIN'); "
              "return {pos, popped, redis.call('exists', KEYS[1])}")

    def run_script(server):
        conn = RawConnection(server.host, server.port, timeout=10)
        conn.call("FLUSHALL")
        return conn.call("EVAL", script, "1", "g")

    assert_same(gradus, redis_server, run_script)


SEARCH_SETUP = [
    ["GEOADD", "Sicily", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania",
     "12.758489", "38.788135", "edge1", "17.241510", "38.788135", "edge2",
     "13.583333", "37.316667", "Agrigento", "14.015", "37.49", "Caltanissetta"],
    # Near the poles and both sides of the antimeridian.
    ["GEOADD", "world", "179.9", "10", "e1", "-179.9", "10", "w1", "180", "0", "am", "-180", "0.1", "am2",
     "0", "85", "north", "0", "-85", "south", "90", "84.9", "north2", "-90", "-84.9", "south2",
     "179.99", "85.05", "ne_corner", "-179.99", "-85.05", "sw_corner", "0", "0", "origin",
     "0.0001", "0.0001", "near_origin", "-0.5", "0.3", "west_origin"],
    ["SET", "str", "v"],
    # Members at the same distance: a full sort keeps the order found (glibc's merge sort), a
    # COUNT below the number found takes Redis' partial quicksort's order.
    ["GEOADD", "ties"] + [x for i in range(12) for x in (str(10 + (i % 3) * 0.001), "10", f"m{i}")],
    ["GEOADD", "manyties"] + [x for i in range(90) for x in (str(20 + (i % 4) * 0.01), "20", f"t{i}")],
]

TIES = [
    ["GEOSEARCH", "ties", "FROMLONLAT", "10", "10", "BYRADIUS", "500", "km", "ASC"],
    ["GEOSEARCH", "ties", "FROMLONLAT", "10", "10", "BYRADIUS", "500", "km", "DESC"],
    ["GEOSEARCH", "ties", "FROMLONLAT", "10", "10", "BYRADIUS", "500", "km", "COUNT", "7"],
] + [
    ["GEOSEARCH", key, "FROMLONLAT", lon, lon, "BYRADIUS", "500", "km", order, "COUNT", str(count)]
    for key, lon, total in (("ties", "10", 12), ("manyties", "20", 90))
    for order in ("ASC", "DESC")
    for count in (1, 2, 5, 6, 7, 8, 11, 12, 13, 41, 60, 89, 90, 91) if count <= total + 1
] + [
    ["GEORADIUS", "manyties", "20.005", "20", "500", "km", "COUNT", "30", "STORE", "tiestore"],
    ["ZRANGE", "tiestore", "0", "-1"],
    ["GEORADIUS", "manyties", "20.005", "20", "500", "km", "COUNT", "45", "DESC", "WITHDIST"],
]

SEARCHES = TIES + [
    # GEORADIUS: options, orders, units.
    ["GEORADIUS", "Sicily", "15", "37", "200", "km"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "WITHDIST", "WITHCOORD", "ASC"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "WITHDIST", "WITHHASH", "WITHCOORD", "DESC"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "withhash"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "WITHCOORD"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "COUNT", "1"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "COUNT", "2", "DESC", "WITHDIST"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "COUNT", "1", "ANY"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "COUNT", "3", "ANY", "ASC"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "COUNT", "100"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "ASC", "DESC", "WITHDIST"],
    ["GEORADIUS", "Sicily", "15", "37", "124", "mi", "WITHDIST", "ASC"],
    ["GEORADIUS", "Sicily", "15", "37", "650000", "ft", "WITHDIST", "ASC"],
    ["GEORADIUS", "Sicily", "15", "37", "200000", "M", "WITHDIST", "ASC"],
    ["GEORADIUS", "Sicily", "15", "37", "0", "km"],
    ["GEORADIUS", "Sicily", "15.087269", "37.502669", "0", "km", "WITHDIST"],
    ["GEORADIUS", "Sicily", "15", "37", "1e10", "km", "WITHDIST", "ASC"],
    # Argument errors, in Redis' order.
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "ANY"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "COUNT", "0"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "COUNT", "-1"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "COUNT", "abc"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "COUNT"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "COUNT", "0", "ANY"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "WITHDIST", "bogus"],
    ["GEORADIUS", "Sicily", "15", "37", "-1", "km"],
    ["GEORADIUS", "Sicily", "15", "37", "abc", "km"],
    ["GEORADIUS", "Sicily", "15", "37", "1", "parsec"],
    ["GEORADIUS", "Sicily", "15", "37", "-1", "parsec"],
    ["GEORADIUS", "Sicily", "200", "37", "1", "km"],
    ["GEORADIUS", "Sicily", "15", "86", "abc", "km"],
    ["GEORADIUS", "Sicily", "abc", "37", "1", "km"],
    ["GEORADIUS", "Sicily", "15", "nan", "1", "km"],
    ["GEORADIUS", "Sicily", "15", "37", "1"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "FROMLONLAT", "1", "2"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "STORE"],
    # STORE and STOREDIST.
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "STORE", "dst"],
    ["ZRANGE", "dst", "0", "-1", "WITHSCORES"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "STOREDIST", "dst2", "COUNT", "2", "DESC"],
    ["ZRANGE", "dst2", "0", "-1", "WITHSCORES"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "STORE", "dst3", "STOREDIST", "dst2"],
    ["ZRANGE", "dst2", "0", "-1", "WITHSCORES"],
    ["EXISTS", "dst3"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "STORE", "dst", "WITHDIST"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "WITHCOORD", "STOREDIST", "dst"],
    ["GEORADIUS", "Sicily", "15", "37", "1", "m", "STORE", "dst"],
    ["EXISTS", "dst"],
    ["GEORADIUS", "nokey", "15", "37", "200", "km"],
    ["GEORADIUS", "nokey", "15", "37", "200", "km", "STORE", "dst2"],
    ["EXISTS", "dst2"],
    ["GEORADIUS", "nokey", "15", "37", "200", "km", "STORE", "dst2", "WITHDIST"],
    ["GEORADIUS", "nokey", "15", "37", "-5", "km"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "STORE", "str"],
    ["TYPE", "str"],
    ["SET", "str", "v"],
    # The _RO forms take no STORE.
    ["GEORADIUS_RO", "Sicily", "15", "37", "200", "km", "WITHDIST", "ASC"],
    ["GEORADIUS_RO", "Sicily", "15", "37", "200", "km", "STORE", "dst"],
    ["GEORADIUS_RO", "Sicily", "15", "37", "200", "km", "STOREDIST", "dst"],
    ["GEORADIUSBYMEMBER_RO", "Sicily", "Palermo", "200", "km", "WITHCOORD", "COUNT", "2"],
    ["GEORADIUSBYMEMBER_RO", "Sicily", "Palermo", "200", "km", "STORE", "dst"],
    # GEORADIUSBYMEMBER.
    ["GEORADIUSBYMEMBER", "Sicily", "Agrigento", "100", "km", "WITHDIST"],
    ["GEORADIUSBYMEMBER", "Sicily", "Agrigento", "100", "km", "WITHDIST", "ASC", "WITHHASH"],
    ["GEORADIUSBYMEMBER", "Sicily", "nope", "100", "km"],
    ["GEORADIUSBYMEMBER", "Sicily", "nope", "abc", "km"],
    ["GEORADIUSBYMEMBER", "Sicily", "Palermo", "abc", "km"],
    ["GEORADIUSBYMEMBER", "nokey", "nope", "abc", "parsec"],
    ["GEORADIUSBYMEMBER", "nokey", "nope", "abc", "parsec", "ANY"],
    ["GEORADIUSBYMEMBER", "Sicily", "Palermo", "200", "km", "STORE", "bym"],
    ["ZRANGE", "bym", "0", "-1", "WITHSCORES"],
    ["GEORADIUSBYMEMBER", "Sicily", "Palermo", "200", "km", "STOREDIST", "bym", "ASC", "COUNT", "3"],
    ["ZRANGE", "bym", "0", "-1", "WITHSCORES"],
    # GEOSEARCH.
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "ASC",
     "WITHCOORD", "WITHDIST", "WITHHASH"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km"],
    ["GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "BYBOX", "400", "400", "km", "ASC", "WITHDIST"],
    ["GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "BYBOX", "400", "400", "km"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "400", "400", "km", "DESC", "COUNT", "2"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "100", "400", "km", "WITHCOORD"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "400", "100", "km", "WITHCOORD"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "0", "0", "km"],
    ["GEOSEARCH", "Sicily", "BYRADIUS", "200", "km", "FROMLONLAT", "15", "37", "COUNT", "2", "ANY"],
    ["GEOSEARCH", "Sicily", "FROMMEMBER", "nope", "BYRADIUS", "1", "km"],
    ["GEOSEARCH", "Sicily", "FROMMEMBER", "nope", "BYRADIUS", "-1", "km"],
    ["GEOSEARCH", "nokey", "FROMMEMBER", "nope", "BYRADIUS", "1", "km"],
    ["GEOSEARCH", "nokey", "FROMMEMBER", "nope", "BYRADIUS", "-1", "km"],
    ["GEOSEARCH", "nokey", "FROMLONLAT", "200", "0", "BYRADIUS", "1", "km"],
    ["GEOSEARCH", "Sicily", "BYRADIUS", "1", "km", "ASC", "WITHDIST"],
    ["geosearch", "Sicily", "FROMLONLAT", "15", "37", "ASC", "WITHDIST"],
    ["GeoSearch", "nokey", "FROMLONLAT", "15", "37", "ASC", "WITHDIST"],
    ["GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "FROMLONLAT", "15", "37", "BYRADIUS", "1", "km"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "FROMMEMBER", "Palermo", "BYRADIUS", "1", "km"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "1", "km", "BYBOX", "1", "1", "km"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "1", "1", "km", "BYRADIUS", "1", "km"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "-1", "1", "km"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "abc", "-1", "km"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "1", "abc", "km"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "1", "1", "yd"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "1", "1"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "STORE", "x"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "STOREDIST"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "ANY"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "COUNT", "0"],
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200"],
    # GEOSEARCHSTORE.
    ["GEOSEARCHSTORE", "gs", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km"],
    ["ZRANGE", "gs", "0", "-1", "WITHSCORES"],
    ["GEOSEARCHSTORE", "gs", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "400", "400", "km", "STOREDIST"],
    ["ZRANGE", "gs", "0", "-1", "WITHSCORES"],
    ["GEOSEARCHSTORE", "gs", "Sicily", "FROMMEMBER", "Palermo", "BYRADIUS", "100", "mi", "STOREDIST",
     "COUNT", "2", "DESC"],
    ["ZRANGE", "gs", "0", "-1", "WITHSCORES"],
    ["GEOSEARCHSTORE", "gs", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "WITHDIST"],
    ["GEOSEARCHSTORE", "gs", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "STORE", "x"],
    ["GEOSEARCHSTORE", "gs", "Sicily", "BYRADIUS", "200", "km", "COUNT", "1"],
    ["GEOSEARCHSTORE", "gs", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "1", "m"],
    ["EXISTS", "gs"],
    ["GEOSEARCHSTORE", "gs", "nokey", "FROMLONLAT", "15", "37", "BYRADIUS", "1", "km"],
    ["GEOSEARCHSTORE", "gs", "nokey", "FROMMEMBER", "x", "BYRADIUS", "-1", "km"],
    ["GEOSEARCHSTORE", "str", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "COUNT", "2"],
    ["TYPE", "str"],
    ["ZRANGE", "str", "0", "-1", "WITHSCORES"],
    ["SET", "str", "v"],
    # Storing into the source key.
    ["GEOSEARCHSTORE", "Sicily", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "COUNT", "4"],
    ["ZRANGE", "Sicily", "0", "-1", "WITHSCORES"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km", "STOREDIST", "Sicily", "COUNT", "3"],
    ["ZRANGE", "Sicily", "0", "-1", "WITHSCORES"],
    ["GEORADIUS", "Sicily", "15", "37", "200", "km"],
    # Wrong type: WRONGTYPE before any argument error.
    ["GEOSEARCH", "str", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "km"],
    ["GEOSEARCH", "str", "FROMLONLAT", "200", "0", "BYRADIUS", "-1", "km"],
    ["GEORADIUS", "str", "200", "37", "1", "km"],
    ["GEORADIUS_RO", "str", "0", "0", "1", "km"],
    ["GEORADIUSBYMEMBER", "str", "m", "1", "km"],
    ["GEORADIUSBYMEMBER_RO", "str", "m", "1", "km"],
    ["GEOSEARCHSTORE", "dst", "str", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "km"],
    ["GEOSEARCHSTORE", "str", "world", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "km"],
    ["TYPE", "str"],
    ["SET", "str", "v"],
    # Poles, the antimeridian, huge and tiny areas (the unsorted forms show the cell order).
    ["GEOSEARCH", "world", "FROMLONLAT", "179.99", "10", "BYBOX", "100", "100", "km", "WITHDIST", "ASC"],
    ["GEOSEARCH", "world", "FROMLONLAT", "179.99", "10", "BYBOX", "100", "100", "km"],
    ["GEOSEARCH", "world", "FROMLONLAT", "-180", "10", "BYRADIUS", "50", "km", "ASC", "WITHCOORD"],
    ["GEOSEARCH", "world", "FROMLONLAT", "180", "0", "BYRADIUS", "30", "km", "WITHDIST"],
    ["GEOSEARCH", "world", "FROMLONLAT", "-179.95", "0.05", "BYBOX", "40", "40", "km", "WITHDIST"],
    ["GEORADIUS", "world", "0", "85", "1000", "km", "WITHDIST", "ASC"],
    ["GEORADIUS", "world", "0", "85", "1000", "km"],
    ["GEORADIUS", "world", "0", "85.05112878", "3000", "km", "WITHDIST"],
    ["GEORADIUS", "world", "0", "-85.05112878", "3000", "km", "WITHDIST"],
    ["GEOSEARCH", "world", "FROMLONLAT", "0", "-85", "BYBOX", "20000", "500", "km", "ASC", "WITHCOORD"],
    ["GEOSEARCH", "world", "FROMLONLAT", "0", "-85", "BYBOX", "20000", "500", "km"],
    ["GEOSEARCH", "world", "FROMLONLAT", "90", "84.9", "BYBOX", "5000", "5000", "km", "WITHDIST"],
    ["GEOSEARCH", "world", "FROMLONLAT", "0", "0", "BYRADIUS", "20000", "km"],
    ["GEOSEARCH", "world", "FROMLONLAT", "0", "0", "BYRADIUS", "20000", "km", "ASC", "WITHDIST"],
    ["GEOSEARCH", "world", "FROMLONLAT", "0", "0", "BYRADIUS", "20000", "km", "COUNT", "3", "ANY"],
    ["GEOSEARCH", "world", "FROMLONLAT", "0", "0", "BYBOX", "40000", "40000", "km"],
    ["GEOSEARCH", "world", "FROMLONLAT", "0", "0", "BYRADIUS", "100", "km", "WITHDIST", "WITHHASH"],
    ["GEOSEARCH", "world", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "m", "WITHDIST"],
    ["GEOSEARCH", "world", "FROMLONLAT", "0", "0", "BYRADIUS", "0", "m", "WITHDIST"],
    ["GEOSEARCH", "world", "FROMMEMBER", "origin", "BYBOX", "0.03", "0.03", "km", "WITHDIST"],
    ["GEOSEARCH", "world", "FROMMEMBER", "ne_corner", "BYRADIUS", "500", "km", "WITHCOORD"],
    ["GEOSEARCH", "world", "FROMMEMBER", "sw_corner", "BYBOX", "1000", "1000", "km", "WITHCOORD"],
    ["GEOSEARCH", "world", "FROMLONLAT", "180", "85.05112878", "BYBOX", "100000", "1", "km"],
    ["GEOSEARCHSTORE", "wd", "world", "FROMLONLAT", "0", "0", "BYRADIUS", "20000", "km", "STOREDIST"],
    ["ZRANGE", "wd", "0", "-1", "WITHSCORES"],
    # Arity.
    ["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS"],
    ["GEOSEARCHSTORE", "a", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS"],
    ["GEORADIUS", "Sicily", "15", "37", "200"],
    ["GEORADIUSBYMEMBER", "Sicily", "Palermo", "200"],
    ["GEORADIUS_RO", "Sicily", "15", "37"],
    ["GEORADIUSBYMEMBER_RO", "Sicily", "Palermo"],
]


def scores_as_floats(cmd, reply):
    """ZRANGE … WITHSCORES with its RESP2 scores as numbers: a stored distance is written with
    17 significant digits by Redis 7.0 (the reference here) and in its shortest form by 7.2 and
    Gradus; both read back as the same double."""
    if cmd[0] == "ZRANGE" and "WITHSCORES" in cmd and isinstance(reply, list):
        return [float(x) if i % 2 and isinstance(x, bytes) else x for i, x in enumerate(reply)]
    return reply


@pytest.mark.parametrize("protocol", [2, 3])
def test_geo_searches_match_redis(gradus, redis_server, protocol):
    assert_same_replies(gradus, redis_server, SEARCH_SETUP + SEARCHES, protocol,
                        normalise=scores_as_floats)


def test_geo_random_searches_match_redis(gradus, redis_server):
    rng = random.Random(11)
    script = []
    for n in range(300):
        # Clustered around a few centres, so searches find several members in several cells.
        lon0, lat0 = rng.choice([(2.35, 48.85), (-73.9, 40.7), (179.5, -16.5), (139.7, 35.7), (0, 84)])
        lon = max(-180.0, min(180.0, lon0 + rng.uniform(-3, 3)))
        lat = max(-85.05, min(85.05, lat0 + rng.uniform(-3, 3)))
        script.append(["GEOADD", "g", f"{lon:.6f}", f"{lat:.6f}", f"m{n}"])
    units = ["m", "km", "mi", "ft"]
    for n in range(150):
        lon0, lat0 = rng.choice([(2.35, 48.85), (-73.9, 40.7), (179.9, -16.5), (-179.9, -16.5), (0, 84)])
        lon = max(-180.0, min(180.0, lon0 + rng.uniform(-2, 2)))
        lat = max(-85.05, min(85.05, lat0 + rng.uniform(-2, 2)))
        unit = rng.choice(units)
        scale = {"m": 1000, "km": 1, "mi": 0.621371, "ft": 3280.84}[unit]
        size = [f"{rng.uniform(1, 400) * scale:.3f}"]
        shape = (["BYRADIUS"] + size + [unit] if rng.random() < 0.5
                 else ["BYBOX"] + size + [f"{rng.uniform(1, 400) * scale:.3f}", unit])
        centre = (["FROMLONLAT", f"{lon:.6f}", f"{lat:.6f}"] if rng.random() < 0.8
                  else ["FROMMEMBER", f"m{rng.randrange(300)}"])
        options = ["WITHDIST", "WITHCOORD", "WITHHASH"]
        # Sorted forms break no ties (random points do not share a distance); unsorted ones
        # keep Redis' cell order.
        order = rng.choice([[], ["ASC"], ["DESC"]])
        count = rng.choice([[], ["COUNT", str(rng.randint(1, 20))]])
        if count and not order and rng.random() < 0.5:
            count.append("ANY")
        script.append(["GEOSEARCH", "g"] + centre + shape + order + count + options)
        if "BYRADIUS" in shape and "FROMLONLAT" in centre:
            script.append(["GEORADIUS", "g", centre[1], centre[2], size[0], unit] + order + count + ["WITHDIST"])
        script.append(["GEOSEARCHSTORE", "d", "g"] + centre + shape + order + count + ["STOREDIST"])
        script.append(["ZRANGE", "d", "0", "-1", "WITHSCORES"])
        script.append(["OBJECT", "ENCODING", "d"])
    # A store of more than 128 members is a skiplist, as Redis converts it.
    script.append(["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "0", "0", "BYRADIUS", "20000", "km"])
    script.append(["ZCARD", "d"])
    script.append(["OBJECT", "ENCODING", "d"])
    assert_same_replies(gradus, redis_server, script, 2, normalise=scores_as_floats)


def test_geo_search_command_info_and_keys_match_redis(gradus, redis_server):
    names = ["geosearch", "geosearchstore", "georadius", "georadius_ro", "georadiusbymember",
             "georadiusbymember_ro"]

    def info(server):
        conn = RawConnection(server.host, server.port, timeout=10)
        return [[e[:2], sorted(map(str, e[2])), e[3:6], sorted(map(str, e[6]))]
                for e in conn.call("COMMAND", "INFO", *names)]

    assert_same(gradus, redis_server, info)
    getkeys = [
        ["GEORADIUS", "k", "0", "0", "1", "km", "STORE", "d"],
        ["GEORADIUS", "k", "0", "0", "1", "km", "STOREDIST", "d", "STORE", "e"],
        ["GEORADIUS", "k", "0", "0", "1", "km"],
        ["GEORADIUS", "k", "0", "0", "1", "km", "STORE", "a", "STORE", "b"],
        ["GEORADIUS", "k", "0", "0", "1", "km", "WITHDIST", "STORE"],
        ["GEORADIUS", "k", "0", "0", "1", "store", "x"],
        ["GEORADIUSBYMEMBER", "k", "m", "1", "km", "STOREDIST", "d"],
        ["GEORADIUSBYMEMBER", "k", "store", "1", "km", "storedist", "d", "STORE", "d"],
        ["GEOSEARCHSTORE", "d", "k", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "km"],
        ["GEOSEARCH", "k", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "km"],
    ]

    def keys(server):
        conn = RawConnection(server.host, server.port, timeout=10)
        return [conn.call("COMMAND", "GETKEYS", *cmd) for cmd in getkeys]

    assert_same(gradus, redis_server, keys)


def test_acl_key_rules_cover_the_store_keys(gradus, redis_server):
    """A user whose keys are `src*` may search `src` but not store outside its keys, through
    the first STORE or STOREDIST key (Redis 7's key specs)."""
    script = [
        ["GEOADD", "src", "13.361389", "38.115556", "Palermo"],
        ["ACL", "SETUSER", "geo", "on", ">pw", "~src*", "+@all"],
        ["AUTH", "geo", "pw"],
        ["GEORADIUS", "src", "13", "38", "100", "km"],
        ["GEORADIUS", "src", "13", "38", "100", "km", "STORE", "src2"],
        ["GEORADIUS", "src", "13", "38", "100", "km", "STORE", "other"],
        ["GEORADIUS", "src", "13", "38", "100", "km", "STOREDIST", "other"],
        ["GEORADIUSBYMEMBER", "src", "Palermo", "1", "km", "STORE", "other"],
        ["GEOSEARCHSTORE", "other", "src", "FROMMEMBER", "Palermo", "BYRADIUS", "1", "km"],
        ["GEOSEARCHSTORE", "src3", "src", "FROMMEMBER", "Palermo", "BYRADIUS", "1", "km"],
        ["GEOSEARCH", "other", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "km"],
        ["EXISTS", "src2", "src3"],
    ]

    def outcome(reply):
        # Redis 7.0 and 7.2 word the NOPERM error differently: compare its class only.
        if isinstance(reply, Err) and reply.message.startswith(b"NOPERM"):
            return "NOPERM"
        return reply

    ours = assert_same_replies(gradus, redis_server, script, 2,
                               normalise=lambda cmd, reply: outcome(reply))
    assert [outcome(r) for r in ours[5:9]] == ["NOPERM"] * 4


def test_geo_searches_in_transactions_and_scripts_match_redis(gradus, redis_server):
    script = [
        ["GEOADD", "g", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania"],
        ["MULTI"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km"],
        ["GEORADIUS", "g", "15", "37", "200", "km", "WITHDIST", "STORE", "e"],
        ["GEORADIUS", "g", "15", "37", "200", "km", "STORE", "e"],
        ["ZRANGE", "e", "0", "-1", "WITHSCORES"],
        ["EXEC"],
        ["EVAL", "return redis.call('geosearch', KEYS[1], 'FROMLONLAT', 15, 37, 'BYRADIUS', 200, 'km', "
                 "'WITHDIST', 'ASC')", "1", "g"],
        ["EVAL", "return redis.call('georadius', KEYS[1], 15, 37, 200, 'km', 'STORE', KEYS[2])", "2", "g", "s"],
        ["ZRANGE", "s", "0", "-1", "WITHSCORES"],
    ]
    assert_same_replies(gradus, redis_server, script, 2, normalise=scores_as_floats)


@pytest.mark.gradus_only
def test_storing_searches_survive_a_strict_crash(gradus_factory):
    """GEOSEARCHSTORE and GEORADIUS … STORE/STOREDIST acknowledged at strict, then kill -9: the
    replayed log rebuilds the same destinations (a search that does not store is not logged, so
    replaying it changes nothing), interleaved with writes to the source."""
    server = gradus_factory("--durability", "strict")
    conn = RawConnection(server.host, server.port, timeout=10)
    rng = random.Random(5)
    for n in range(200):
        conn.call("GEOADD", "g", f"{rng.uniform(10, 20):.6f}", f"{rng.uniform(35, 45):.6f}", f"m{n}")
        if n % 20 == 0:
            conn.call("GEOSEARCHSTORE", f"s{n}", "g", "FROMLONLAT", "15", "40", "BYRADIUS", "300", "km",
                      "STOREDIST")
            conn.call("GEORADIUS", "g", "15", "40", "200", "km", "STORE", f"r{n}", "COUNT", "5")
            conn.call("GEORADIUSBYMEMBER", "g", "m0", "150", "km", "STOREDIST", f"b{n}")
            conn.call("GEORADIUS", "g", "15", "40", "200", "km", "WITHDIST")
    conn.call("GEOSEARCHSTORE", "g", "g", "FROMLONLAT", "15", "40", "BYBOX", "500", "500", "km")
    keys = sorted(conn.call("KEYS", "*"))
    before = {k: conn.call("ZRANGE", k, "0", "-1", "WITHSCORES") for k in keys}
    assert b"g" in keys and len(keys) > 20 and all(before.values())
    conn.close()
    server.crash_restart()
    conn = RawConnection(server.host, server.port, timeout=10)
    try:
        assert sorted(conn.call("KEYS", "*")) == keys
        assert {k: conn.call("ZRANGE", k, "0", "-1", "WITHSCORES") for k in keys} == before
    finally:
        conn.close()
