/*
 * YCSB binding for a RESP (Redis protocol) server over Jedis 4: Kavach's `kavach serve` and
 * Redis 7 alike, so both sides of bench/ycsb/run.sh run the very same client code.
 *
 * One YCSB record is one hash: key -> {field0: value, field1: value, ...}.
 *   read    HGETALL key             (all fields requested: YCSB's readallfields=true)
 *           HMGET key f1 f2 ...      (a subset of fields)
 *   insert  HSET key f v [f v ...]   (or HMSET with kavach.write=hmset)
 *   update  HSET key f v [f v ...]   (only the fields YCSB updates)
 *   delete  DEL key
 *   scan    NOT_IMPLEMENTED, unless kavach.index=true: then insert/delete also maintain a sorted
 *           set "_indices" (ZADD/ZREM, score = key's hash, as YCSB's own redis binding does) and
 *           scan is ZRANGEBYSCORE + HGETALL/HMGET per key. Workloads A, B, C never scan.
 *
 * YCSB creates one DB object per client thread, so each thread owns one connection (no pool).
 * Properties (-p NAME=VALUE):
 *   redis.host       default 127.0.0.1
 *   redis.port       default 6379
 *   redis.timeout    socket and connect timeout in ms, default 10000
 *   kavach.write     hset (default) or hmset
 *   kavach.index     false (default) or true, see scan above
 *   kavach.setinfo   true (default: Jedis 4.4 sends CLIENT SETINFO LIB-NAME/LIB-VER on
 *                    connect) or false (send nothing on connect)
 * A read of a missing key returns NOT_FOUND; a failed call returns ERROR and the connection is
 * reopened on the next call (YCSB counts both per operation in its "Return=" lines).
 */
package site.ycsb.db.kavach;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.Vector;

import redis.clients.jedis.ClientSetInfoConfig;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.exceptions.JedisException;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;
import site.ycsb.StringByteIterator;

public class KavachJedisClient extends DB {
  private static final String INDEX_KEY = "_indices";

  private HostAndPort address;
  private DefaultJedisClientConfig config;
  private Jedis jedis;
  private boolean useHmset;
  private boolean useIndex;

  @Override
  public void init() throws DBException {
    Properties p = getProperties();
    String host = p.getProperty("redis.host", "127.0.0.1");
    int port;
    int timeout;
    try {
      port = Integer.parseInt(p.getProperty("redis.port", "6379"));
      timeout = Integer.parseInt(p.getProperty("redis.timeout", "10000"));
    } catch (NumberFormatException e) {
      throw new DBException("redis.port and redis.timeout must be integers: " + e.getMessage());
    }
    String write = p.getProperty("kavach.write", "hset");
    if (!write.equals("hset") && !write.equals("hmset")) {
      throw new DBException("kavach.write must be hset or hmset, got '" + write + "'");
    }
    useHmset = write.equals("hmset");
    useIndex = Boolean.parseBoolean(p.getProperty("kavach.index", "false"));
    boolean setinfo = Boolean.parseBoolean(p.getProperty("kavach.setinfo", "true"));
    address = new HostAndPort(host, port);
    config = DefaultJedisClientConfig.builder()
        .connectionTimeoutMillis(timeout)
        .socketTimeoutMillis(timeout)
        .clientSetInfoConfig(setinfo ? ClientSetInfoConfig.DEFAULT : ClientSetInfoConfig.DISABLED)
        .build();
    try {
      connection().ping();
    } catch (JedisException e) {
      throw new DBException("cannot reach the server at " + host + ":" + port + ": " + e.getMessage(), e);
    }
  }

  @Override
  public void cleanup() throws DBException {
    closeQuietly();
  }

  private Jedis connection() {
    if (jedis == null) {
      jedis = new Jedis(address, config);
    }
    return jedis;
  }

  private void closeQuietly() {
    if (jedis != null) {
      try {
        jedis.close();
      } catch (JedisException e) {
        // closing a broken connection: nothing to do
      }
      jedis = null;
    }
  }

  /** A failed call: drop the connection (reopened by the next call) and count an ERROR. */
  private Status failed(JedisException e) {
    closeQuietly();
    return Status.ERROR;
  }

  private static double hash(String key) {
    return key.hashCode();
  }

  private Status fetch(String key, Set<String> fields, Map<String, ByteIterator> result) {
    Jedis j = connection();
    if (fields == null) {
      Map<String, String> all = j.hgetAll(key);
      if (all.isEmpty()) {
        return Status.NOT_FOUND;
      }
      StringByteIterator.putAllAsByteIterators(result, all);
      return Status.OK;
    }
    String[] names = fields.toArray(new String[0]);
    List<String> values = j.hmget(key, names);
    boolean any = false;
    for (int i = 0; i < names.length; i++) {
      String v = values.get(i);
      if (v != null) {
        result.put(names[i], new StringByteIterator(v));
        any = true;
      }
    }
    return any || names.length == 0 ? Status.OK : Status.NOT_FOUND;
  }

  @Override
  public Status read(String table, String key, Set<String> fields, Map<String, ByteIterator> result) {
    try {
      return fetch(key, fields, result);
    } catch (JedisException e) {
      return failed(e);
    }
  }

  private void write(String key, Map<String, ByteIterator> values) {
    Map<String, String> strings = StringByteIterator.getStringMap(values);
    if (useHmset) {
      connection().hmset(key, strings);
    } else {
      connection().hset(key, strings);
    }
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    try {
      write(key, values);
      if (useIndex) {
        connection().zadd(INDEX_KEY, hash(key), key);
      }
      return Status.OK;
    } catch (JedisException e) {
      return failed(e);
    }
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    try {
      write(key, values);
      return Status.OK;
    } catch (JedisException e) {
      return failed(e);
    }
  }

  @Override
  public Status delete(String table, String key) {
    try {
      long n = connection().del(key);
      if (useIndex) {
        connection().zrem(INDEX_KEY, key);
      }
      return n == 0 ? Status.NOT_FOUND : Status.OK;
    } catch (JedisException e) {
      return failed(e);
    }
  }

  @Override
  public Status scan(String table, String startkey, int recordcount, Set<String> fields,
                     Vector<HashMap<String, ByteIterator>> result) {
    if (!useIndex) {
      return Status.NOT_IMPLEMENTED;
    }
    try {
      List<String> keys = connection().zrangeByScore(INDEX_KEY, hash(startkey),
          Double.POSITIVE_INFINITY, 0, recordcount);
      List<HashMap<String, ByteIterator>> rows = new ArrayList<>(keys.size());
      for (String k : keys) {
        HashMap<String, ByteIterator> row = new HashMap<>();
        fetch(k, fields, row);
        rows.add(row);
      }
      result.addAll(rows);
      return Status.OK;
    } catch (JedisException e) {
      return failed(e);
    }
  }
}
