// node-redis smoke program: one check per command family, with the client's default settings
// (node-redis 5+ opens with HELLO 3, so RESP3, and sends CLIENT SETINFO).
// Usage: node smoke.js HOST PORT, with REDIS_MODULE naming the installed `redis` package.
//
// Prints `PASS <family>` or `FAIL <family>: <why>` per family and exits 1 if any failed. Each
// family uses its own keys (prefix `smoke:node:<family>:`) and cleans them first; every wait is
// bounded (withTimeout), so a reply that never comes fails instead of hanging.
'use strict';

const assert = require('node:assert/strict');
const { createClient } = require(process.env.REDIS_MODULE || 'redis');

const [host, portText] = process.argv.slice(2);
const port = Number(portText);
const TIMEOUT_MS = 10000;

async function connect() {
  // node-redis's defaults: only where to connect. Waits are bounded by withTimeout.
  const c = createClient({ socket: { host, port } });
  c.on('error', () => {}); // failures surface through the commands' promises
  await withTimeout(c.connect(), 'connect');
  return c;
}

function withTimeout(promise, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no reply in ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
    }),
  ]).finally(() => clearTimeout(timer));
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const sorted = (xs) => [...xs].map(String).sort();
const eq = (got, want, what) => assert.deepStrictEqual(got, want, what);

async function strings(r, p) {
  await r.del([p + 's', p + 'n', p + 'f', p + 'm1', p + 'm2']);
  eq(await r.ping(), 'PONG', 'PING');
  eq(await r.set(p + 's', 'hello'), 'OK', 'SET');
  eq(await r.get(p + 's'), 'hello', 'GET');
  eq(await r.append(p + 's', ' world'), 11, 'APPEND');
  eq(await r.strLen(p + 's'), 11, 'STRLEN');
  eq(await r.getRange(p + 's', 0, 4), 'hello', 'GETRANGE');
  eq(await r.setRange(p + 's', 6, 'W'), 11, 'SETRANGE');
  eq(await r.set(p + 's', 'x', { condition: 'NX' }), null, 'SET NX on an existing key');
  eq(await r.set(p + 's', 'new', { GET: true }), 'hello World', 'SET GET');
  eq(await r.getSet(p + 's', 'v2'), 'new', 'GETSET');
  eq(await r.incr(p + 'n'), 1, 'INCR');
  eq(await r.incrBy(p + 'n', 41), 42, 'INCRBY');
  eq(await r.decr(p + 'n'), 41, 'DECR');
  eq(Number(await r.incrByFloat(p + 'f', 1.5)), 1.5, 'INCRBYFLOAT');
  eq(await r.mSet({ [p + 'm1']: 'a', [p + 'm2']: 'b' }), 'OK', 'MSET');
  eq(await r.mGet([p + 'm1', p + 'm2', p + 'missing']), ['a', 'b', null], 'MGET');
  eq(await r.setNX(p + 'm1', 'z'), 0, 'SETNX');
  eq(await r.getDel(p + 'm1'), 'a', 'GETDEL');
  eq(await r.get(p + 'm1'), null, 'GET after GETDEL');
}

async function keysExpiry(r, p) {
  await r.del([p + 'a', p + 'b', p + 'c']);
  await r.set(p + 'a', '1');
  eq(await r.exists([p + 'a', p + 'missing']), 1, 'EXISTS');
  eq(await r.type(p + 'a'), 'string', 'TYPE');
  eq(await r.expire(p + 'a', 100), 1, 'EXPIRE');
  const ttl = await r.ttl(p + 'a');
  assert.ok(ttl >= 90 && ttl <= 100, `TTL: got ${ttl}`);
  const pttl = await r.pTTL(p + 'a');
  assert.ok(pttl >= 90000 && pttl <= 100000, `PTTL: got ${pttl}`);
  eq(await r.persist(p + 'a'), 1, 'PERSIST');
  eq(await r.ttl(p + 'a'), -1, 'TTL after PERSIST');
  eq(await r.rename(p + 'a', p + 'b'), 'OK', 'RENAME');
  eq(await r.exists(p + 'a'), 0, 'EXISTS after RENAME');
  eq(sorted(await r.keys(p + '*')), [p + 'b'], 'KEYS');
  const seen = new Set();
  let cursor = '0';
  do {
    const page = await r.scan(cursor, { MATCH: p + '*', COUNT: 10 });
    cursor = String(page.cursor);
    for (const k of page.keys) seen.add(k);
  } while (cursor !== '0');
  eq(sorted(seen), [p + 'b'], 'SCAN');
  await r.set(p + 'c', 'short', { expiration: { type: 'PX', value: 150 } });
  await sleep(400);
  eq(await r.get(p + 'c'), null, 'GET after PX expiry');
  eq(await r.del([p + 'b', p + 'missing']), 1, 'DEL');
}

async function hashes(r, p) {
  const k = p + 'h';
  await r.del(k);
  eq(await r.hSet(k, { a: '1', b: '2' }), 2, 'HSET');
  eq(await r.hGet(k, 'a'), '1', 'HGET');
  eq(await r.hmGet(k, ['a', 'nope']), ['1', null], 'HMGET');
  eq({ ...(await r.hGetAll(k)) }, { a: '1', b: '2' }, 'HGETALL');
  eq(await r.hExists(k, 'b'), 1, 'HEXISTS');
  eq(await r.hLen(k), 2, 'HLEN');
  eq(await r.hIncrBy(k, 'a', 5), 6, 'HINCRBY');
  eq(Number(await r.hIncrByFloat(k, 'a', 0.5)), 6.5, 'HINCRBYFLOAT');
  eq(sorted(await r.hKeys(k)), ['a', 'b'], 'HKEYS');
  eq(sorted(await r.hVals(k)), ['2', '6.5'], 'HVALS');
  eq(await r.hSetNX(k, 'a', '9'), 0, 'HSETNX');
  eq(await r.hDel(k, ['a', 'nope']), 1, 'HDEL');
  eq({ ...(await r.hGetAll(k)) }, { b: '2' }, 'HGETALL after HDEL');
}

async function lists(r, p) {
  const k = p + 'l';
  const dst = p + 'dst';
  await r.del([k, dst, p + 'blocking']);
  eq(await r.rPush(k, ['a', 'b', 'c']), 3, 'RPUSH');
  eq(await r.lPush(k, 'z'), 4, 'LPUSH');
  eq(await r.lRange(k, 0, -1), ['z', 'a', 'b', 'c'], 'LRANGE');
  eq(await r.lLen(k), 4, 'LLEN');
  eq(await r.lIndex(k, 1), 'a', 'LINDEX');
  eq(await r.lSet(k, 1, 'A'), 'OK', 'LSET');
  eq(await r.lInsert(k, 'BEFORE', 'b', 'ab'), 5, 'LINSERT');
  eq(await r.lPos(k, 'b'), 3, 'LPOS');
  eq(await r.lRem(k, 0, 'ab'), 1, 'LREM');
  eq(await r.lPop(k), 'z', 'LPOP');
  eq(await r.rPopCount(k, 2), ['c', 'b'], 'RPOP count');
  eq(await r.lMove(k, dst, 'LEFT', 'RIGHT'), 'A', 'LMOVE');
  eq(await r.exists(k), 0, 'an emptied list is gone');
  eq(await r.lTrim(dst, 0, 0), 'OK', 'LTRIM');
  // A blocking pop on one connection, woken by a push on another.
  const blocker = await connect();
  try {
    const popped = blocker.blPop(p + 'blocking', 5);
    await sleep(300);
    await r.rPush(p + 'blocking', 'wake');
    eq(await withTimeout(popped, 'BLPOP'), { key: p + 'blocking', element: 'wake' }, 'BLPOP woken by RPUSH');
    eq(await withTimeout(blocker.blPop(p + 'empty', 0.1), 'BLPOP'), null, 'BLPOP timeout');
  } finally {
    blocker.destroy();
  }
}

async function sets(r, p) {
  const [a, b, d] = [p + 'a', p + 'b', p + 'd'];
  await r.del([a, b, d]);
  eq(await r.sAdd(a, ['x', 'y', 'z']), 3, 'SADD');
  eq(await r.sAdd(b, ['y', 'z', 'w']), 3, 'SADD');
  eq(sorted(await r.sMembers(a)), ['x', 'y', 'z'], 'SMEMBERS');
  eq(await r.sIsMember(a, 'x'), 1, 'SISMEMBER');
  eq(await r.smIsMember(a, ['x', 'nope']), [1, 0], 'SMISMEMBER');
  eq(await r.sCard(a), 3, 'SCARD');
  eq(sorted(await r.sInter([a, b])), ['y', 'z'], 'SINTER');
  eq(sorted(await r.sUnion([a, b])), ['w', 'x', 'y', 'z'], 'SUNION');
  eq(sorted(await r.sDiff([a, b])), ['x'], 'SDIFF');
  eq(await r.sDiffStore(d, [a, b]), 1, 'SDIFFSTORE');
  eq(await r.sMove(a, b, 'x'), 1, 'SMOVE');
  eq(await r.sRem(a, ['y', 'nope']), 1, 'SREM');
  eq(await r.sPop(a), 'z', 'SPOP of the last member');
  eq(await r.exists(a), 0, 'an emptied set is gone');
}

async function sortedSets(r, p) {
  const [k, o] = [p + 'z', p + 'o'];
  await r.del([k, o, p + 'u']);
  eq(await r.zAdd(k, [{ score: 1, value: 'a' }, { score: 2, value: 'b' }, { score: 3.5, value: 'c' }]), 3, 'ZADD');
  eq(Number(await r.zScore(k, 'c')), 3.5, 'ZSCORE');
  eq(await r.zCard(k), 3, 'ZCARD');
  eq(await r.zRange(k, 0, -1), ['a', 'b', 'c'], 'ZRANGE');
  eq(
    (await r.zRangeWithScores(k, 0, -1)).map((x) => [x.value, Number(x.score)]),
    [['a', 1], ['b', 2], ['c', 3.5]],
    'ZRANGE WITHSCORES',
  );
  eq(await r.zRange(k, 0, 0, { REV: true }), ['c'], 'ZRANGE REV');
  eq(await r.zRangeByScore(k, 2, '+inf'), ['b', 'c'], 'ZRANGEBYSCORE');
  eq(await r.zRank(k, 'b'), 1, 'ZRANK');
  eq(Number(await r.zIncrBy(k, 10, 'a')), 11, 'ZINCRBY');
  eq(await r.zCount(k, '-inf', 5), 2, 'ZCOUNT');
  eq(await r.zAdd(k, { score: 0, value: 'b' }, { XX: true, CH: true }), 1, 'ZADD XX CH');
  const min = await r.zPopMin(k);
  eq([min.value, Number(min.score)], ['b', 0], 'ZPOPMIN');
  eq(await r.zAdd(o, { score: 1, value: 'c' }), 1, 'ZADD');
  eq(await r.zUnionStore(p + 'u', [k, o]), 2, 'ZUNIONSTORE');
  eq(await r.zRem(k, ['a', 'nope']), 1, 'ZREM');
  await r.del(p + 'u');
}

async function multiExec(r, p) {
  const [k, w] = [p + 'k', p + 'w'];
  await r.del([k, w, p + 'h']);
  const out = await r.multi().set(k, '1').incr(k).get(k).hSet(p + 'h', 'f', 'v').del(p + 'h').exec();
  eq(out, ['OK', 2, '2', 1, 1], 'MULTI/EXEC');
  // WATCH: a change by another client makes EXEC fail.
  const other = await connect();
  const watcher = await connect();
  try {
    await watcher.watch(w);
    await other.set(w, 'changed');
    let aborted = false;
    try {
      const res = await watcher.multi().set(w, 'mine').exec();
      aborted = res === null;
    } catch (e) {
      aborted = e.constructor.name === 'WatchError';
    }
    assert.ok(aborted, 'EXEC after a watched key changed did not abort');
    eq(await r.get(w), 'changed', 'the aborted transaction wrote nothing');
  } finally {
    other.destroy();
    watcher.destroy();
  }
  // An error inside EXEC does not undo the others.
  let mixed;
  try {
    await r.multi().set(k, 'text').incr(k).set(w, 'after').exec();
    assert.fail('EXEC with a failing command did not report it');
  } catch (e) {
    if (!Array.isArray(e.replies)) throw e;
    mixed = e.replies; // MultiErrorReply: every reply, the errors among them
  }
  eq(mixed[0], 'OK', 'reply 1');
  assert.ok(mixed[1] instanceof Error, 'reply 2 is an error');
  eq(mixed[2], 'OK', 'reply 3');
}

async function pubsub(r, p) {
  const ch = p + 'ch';
  const sub = await connect();
  try {
    const messages = [];
    let wake = () => {};
    const next = () => new Promise((resolve) => {
      if (messages.length) return resolve(messages.shift());
      wake = () => resolve(messages.shift());
    });
    const push = (m) => { messages.push(m); wake(); };
    await withTimeout(sub.subscribe(ch, (message, channel) => push(['message', channel, message])), 'SUBSCRIBE');
    await withTimeout(sub.pSubscribe(p + 'pat*', (message, channel) => push(['pmessage', channel, message])), 'PSUBSCRIBE');
    eq(await r.publish(ch, 'hello'), 1, 'PUBLISH receivers');
    eq(await withTimeout(next(), 'message'), ['message', ch, 'hello'], 'message delivered');
    eq(await r.publish(p + 'pattern', 'p'), 1, 'PUBLISH to a pattern');
    eq(await withTimeout(next(), 'pmessage'), ['pmessage', p + 'pattern', 'p'], 'pmessage delivered');
    const numsub = await r.pubSubNumSub(ch);
    eq(Number(numsub[ch] ?? numsub.get?.(ch)), 1, 'PUBSUB NUMSUB');
    await withTimeout(sub.unsubscribe(ch), 'UNSUBSCRIBE');
    await withTimeout(sub.pUnsubscribe(), 'PUNSUBSCRIBE');
  } finally {
    sub.destroy();
  }
}

const FAMILIES = [
  ['strings', strings],
  ['keys/expiry', keysExpiry],
  ['hashes', hashes],
  ['lists', lists],
  ['sets', sets],
  ['sorted sets', sortedSets],
  ['multi/exec', multiExec],
  ['pub/sub', pubsub],
];

async function main() {
  let r;
  try {
    r = await connect();
    const version = require((process.env.REDIS_MODULE || 'redis') + '/package.json').version;
    console.log(`# node-redis ${version}, default settings`);
  } catch (e) {
    for (const [name] of FAMILIES) console.log(`FAIL ${name}: cannot connect: ${e.message}`);
    return 1;
  }
  let failed = 0;
  for (const [name, check] of FAMILIES) {
    try {
      await withTimeout(check(r, `smoke:node:${name}:`), name);
      console.log(`PASS ${name}`);
    } catch (e) {
      failed += 1;
      console.log(`FAIL ${name}: ${String(e.message).split('\n')[0]}`);
      r.destroy();
      try {
        r = await connect();
      } catch (e2) {
        console.log(`# cannot reconnect: ${e2.message}`);
      }
    }
  }
  r.destroy();
  return failed ? 1 : 0;
}

main().then((code) => process.exit(code), (e) => {
  console.log(`FAIL internal: ${e.stack}`);
  process.exit(1);
});
