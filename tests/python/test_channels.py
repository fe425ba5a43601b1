"""Django Channels' Redis channel layer (channels_redis) on Gradus: group messages reach every
member channel, through both the list-based `RedisChannelLayer` (BLPOP/BZPOPMIN, Lua, sorted
sets) and the pub/sub-based `RedisPubSubChannelLayer`.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("channels_redis")

from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure()


def _hosts(server):
    return [f"redis://{server.host}:{server.port}/0"]


async def _group_roundtrip(layer):
    a = await layer.new_channel()
    b = await layer.new_channel()
    await layer.group_add("room", a)
    await layer.group_add("room", b)
    await layer.group_send("room", {"type": "chat.message", "text": "hello"})
    got_a = await asyncio.wait_for(layer.receive(a), 10)
    got_b = await asyncio.wait_for(layer.receive(b), 10)
    await layer.group_discard("room", b)
    await layer.group_send("room", {"type": "chat.message", "text": "only a"})
    got_a2 = await asyncio.wait_for(layer.receive(a), 10)
    await layer.send(b, {"type": "direct", "n": 1})
    got_b2 = await asyncio.wait_for(layer.receive(b), 10)
    return got_a, got_b, got_a2, got_b2


def _check(results):
    got_a, got_b, got_a2, got_b2 = results
    assert got_a == {"type": "chat.message", "text": "hello"}
    assert got_b == {"type": "chat.message", "text": "hello"}
    assert got_a2 == {"type": "chat.message", "text": "only a"}
    assert got_b2 == {"type": "direct", "n": 1}


def test_redis_channel_layer_delivers_group_messages(gradus):
    from channels_redis.core import RedisChannelLayer

    async def run():
        layer = RedisChannelLayer(hosts=_hosts(gradus))
        try:
            return await _group_roundtrip(layer)
        finally:
            await layer.flush()
            await layer.close_pools()

    _check(asyncio.run(run()))


def test_redis_pubsub_channel_layer_delivers_group_messages(gradus):
    from channels_redis.pubsub import RedisPubSubChannelLayer

    async def run():
        layer = RedisPubSubChannelLayer(hosts=_hosts(gradus))
        try:
            return await _group_roundtrip(layer)
        finally:
            await layer.flush()

    _check(asyncio.run(run()))
