"""redis-py smoke program: one check per command family, with the client's default settings
(redis-py 5+ opens with HELLO 3, so RESP3). Usage: smoke.py HOST PORT

Prints `PASS <family>` or `FAIL <family>: <why>` per family and exits 1 if any failed. Each
family uses its own keys (prefix `smoke:py:<family>:`) and cleans them first; an alarm bounds
each family, so a reply that never comes fails instead of hanging."""

import signal
import sys
import threading
import time

import redis

HOST, PORT = sys.argv[1], int(sys.argv[2])
TIMEOUT_S = 10
FAMILY_TIMEOUT_S = 30


class NoReply(Exception):
    """A family took longer than FAMILY_TIMEOUT_S: a reply that never came."""


def on_alarm(_signum, _frame):
    raise NoReply(f"no result in {FAMILY_TIMEOUT_S} s (a reply that never came?)")


def client():
    """A client with redis-py's defaults (no socket timeout: the alarm bounds every wait)."""
    return redis.Redis(host=HOST, port=PORT)


def eq(got, want, what):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def clean(r, *keys):
    r.delete(*keys)


def strings(r, p):
    clean(r, p + "s", p + "n", p + "f", p + "m1", p + "m2")
    eq(r.ping(), True, "PING")
    eq(r.set(p + "s", "hello"), True, "SET")
    eq(r.get(p + "s"), b"hello", "GET")
    eq(r.append(p + "s", " world"), 11, "APPEND")
    eq(r.strlen(p + "s"), 11, "STRLEN")
    eq(r.getrange(p + "s", 0, 4), b"hello", "GETRANGE")
    eq(r.setrange(p + "s", 6, "W"), 11, "SETRANGE")
    eq(r.set(p + "s", "x", nx=True), None, "SET NX on an existing key")
    eq(r.set(p + "s", "new", get=True), b"hello World", "SET GET")
    eq(r.getset(p + "s", "v2"), b"new", "GETSET")
    eq(r.incr(p + "n"), 1, "INCR")
    eq(r.incrby(p + "n", 41), 42, "INCRBY")
    eq(r.decr(p + "n"), 41, "DECR")
    eq(r.incrbyfloat(p + "f", 1.5), 1.5, "INCRBYFLOAT")
    eq(r.mset({p + "m1": "a", p + "m2": "b"}), True, "MSET")
    eq(r.mget(p + "m1", p + "m2", p + "missing"), [b"a", b"b", None], "MGET")
    eq(r.setnx(p + "m1", "z"), False, "SETNX")
    eq(r.getdel(p + "m1"), b"a", "GETDEL")
    eq(r.get(p + "m1"), None, "GET after GETDEL")


def keys_expiry(r, p):
    clean(r, p + "a", p + "b", p + "c")
    r.set(p + "a", "1")
    eq(r.exists(p + "a", p + "missing"), 1, "EXISTS")
    eq(r.type(p + "a"), b"string", "TYPE")
    eq(r.expire(p + "a", 100), True, "EXPIRE")
    ttl = r.ttl(p + "a")
    if not 90 <= ttl <= 100:
        raise AssertionError(f"TTL: got {ttl}")
    pttl = r.pttl(p + "a")
    if not 90_000 <= pttl <= 100_000:
        raise AssertionError(f"PTTL: got {pttl}")
    eq(r.persist(p + "a"), True, "PERSIST")
    eq(r.ttl(p + "a"), -1, "TTL after PERSIST")
    eq(r.rename(p + "a", p + "b"), True, "RENAME")
    eq(r.exists(p + "a"), 0, "EXISTS after RENAME")
    eq(sorted(r.keys(p + "*")), [(p + "b").encode()], "KEYS")
    seen = set()
    for k in r.scan_iter(match=p + "*", count=10):
        seen.add(k)
    eq(seen, {(p + "b").encode()}, "SCAN")
    r.set(p + "c", "short", px=150)
    time.sleep(0.4)
    eq(r.get(p + "c"), None, "GET after PX expiry")
    eq(r.delete(p + "b", p + "missing"), 1, "DEL")


def hashes(r, p):
    k = p + "h"
    clean(r, k)
    eq(r.hset(k, mapping={"a": "1", "b": "2"}), 2, "HSET")
    eq(r.hget(k, "a"), b"1", "HGET")
    eq(r.hmget(k, ["a", "nope"]), [b"1", None], "HMGET")
    eq(r.hgetall(k), {b"a": b"1", b"b": b"2"}, "HGETALL")
    eq(r.hexists(k, "b"), True, "HEXISTS")
    eq(r.hlen(k), 2, "HLEN")
    eq(r.hincrby(k, "a", 5), 6, "HINCRBY")
    eq(r.hincrbyfloat(k, "a", 0.5), 6.5, "HINCRBYFLOAT")
    eq(sorted(r.hkeys(k)), [b"a", b"b"], "HKEYS")
    eq(sorted(r.hvals(k)), [b"2", b"6.5"], "HVALS")
    eq(r.hsetnx(k, "a", "9"), False, "HSETNX")
    eq(r.hdel(k, "a", "nope"), 1, "HDEL")
    eq(r.hgetall(k), {b"b": b"2"}, "HGETALL after HDEL")


def lists(r, p):
    k, dst = p + "l", p + "dst"
    clean(r, k, dst, p + "blocking")
    eq(r.rpush(k, "a", "b", "c"), 3, "RPUSH")
    eq(r.lpush(k, "z"), 4, "LPUSH")
    eq(r.lrange(k, 0, -1), [b"z", b"a", b"b", b"c"], "LRANGE")
    eq(r.llen(k), 4, "LLEN")
    eq(r.lindex(k, 1), b"a", "LINDEX")
    eq(r.lset(k, 1, "A"), True, "LSET")
    eq(r.linsert(k, "BEFORE", "b", "ab"), 5, "LINSERT")
    eq(r.lpos(k, "b"), 3, "LPOS")
    eq(r.lrem(k, 0, "ab"), 1, "LREM")
    eq(r.lpop(k), b"z", "LPOP")
    eq(r.rpop(k, 2), [b"c", b"b"], "RPOP count")
    eq(r.lmove(k, dst, "LEFT", "RIGHT"), b"A", "LMOVE")
    eq(r.exists(k), 0, "an emptied list is gone")
    eq(r.ltrim(dst, 0, 0), True, "LTRIM")
    # A blocking pop on one connection, woken by a push on another.
    got = {}
    blocker = client()

    def pop():
        got["reply"] = blocker.blpop([p + "blocking"], timeout=5)

    t = threading.Thread(target=pop)
    t.start()
    time.sleep(0.3)
    r.rpush(p + "blocking", "wake")
    t.join(TIMEOUT_S)
    eq(t.is_alive(), False, "BLPOP returned")
    eq(tuple(got.get("reply") or ()), ((p + "blocking").encode(), b"wake"), "BLPOP woken by RPUSH")
    eq(r.blpop([p + "empty"], timeout=0.1), None, "BLPOP timeout")


def sets(r, p):
    a, b, d = p + "a", p + "b", p + "d"
    clean(r, a, b, d)
    eq(r.sadd(a, "x", "y", "z"), 3, "SADD")
    eq(r.sadd(b, "y", "z", "w"), 3, "SADD")
    eq(r.smembers(a), {b"x", b"y", b"z"}, "SMEMBERS")
    eq(r.sismember(a, "x"), True, "SISMEMBER")
    eq(r.smismember(a, ["x", "nope"]), [True, False], "SMISMEMBER")
    eq(r.scard(a), 3, "SCARD")
    eq(r.sinter(a, b), {b"y", b"z"}, "SINTER")
    eq(r.sunion(a, b), {b"x", b"y", b"z", b"w"}, "SUNION")
    eq(r.sdiff(a, b), {b"x"}, "SDIFF")
    eq(r.sdiffstore(d, [a, b]), 1, "SDIFFSTORE")
    eq(r.smove(a, b, "x"), True, "SMOVE")
    eq(r.srem(a, "y", "nope"), 1, "SREM")
    eq(r.spop(a), b"z", "SPOP of the last member")
    eq(r.exists(a), 0, "an emptied set is gone")


def sorted_sets(r, p):
    k, o = p + "z", p + "o"
    clean(r, k, o)
    eq(r.zadd(k, {"a": 1, "b": 2, "c": 3.5}), 3, "ZADD")
    eq(r.zscore(k, "c"), 3.5, "ZSCORE")
    eq(r.zcard(k), 3, "ZCARD")
    eq(r.zrange(k, 0, -1), [b"a", b"b", b"c"], "ZRANGE")
    eq(r.zrange(k, 0, -1, withscores=True), [(b"a", 1.0), (b"b", 2.0), (b"c", 3.5)],
       "ZRANGE WITHSCORES")
    eq(r.zrevrange(k, 0, 0), [b"c"], "ZREVRANGE")
    eq(r.zrangebyscore(k, 2, "+inf"), [b"b", b"c"], "ZRANGEBYSCORE")
    eq(r.zrank(k, "b"), 1, "ZRANK")
    eq(r.zincrby(k, 10, "a"), 11.0, "ZINCRBY")
    eq(r.zcount(k, "-inf", 5), 2, "ZCOUNT")
    eq(r.zadd(k, {"b": 0}, xx=True, ch=True), 1, "ZADD XX CH")
    eq(r.zpopmin(k), [(b"b", 0.0)], "ZPOPMIN")
    eq(r.zadd(o, {"c": 1}), 1, "ZADD")
    eq(r.zunionstore(p + "u", [k, o]), 2, "ZUNIONSTORE")
    eq(r.zrem(k, "a", "nope"), 1, "ZREM")
    clean(r, p + "u")


def multi_exec(r, p):
    k, w = p + "k", p + "w"
    clean(r, k, w)
    pipe = r.pipeline(transaction=True)
    pipe.set(k, "1").incr(k).get(k).hset(p + "h", "f", "v").delete(p + "h")
    eq(pipe.execute(), [True, 2, b"2", 1, 1], "MULTI/EXEC")
    # WATCH: a change by another client makes EXEC fail.
    other = client()
    with r.pipeline() as pipe:
        pipe.watch(w)
        other.set(w, "changed")
        pipe.multi()
        pipe.set(w, "mine")
        try:
            pipe.execute()
            raise AssertionError("EXEC after a watched key changed did not abort")
        except redis.WatchError:
            pass
    eq(r.get(w), b"changed", "the aborted transaction wrote nothing")
    # An error inside EXEC does not undo the others.
    pipe = r.pipeline(transaction=True)
    pipe.set(k, "text").incr(k).set(w, "after")
    out = pipe.execute(raise_on_error=False)
    eq(out[0], True, "EXEC reply 1")
    eq(isinstance(out[1], redis.ResponseError), True, "EXEC reply 2 is an error")
    eq(out[2], True, "EXEC reply 3")


def pubsub(r, p):
    ch = p + "ch"
    ps = client().pubsub()
    ps.subscribe(ch)
    msg = ps.get_message(timeout=5)
    eq(msg and msg["type"], "subscribe", "SUBSCRIBE confirmation")
    ps.psubscribe(p + "pat*")
    msg = ps.get_message(timeout=5)
    eq(msg and msg["type"], "psubscribe", "PSUBSCRIBE confirmation")
    eq(r.publish(ch, "hello"), 1, "PUBLISH receivers")
    msg = ps.get_message(timeout=5)
    eq(msg and (msg["type"], msg["data"]), ("message", b"hello"), "message delivered")
    eq(r.publish(p + "pattern", "p"), 1, "PUBLISH to a pattern")
    msg = ps.get_message(timeout=5)
    eq(msg and (msg["type"], msg["data"]), ("pmessage", b"p"), "pmessage delivered")
    eq(r.pubsub_numsub(ch), [(ch.encode(), 1)], "PUBSUB NUMSUB")
    ps.unsubscribe(ch)
    msg = ps.get_message(timeout=5)
    eq(msg and msg["type"], "unsubscribe", "UNSUBSCRIBE confirmation")
    ps.close()


FAMILIES = [
    ("strings", strings),
    ("keys/expiry", keys_expiry),
    ("hashes", hashes),
    ("lists", lists),
    ("sets", sets),
    ("sorted sets", sorted_sets),
    ("multi/exec", multi_exec),
    ("pub/sub", pubsub),
]


def main():
    failed = 0
    try:
        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(FAMILY_TIMEOUT_S)
        r = client()
        r.ping()
        signal.alarm(0)
        proto = r.connection_pool.get_connection().protocol
        print(f"# redis-py {redis.__version__}, protocol {proto}")
    except Exception as e:  # noqa: BLE001 - the report names whatever went wrong
        for name, _ in FAMILIES:
            print(f"FAIL {name}: cannot connect: {type(e).__name__}: {e}")
        return 1
    signal.signal(signal.SIGALRM, on_alarm)
    for name, check in FAMILIES:
        try:
            signal.alarm(FAMILY_TIMEOUT_S)
            try:
                check(r, f"smoke:py:{name}:")
            finally:
                signal.alarm(0)
            print(f"PASS {name}")
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            r = client()  # a fresh connection: the failure may have left this one mid-reply
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
