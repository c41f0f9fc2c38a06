// Jedis 5 smoke program: one check per command family, with the client's default settings
// (RESP2; Jedis 5 sends CLIENT SETINFO on connect). Usage: java Smoke HOST PORT
//
// Prints `PASS <family>` or `FAIL <family>: <why>` per family and exits 1 if any failed. Each
// family uses its own keys (prefix `smoke:java:<family>:`) and cleans them first; Jedis's default
// socket timeout bounds every wait, so a reply that never comes fails instead of hanging.

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisPubSub;
import redis.clients.jedis.Transaction;
import redis.clients.jedis.args.ListDirection;
import redis.clients.jedis.args.ListPosition;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.params.ScanParams;
import redis.clients.jedis.params.SetParams;
import redis.clients.jedis.params.ZAddParams;
import redis.clients.jedis.resps.ScanResult;
import redis.clients.jedis.resps.Tuple;
import redis.clients.jedis.util.KeyValue;

public final class Smoke {
    private static final int TIMEOUT_MS = 10_000;
    private static String host;
    private static int port;

    interface Check {
        void run(Jedis r, String p) throws Exception;
    }

    /** A connection with Jedis's defaults (its socket timeout, 2 s, bounds every wait). */
    static Jedis connect() {
        return new Jedis(host, port);
    }

    static void eq(Object got, Object want, String what) {
        if (!Objects.equals(got, want)) {
            throw new AssertionError(what + ": got " + got + ", want " + want);
        }
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    static Set<String> set(String... xs) {
        return new TreeSet<>(List.of(xs));
    }

    static void strings(Jedis r, String p) {
        r.del(p + "s", p + "n", p + "f", p + "m1", p + "m2");
        eq(r.ping(), "PONG", "PING");
        eq(r.set(p + "s", "hello"), "OK", "SET");
        eq(r.get(p + "s"), "hello", "GET");
        eq(r.append(p + "s", " world"), 11L, "APPEND");
        eq(r.strlen(p + "s"), 11L, "STRLEN");
        eq(r.getrange(p + "s", 0, 4), "hello", "GETRANGE");
        eq(r.setrange(p + "s", 6, "W"), 11L, "SETRANGE");
        eq(r.set(p + "s", "x", SetParams.setParams().nx()), null, "SET NX on an existing key");
        eq(r.setGet(p + "s", "new"), "hello World", "SET GET");
        eq(r.getSet(p + "s", "v2"), "new", "GETSET");
        eq(r.incr(p + "n"), 1L, "INCR");
        eq(r.incrBy(p + "n", 41), 42L, "INCRBY");
        eq(r.decr(p + "n"), 41L, "DECR");
        eq(r.incrByFloat(p + "f", 1.5), 1.5, "INCRBYFLOAT");
        eq(r.mset(p + "m1", "a", p + "m2", "b"), "OK", "MSET");
        eq(r.mget(p + "m1", p + "m2", p + "missing"), java.util.Arrays.asList("a", "b", null), "MGET");
        eq(r.setnx(p + "m1", "z"), 0L, "SETNX");
        eq(r.getDel(p + "m1"), "a", "GETDEL");
        eq(r.get(p + "m1"), null, "GET after GETDEL");
    }

    static void keysExpiry(Jedis r, String p) throws InterruptedException {
        r.del(p + "a", p + "b", p + "c");
        r.set(p + "a", "1");
        eq(r.exists(p + "a", p + "missing"), 1L, "EXISTS");
        eq(r.type(p + "a"), "string", "TYPE");
        eq(r.expire(p + "a", 100), 1L, "EXPIRE");
        long ttl = r.ttl(p + "a");
        check(ttl >= 90 && ttl <= 100, "TTL: got " + ttl);
        long pttl = r.pttl(p + "a");
        check(pttl >= 90_000 && pttl <= 100_000, "PTTL: got " + pttl);
        eq(r.persist(p + "a"), 1L, "PERSIST");
        eq(r.ttl(p + "a"), -1L, "TTL after PERSIST");
        eq(r.rename(p + "a", p + "b"), "OK", "RENAME");
        eq(r.exists(p + "a"), false, "EXISTS after RENAME");
        eq(new TreeSet<>(r.keys(p + "*")), set(p + "b"), "KEYS");
        Set<String> seen = new TreeSet<>();
        String cursor = ScanParams.SCAN_POINTER_START;
        do {
            ScanResult<String> page = r.scan(cursor, new ScanParams().match(p + "*").count(10));
            cursor = page.getCursor();
            seen.addAll(page.getResult());
        } while (!cursor.equals(ScanParams.SCAN_POINTER_START));
        eq(seen, set(p + "b"), "SCAN");
        r.set(p + "c", "short", SetParams.setParams().px(150));
        Thread.sleep(400);
        eq(r.get(p + "c"), null, "GET after PX expiry");
        eq(r.del(p + "b", p + "missing"), 1L, "DEL");
    }

    static void hashes(Jedis r, String p) {
        String k = p + "h";
        r.del(k);
        eq(r.hset(k, Map.of("a", "1", "b", "2")), 2L, "HSET");
        eq(r.hget(k, "a"), "1", "HGET");
        eq(r.hmget(k, "a", "nope"), java.util.Arrays.asList("1", null), "HMGET");
        eq(r.hgetAll(k), Map.of("a", "1", "b", "2"), "HGETALL");
        eq(r.hexists(k, "b"), true, "HEXISTS");
        eq(r.hlen(k), 2L, "HLEN");
        eq(r.hincrBy(k, "a", 5), 6L, "HINCRBY");
        eq(r.hincrByFloat(k, "a", 0.5), 6.5, "HINCRBYFLOAT");
        eq(new TreeSet<>(r.hkeys(k)), set("a", "b"), "HKEYS");
        eq(new TreeSet<>(r.hvals(k)), set("2", "6.5"), "HVALS");
        eq(r.hsetnx(k, "a", "9"), 0L, "HSETNX");
        eq(r.hdel(k, "a", "nope"), 1L, "HDEL");
        eq(r.hgetAll(k), Map.of("b", "2"), "HGETALL after HDEL");
    }

    static void lists(Jedis r, String p) throws InterruptedException {
        String k = p + "l";
        String dst = p + "dst";
        r.del(k, dst, p + "blocking");
        eq(r.rpush(k, "a", "b", "c"), 3L, "RPUSH");
        eq(r.lpush(k, "z"), 4L, "LPUSH");
        eq(r.lrange(k, 0, -1), List.of("z", "a", "b", "c"), "LRANGE");
        eq(r.llen(k), 4L, "LLEN");
        eq(r.lindex(k, 1), "a", "LINDEX");
        eq(r.lset(k, 1, "A"), "OK", "LSET");
        eq(r.linsert(k, ListPosition.BEFORE, "b", "ab"), 5L, "LINSERT");
        eq(r.lpos(k, "b"), 3L, "LPOS");
        eq(r.lrem(k, 0, "ab"), 1L, "LREM");
        eq(r.lpop(k), "z", "LPOP");
        eq(r.rpop(k, 2), List.of("c", "b"), "RPOP count");
        eq(r.lmove(k, dst, ListDirection.LEFT, ListDirection.RIGHT), "A", "LMOVE");
        eq(r.exists(k), false, "an emptied list is gone");
        eq(r.ltrim(dst, 0, 0), "OK", "LTRIM");
        // A blocking pop on one connection, woken by a push on another.
        AtomicReference<Object> popped = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try (Jedis blocker = connect()) {
                popped.set(blocker.blpop(5, p + "blocking"));
            } catch (Exception e) {
                popped.set(e);
            }
        });
        t.start();
        Thread.sleep(300);
        r.rpush(p + "blocking", "wake");
        t.join(TIMEOUT_MS);
        check(!t.isAlive(), "BLPOP did not return");
        eq(popped.get(), List.of(p + "blocking", "wake"), "BLPOP woken by RPUSH");
        KeyValue<String, String> none = r.blpop(0.1, p + "empty");
        eq(none, null, "BLPOP timeout");
    }

    static void sets(Jedis r, String p) {
        String a = p + "a", b = p + "b", d = p + "d";
        r.del(a, b, d);
        eq(r.sadd(a, "x", "y", "z"), 3L, "SADD");
        eq(r.sadd(b, "y", "z", "w"), 3L, "SADD");
        eq(new TreeSet<>(r.smembers(a)), set("x", "y", "z"), "SMEMBERS");
        eq(r.sismember(a, "x"), true, "SISMEMBER");
        eq(r.smismember(a, "x", "nope"), List.of(true, false), "SMISMEMBER");
        eq(r.scard(a), 3L, "SCARD");
        eq(new TreeSet<>(r.sinter(a, b)), set("y", "z"), "SINTER");
        eq(new TreeSet<>(r.sunion(a, b)), set("w", "x", "y", "z"), "SUNION");
        eq(new TreeSet<>(r.sdiff(a, b)), set("x"), "SDIFF");
        eq(r.sdiffstore(d, a, b), 1L, "SDIFFSTORE");
        eq(r.smove(a, b, "x"), 1L, "SMOVE");
        eq(r.srem(a, "y", "nope"), 1L, "SREM");
        eq(r.spop(a), "z", "SPOP of the last member");
        eq(r.exists(a), false, "an emptied set is gone");
    }

    static void sortedSets(Jedis r, String p) {
        String k = p + "z", o = p + "o";
        r.del(k, o, p + "u");
        eq(r.zadd(k, Map.of("a", 1.0, "b", 2.0, "c", 3.5)), 3L, "ZADD");
        eq(r.zscore(k, "c"), 3.5, "ZSCORE");
        eq(r.zcard(k), 3L, "ZCARD");
        eq(r.zrange(k, 0, -1), List.of("a", "b", "c"), "ZRANGE");
        List<String> scored = new ArrayList<>();
        for (Tuple t : r.zrangeWithScores(k, 0, -1)) {
            scored.add(t.getElement() + "=" + t.getScore());
        }
        eq(scored, List.of("a=1.0", "b=2.0", "c=3.5"), "ZRANGE WITHSCORES");
        eq(r.zrevrange(k, 0, 0), List.of("c"), "ZREVRANGE");
        eq(r.zrangeByScore(k, "2", "+inf"), List.of("b", "c"), "ZRANGEBYSCORE");
        eq(r.zrank(k, "b"), 1L, "ZRANK");
        eq(r.zincrby(k, 10, "a"), 11.0, "ZINCRBY");
        eq(r.zcount(k, "-inf", "5"), 2L, "ZCOUNT");
        eq(r.zadd(k, 0, "b", ZAddParams.zAddParams().xx().ch()), 1L, "ZADD XX CH");
        Tuple min = r.zpopmin(k);
        eq(min == null ? null : min.getElement() + "=" + min.getScore(), "b=0.0", "ZPOPMIN");
        eq(r.zadd(o, 1, "c"), 1L, "ZADD");
        eq(r.zunionstore(p + "u", k, o), 2L, "ZUNIONSTORE");
        eq(r.zrem(k, "a", "nope"), 1L, "ZREM");
        r.del(p + "u");
    }

    static void multiExec(Jedis r, String p) {
        String k = p + "k", w = p + "w";
        r.del(k, w, p + "h");
        Transaction t = r.multi();
        t.set(k, "1");
        t.incr(k);
        t.get(k);
        t.hset(p + "h", "f", "v");
        t.del(p + "h");
        eq(t.exec(), List.of("OK", 2L, "2", 1L, 1L), "MULTI/EXEC");
        // WATCH: a change by another client makes EXEC fail.
        try (Jedis other = connect(); Jedis watcher = connect()) {
            watcher.watch(w);
            other.set(w, "changed");
            Transaction tw = watcher.multi();
            tw.set(w, "mine");
            List<Object> res = tw.exec();
            check(res == null || res.isEmpty(), "EXEC after a watched key changed did not abort: " + res);
        }
        eq(r.get(w), "changed", "the aborted transaction wrote nothing");
        // An error inside EXEC does not undo the others.
        Transaction te = r.multi();
        te.set(k, "text");
        te.incr(k);
        te.set(w, "after");
        List<Object> out = te.exec();
        eq(out.size(), 3, "EXEC replies");
        eq(out.get(0), "OK", "reply 1");
        check(out.get(1) instanceof JedisDataException, "reply 2 is an error: " + out.get(1));
        eq(out.get(2), "OK", "reply 3");
    }

    static void pubsub(Jedis r, String p) throws Exception {
        String ch = p + "ch";
        BlockingQueue<String> events = new LinkedBlockingQueue<>();
        CountDownLatch subscribed = new CountDownLatch(2);
        JedisPubSub listener = new JedisPubSub() {
            @Override
            public void onMessage(String channel, String message) {
                events.add("message " + channel + " " + message);
            }

            @Override
            public void onPMessage(String pattern, String channel, String message) {
                events.add("pmessage " + channel + " " + message);
            }

            @Override
            public void onSubscribe(String channel, int count) {
                subscribed.countDown();
            }

            @Override
            public void onPSubscribe(String pattern, int count) {
                subscribed.countDown();
            }
        };
        AtomicReference<Exception> failure = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try (Jedis sub = connect()) {
                sub.subscribe(listener, ch);
            } catch (Exception e) {
                failure.set(e);
                subscribed.countDown();
                subscribed.countDown();
            }
        });
        t.start();
        // The second subscription is sent once the first is confirmed (JedisPubSub needs a
        // connection in subscribed state).
        long deadline = System.currentTimeMillis() + TIMEOUT_MS;
        while (subscribed.getCount() == 2 && System.currentTimeMillis() < deadline) {
            Thread.sleep(10);
        }
        if (failure.get() != null) {
            throw failure.get();
        }
        check(subscribed.getCount() < 2, "SUBSCRIBE was not confirmed");
        listener.psubscribe(p + "pat*");
        check(subscribed.await(TIMEOUT_MS, TimeUnit.MILLISECONDS), "PSUBSCRIBE was not confirmed");
        eq(r.publish(ch, "hello"), 1L, "PUBLISH receivers");
        eq(events.poll(5, TimeUnit.SECONDS), "message " + ch + " hello", "message delivered");
        eq(r.publish(p + "pattern", "p"), 1L, "PUBLISH to a pattern");
        eq(events.poll(5, TimeUnit.SECONDS), "pmessage " + p + "pattern p", "pmessage delivered");
        eq(r.pubsubNumSub(ch), Map.of(ch, 1L), "PUBSUB NUMSUB");
        listener.punsubscribe();
        listener.unsubscribe();
        t.join(TIMEOUT_MS);
        check(!t.isAlive(), "the subscriber did not leave subscribed mode after UNSUBSCRIBE");
        if (failure.get() != null) {
            throw failure.get();
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: Smoke HOST PORT");
            System.exit(2);
        }
        host = args[0];
        port = Integer.parseInt(args[1]);
        Object[][] families = {
            {"strings", (Check) Smoke::strings},
            {"keys/expiry", (Check) Smoke::keysExpiry},
            {"hashes", (Check) Smoke::hashes},
            {"lists", (Check) Smoke::lists},
            {"sets", (Check) Smoke::sets},
            {"sorted sets", (Check) Smoke::sortedSets},
            {"multi/exec", (Check) Smoke::multiExec},
            {"pub/sub", (Check) Smoke::pubsub},
        };
        Jedis r;
        try {
            r = connect();
            r.ping();
            String jar = Jedis.class.getProtectionDomain().getCodeSource().getLocation().getPath();
            System.out.println("# Jedis " + jar.substring(jar.lastIndexOf('/') + 1) + ", default settings");
        } catch (Exception e) {
            for (Object[] f : families) {
                System.out.println("FAIL " + f[0] + ": cannot connect: " + e);
            }
            System.exit(1);
            return;
        }
        int failed = 0;
        for (Object[] f : families) {
            String name = (String) f[0];
            try {
                ((Check) f[1]).run(r, "smoke:java:" + name + ":");
                System.out.println("PASS " + name);
            } catch (Throwable e) {
                failed++;
                String why = String.valueOf(e.getMessage()).split("\n")[0];
                System.out.println("FAIL " + name + ": " + e.getClass().getSimpleName() + ": " + why);
                r.close();
                r = connect(); // a fresh connection: the failure may have left this one mid-reply
            }
        }
        r.close();
        System.exit(failed == 0 ? 0 : 1);
    }
}
