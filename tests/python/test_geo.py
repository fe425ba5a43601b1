"""GEOADD, GEOHASH, GEOPOS and GEODIST against a real redis-server: the scores GEOADD stores (read
back with ZSCORE and ZRANGE), NX/XX/CH, the geohash strings, the positions (Redis 7.2's
long-double text), distances in every unit, missing
keys and members, and the error texts (bad floats, positions out of range, units, syntax,
WRONGTYPE, arity), in RESP2 and RESP3.
"""

from __future__ import annotations

import random

import pytest

from resp import RawConnection

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


def run(server, protocol, script):
    conn = RawConnection(server.host, server.port, timeout=10)
    if protocol == 3:
        conn.call("HELLO", "3")
    conn.call("FLUSHALL")
    return [conn.call(*cmd) for cmd in script]


@pytest.mark.parametrize("protocol", [2, 3])
def test_geo_matches_redis(gradus, redis_server, protocol):
    ours, theirs = run(gradus, protocol, SCRIPT), run(redis_server, protocol, SCRIPT)
    for cmd, a, b in zip(SCRIPT, ours, theirs):
        assert a == b, f"{cmd}: gradus {a!r}, redis {b!r}"


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
    ours, theirs = run(gradus, 2, script), run(redis_server, 2, script)
    for cmd, a, b in zip(script, ours, theirs):
        assert a == b, f"{cmd}: gradus {a!r}, redis {b!r}"


def test_geo_command_info_matches_redis(gradus, redis_server):
    def info(server):
        conn = RawConnection(server.host, server.port, timeout=10)
        return [[e[:2], sorted(map(str, e[2])), e[3:6], sorted(map(str, e[6]))]
                for e in conn.call("COMMAND", "INFO", "geoadd", "geohash", "geopos", "geodist")]

    assert info(gradus) == info(redis_server)


def test_geoadd_and_zmpop_from_scripts_match_redis(gradus, redis_server):
    script = ("redis.call('geoadd', KEYS[1], 13.361389, 38.115556, 'Palermo'); "
              "local pos = redis.call('geopos', KEYS[1], 'Palermo'); "
              "local popped = redis.call('zmpop', 1, KEYS[1], 'MIN'); "
              "return {pos, popped, redis.call('exists', KEYS[1])}")

    def run_script(server):
        conn = RawConnection(server.host, server.port, timeout=10)
        conn.call("FLUSHALL")
        return conn.call("EVAL", script, "1", "g")

    assert run_script(gradus) == run_script(redis_server)
