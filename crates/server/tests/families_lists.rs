//! The lists commands over TCP on the reference keyspace: every reply byte for byte as Redis
//! 7.0.15 gives it (the tables below were recorded from a real `redis-server` 7.0.15, in RESP2
//! and RESP3), argument errors, WRONGTYPE, and the blocking commands when there is something
//! to take. (Parking when there is nothing is the event loop's part; the handlers' `Block`
//! action is unit-tested in `src/command/lists.rs`.)

mod support;

use support::{Client, TestServer, expect, show};

/// The RESP3 reply is the RESP2 one.
const SAME: &str = "";

/// `(command, RESP2 reply, RESP3 reply or SAME)`, run in order on one empty keyspace.
const CASES: &[(&str, &str, &str)] = &[
    ("rpush l a b c", ":3\r\n", SAME),
    ("lpop l 0", "*0\r\n", SAME),
    ("lpop nokey 0", "*-1\r\n", "_\r\n"),
    (
        "lpop l -1",
        "-ERR value is out of range, must be positive\r\n",
        SAME,
    ),
    (
        "lpop l x",
        "-ERR value is out of range, must be positive\r\n",
        SAME,
    ),
    (
        "lpop l 1 2",
        "-ERR wrong number of arguments for 'lpop' command\r\n",
        SAME,
    ),
    ("lpop nokey 2", "*-1\r\n", "_\r\n"),
    ("lpop l 2", "*2\r\n$1\r\na\r\n$1\r\nb\r\n", SAME),
    ("lpop l 5", "*1\r\n$1\r\nc\r\n", SAME),
    ("lpop l", "$-1\r\n", "_\r\n"),
    ("lpushx l a", ":0\r\n", SAME),
    ("lpop nokey", "$-1\r\n", "_\r\n"),
    ("rpush zl a b a a", ":4\r\n", SAME),
    (
        "lpos zl a RANK -9223372036854775808 COUNT 1",
        "*3\r\n:3\r\n:2\r\n:0\r\n",
        SAME,
    ),
    (
        "lpos zl a RANK -9223372036854775807 COUNT 0",
        "*0\r\n",
        SAME,
    ),
    ("rpush one x", ":1\r\n", SAME),
    ("lmove one one left right", "$1\r\nx\r\n", SAME),
    ("lrange one 0 -1", "*1\r\n$1\r\nx\r\n", SAME),
    ("rpoplpush one one", "$1\r\nx\r\n", SAME),
    ("rpush src only", ":1\r\n", SAME),
    ("lmove src dst right left", "$4\r\nonly\r\n", SAME),
    ("llen src", ":0\r\n", SAME),
    ("lrange dst 0 -1", "*1\r\n$4\r\nonly\r\n", SAME),
    (
        "rpush",
        "-ERR wrong number of arguments for 'rpush' command\r\n",
        SAME,
    ),
    (
        "rpush l1",
        "-ERR wrong number of arguments for 'rpush' command\r\n",
        SAME,
    ),
    ("lpush l1 a b c", ":3\r\n", SAME),
    ("rpush l1 d e", ":5\r\n", SAME),
    (
        "lrange l1 0 -1",
        "*5\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n$1\r\nd\r\n$1\r\ne\r\n",
        SAME,
    ),
    (
        "lrange l1 -100 100",
        "*5\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n$1\r\nd\r\n$1\r\ne\r\n",
        SAME,
    ),
    ("lrange l1 3 1", "*0\r\n", SAME),
    (
        "lrange l1 x 1",
        "-ERR value is not an integer or out of range\r\n",
        SAME,
    ),
    ("lrange nokey 0 -1", "*0\r\n", SAME),
    ("lrange l1 -2 -1", "*2\r\n$1\r\nd\r\n$1\r\ne\r\n", SAME),
    ("lrange l1 5 10", "*0\r\n", SAME),
    ("llen l1", ":5\r\n", SAME),
    ("llen nokey", ":0\r\n", SAME),
    ("lpushx nokey a", ":0\r\n", SAME),
    ("rpushx nokey a", ":0\r\n", SAME),
    ("lpushx l1 x y", ":7\r\n", SAME),
    ("rpushx l1 z", ":8\r\n", SAME),
    ("lindex l1 0", "$1\r\ny\r\n", SAME),
    ("lindex l1 -1", "$1\r\nz\r\n", SAME),
    ("lindex l1 100", "$-1\r\n", "_\r\n"),
    (
        "lindex l1 x",
        "-ERR value is not an integer or out of range\r\n",
        SAME,
    ),
    ("lindex nokey 0", "$-1\r\n", "_\r\n"),
    ("lindex nokey x", "$-1\r\n", "_\r\n"),
    ("lset nokey 0 a", "-ERR no such key\r\n", SAME),
    ("lset nokey x a", "-ERR no such key\r\n", SAME),
    (
        "lset l1 x a",
        "-ERR value is not an integer or out of range\r\n",
        SAME,
    ),
    ("lset l1 100 a", "-ERR index out of range\r\n", SAME),
    ("lset l1 -1 last", "+OK\r\n", SAME),
    ("lset l1 0 first", "+OK\r\n", SAME),
    (
        "lrange l1 0 -1",
        "*8\r\n$5\r\nfirst\r\n$1\r\nx\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n$1\r\nd\r\n$1\r\ne\r\n$4\r\nlast\r\n",
        SAME,
    ),
    (
        "lrem l1 x a",
        "-ERR value is not an integer or out of range\r\n",
        SAME,
    ),
    ("lrem nokey 1 a", ":0\r\n", SAME),
    ("rpush l2 a b a c a d a", ":7\r\n", SAME),
    ("lrem l2 2 a", ":2\r\n", SAME),
    (
        "lrange l2 0 -1",
        "*5\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\na\r\n$1\r\nd\r\n$1\r\na\r\n",
        SAME,
    ),
    ("lrem l2 -1 a", ":1\r\n", SAME),
    (
        "lrange l2 0 -1",
        "*4\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\na\r\n$1\r\nd\r\n",
        SAME,
    ),
    ("lrem l2 0 a", ":1\r\n", SAME),
    (
        "lrange l2 0 -1",
        "*3\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n",
        SAME,
    ),
    ("lrem l2 0 b", ":1\r\n", SAME),
    ("lrem l2 0 c", ":1\r\n", SAME),
    ("lrem l2 0 d", ":1\r\n", SAME),
    ("ltrim nokey 0 1", "+OK\r\n", SAME),
    (
        "ltrim l1 x 1",
        "-ERR value is not an integer or out of range\r\n",
        SAME,
    ),
    ("ltrim l1 1 -2", "+OK\r\n", SAME),
    (
        "lrange l1 0 -1",
        "*6\r\n$1\r\nx\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n$1\r\nd\r\n$1\r\ne\r\n",
        SAME,
    ),
    ("ltrim l1 5 1", "+OK\r\n", SAME),
    ("rpush l3 a b c d", ":4\r\n", SAME),
    ("ltrim l3 -2 100", "+OK\r\n", SAME),
    ("lrange l3 0 -1", "*2\r\n$1\r\nc\r\n$1\r\nd\r\n", SAME),
    ("ltrim l3 -100 -100", "+OK\r\n", SAME),
    ("lrange l3 0 -1", "*0\r\n", SAME),
    ("rpush l4 a b c", ":3\r\n", SAME),
    ("linsert l4 middle b x", "-ERR syntax error\r\n", SAME),
    ("linsert nokey before b x", ":0\r\n", SAME),
    ("linsert l4 before zz x", ":-1\r\n", SAME),
    ("linsert l4 BEFORE b x", ":4\r\n", SAME),
    ("linsert l4 after c y", ":5\r\n", SAME),
    ("linsert l4 After a z", ":6\r\n", SAME),
    (
        "lrange l4 0 -1",
        "*6\r\n$1\r\na\r\n$1\r\nz\r\n$1\r\nx\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\ny\r\n",
        SAME,
    ),
    (
        "linsert l4 before a",
        "-ERR wrong number of arguments for 'linsert' command\r\n",
        SAME,
    ),
    ("sadd s1 a", ":1\r\n", SAME),
    (
        "lpush s1 a",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "lrange s1 0 1",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "llen s1",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "lindex s1 0",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "linsert s1 before a b",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "lpos s1 a",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "lpop s1",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "lset s1 0 a",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "lrem s1 0 a",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "ltrim s1 0 1",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "lpushx s1 a",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    ("linsert nokey middle b x", "-ERR syntax error\r\n", SAME),
    ("rpush l5 a b c a b c a b c", ":9\r\n", SAME),
    ("lpos l5 a", ":0\r\n", SAME),
    ("lpos l5 b RANK 2", ":4\r\n", SAME),
    ("lpos l5 b RANK -1", ":7\r\n", SAME),
    ("lpos l5 b RANK -2", ":4\r\n", SAME),
    (
        "lpos l5 b RANK 0",
        "-ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list\r\n",
        SAME,
    ),
    (
        "lpos l5 b RANK x",
        "-ERR value is not an integer or out of range\r\n",
        SAME,
    ),
    ("lpos l5 b RANK -9223372036854775808", ":7\r\n", SAME),
    ("lpos l5 b RANK 9223372036854775807", "$-1\r\n", "_\r\n"),
    ("lpos l5 a COUNT 0", "*3\r\n:0\r\n:3\r\n:6\r\n", SAME),
    ("lpos l5 a COUNT 2", "*2\r\n:0\r\n:3\r\n", SAME),
    ("lpos l5 a COUNT 2 RANK -1", "*2\r\n:6\r\n:3\r\n", SAME),
    ("lpos l5 a COUNT 0 RANK 2", "*2\r\n:3\r\n:6\r\n", SAME),
    (
        "lpos l5 a COUNT -1",
        "-ERR COUNT can't be negative\r\n",
        SAME,
    ),
    (
        "lpos l5 a COUNT x",
        "-ERR COUNT can't be negative\r\n",
        SAME,
    ),
    ("lpos l5 a MAXLEN 4", ":0\r\n", SAME),
    ("lpos l5 a MAXLEN 4 COUNT 0", "*2\r\n:0\r\n:3\r\n", SAME),
    ("lpos l5 a MAXLEN 4 COUNT 0 RANK -1", "*1\r\n:6\r\n", SAME),
    ("lpos l5 c MAXLEN 2", "$-1\r\n", "_\r\n"),
    (
        "lpos l5 a MAXLEN -1",
        "-ERR MAXLEN can't be negative\r\n",
        SAME,
    ),
    (
        "lpos l5 a MAXLEN x",
        "-ERR MAXLEN can't be negative\r\n",
        SAME,
    ),
    ("lpos l5 zz", "$-1\r\n", "_\r\n"),
    ("lpos l5 zz COUNT 1", "*0\r\n", SAME),
    ("lpos nokey a", "$-1\r\n", "_\r\n"),
    ("lpos nokey a COUNT 1", "*0\r\n", SAME),
    (
        "lpos nokey a RANK 0",
        "-ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list\r\n",
        SAME,
    ),
    ("lpos l5 a COUNT", "-ERR syntax error\r\n", SAME),
    ("lpos l5 a foo 1", "-ERR syntax error\r\n", SAME),
    ("lpos nokey a foo", "-ERR syntax error\r\n", SAME),
    ("rpush m1 a b c", ":3\r\n", SAME),
    ("lmove m1 m2 left right", "$1\r\na\r\n", SAME),
    ("lmove m1 m2 LEFT LEFT", "$1\r\nb\r\n", SAME),
    ("lmove m1 m2 up left", "-ERR syntax error\r\n", SAME),
    ("lmove m1 m2 left up", "-ERR syntax error\r\n", SAME),
    ("lmove nokey m2 left left", "$-1\r\n", "_\r\n"),
    ("lrange m1 0 -1", "*1\r\n$1\r\nc\r\n", SAME),
    ("lrange m2 0 -1", "*2\r\n$1\r\nb\r\n$1\r\na\r\n", SAME),
    ("lmove m2 m2 left right", "$1\r\nb\r\n", SAME),
    ("lrange m2 0 -1", "*2\r\n$1\r\na\r\n$1\r\nb\r\n", SAME),
    (
        "lmove m1 s1 left left",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "lmove s1 m1 left left",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    ("lmove nokey s1 left left", "$-1\r\n", "_\r\n"),
    ("lmove m1 m1 right left", "$1\r\nc\r\n", SAME),
    ("lrange m1 0 -1", "*1\r\n$1\r\nc\r\n", SAME),
    ("rpoplpush m2 m1", "$1\r\nb\r\n", SAME),
    ("rpoplpush nokey m1", "$-1\r\n", "_\r\n"),
    (
        "rpoplpush m1 s1",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    ("lrange m1 0 -1", "*2\r\n$1\r\nb\r\n$1\r\nc\r\n", SAME),
    ("rpush p1 a b c d e", ":5\r\n", SAME),
    ("rpop p1", "$1\r\ne\r\n", SAME),
    ("rpop p1 2", "*2\r\n$1\r\nd\r\n$1\r\nc\r\n", SAME),
    ("rpop p1 0", "*0\r\n", SAME),
    ("rpop p1 10", "*2\r\n$1\r\nb\r\n$1\r\na\r\n", SAME),
    ("rpop p1", "$-1\r\n", "_\r\n"),
    ("rpop p1 2", "*-1\r\n", "_\r\n"),
    (
        "lmpop",
        "-ERR wrong number of arguments for 'lmpop' command\r\n",
        SAME,
    ),
    (
        "lmpop 1 p1",
        "-ERR wrong number of arguments for 'lmpop' command\r\n",
        SAME,
    ),
    (
        "lmpop 0 p1 left",
        "-ERR numkeys should be greater than 0\r\n",
        SAME,
    ),
    (
        "lmpop -1 p1 left",
        "-ERR numkeys should be greater than 0\r\n",
        SAME,
    ),
    (
        "lmpop x p1 left",
        "-ERR numkeys should be greater than 0\r\n",
        SAME,
    ),
    ("lmpop 2 p1 left", "-ERR syntax error\r\n", SAME),
    ("lmpop 1 p1 middle", "-ERR syntax error\r\n", SAME),
    ("lmpop 1 p1 left count", "-ERR syntax error\r\n", SAME),
    (
        "lmpop 1 p1 left count 0",
        "-ERR count should be greater than 0\r\n",
        SAME,
    ),
    (
        "lmpop 1 p1 left count -1",
        "-ERR count should be greater than 0\r\n",
        SAME,
    ),
    (
        "lmpop 1 p1 left count x",
        "-ERR count should be greater than 0\r\n",
        SAME,
    ),
    (
        "lmpop 1 p1 left count 1 count 1",
        "-ERR syntax error\r\n",
        SAME,
    ),
    ("lmpop 1 p1 left foo", "-ERR syntax error\r\n", SAME),
    ("lmpop 1 p1 left", "*-1\r\n", "_\r\n"),
    ("rpush p2 a b c", ":3\r\n", SAME),
    (
        "lmpop 2 p1 p2 left",
        "*2\r\n$2\r\np2\r\n*1\r\n$1\r\na\r\n",
        SAME,
    ),
    (
        "lmpop 2 p1 p2 right count 10",
        "*2\r\n$2\r\np2\r\n*2\r\n$1\r\nc\r\n$1\r\nb\r\n",
        SAME,
    ),
    ("lmpop 2 p1 p2 right count 10", "*-1\r\n", "_\r\n"),
    (
        "lmpop 2 s1 p2 right",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    ("rpush p3 x", ":1\r\n", SAME),
    (
        "lmpop 2 p3 s1 right",
        "*2\r\n$2\r\np3\r\n*1\r\n$1\r\nx\r\n",
        SAME,
    ),
    (
        "lmpop 9223372036854775807 p1 left",
        "-ERR syntax error\r\n",
        SAME,
    ),
    ("lmpop 3 p1 p2 left", "-ERR syntax error\r\n", SAME),
    (
        "blpop",
        "-ERR wrong number of arguments for 'blpop' command\r\n",
        SAME,
    ),
    (
        "blpop k",
        "-ERR wrong number of arguments for 'blpop' command\r\n",
        SAME,
    ),
    (
        "blpop nokey x",
        "-ERR timeout is not a float or out of range\r\n",
        SAME,
    ),
    ("blpop nokey -1", "-ERR timeout is negative\r\n", SAME),
    ("blpop nokey inf", "-ERR timeout is negative\r\n", SAME),
    (
        "blpop nokey nan",
        "-ERR timeout is not a float or out of range\r\n",
        SAME,
    ),
    ("blpop nokey 1e30", "-ERR timeout is negative\r\n", SAME),
    (
        "blpop s1 0.01",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    ("rpush b1 a b", ":2\r\n", SAME),
    ("blpop nokey b1 0", "*2\r\n$2\r\nb1\r\n$1\r\na\r\n", SAME),
    ("brpop nokey b1 0", "*2\r\n$2\r\nb1\r\n$1\r\nb\r\n", SAME),
    (
        "blpop b1 s1 0",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "brpoplpush b1 m1 x",
        "-ERR timeout is not a float or out of range\r\n",
        SAME,
    ),
    (
        "brpoplpush nokey m1 -1",
        "-ERR timeout is negative\r\n",
        SAME,
    ),
    ("blmove b1 m1 left up 0", "-ERR syntax error\r\n", SAME),
    (
        "blmove b1 m1 left left x",
        "-ERR timeout is not a float or out of range\r\n",
        SAME,
    ),
    ("rpush b1 a b c", ":3\r\n", SAME),
    (
        "blmpop 0 1 b1 left",
        "*2\r\n$2\r\nb1\r\n*1\r\n$1\r\na\r\n",
        SAME,
    ),
    (
        "blmpop x 1 b1 left",
        "-ERR timeout is not a float or out of range\r\n",
        SAME,
    ),
    (
        "blmpop 0 0 b1 left",
        "-ERR numkeys should be greater than 0\r\n",
        SAME,
    ),
    (
        "blmpop 0 1 b1 left count 0",
        "-ERR count should be greater than 0\r\n",
        SAME,
    ),
    ("blmpop 0 2 b1 left", "-ERR syntax error\r\n", SAME),
    (
        "blmpop 0 1 s1 left",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    ("rpush b2 a b c", ":3\r\n", SAME),
    (
        "blmpop 0 1 b2 left count 2",
        "*2\r\n$2\r\nb2\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n",
        SAME,
    ),
    (
        "blmpop 0.5 1 b2 right count 2",
        "*2\r\n$2\r\nb2\r\n*1\r\n$1\r\nc\r\n",
        SAME,
    ),
    // Extreme arguments.
    ("rpush el a b c a", ":4\r\n", SAME),
    (
        "lrange el -9223372036854775808 9223372036854775807",
        "*4\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\na\r\n",
        SAME,
    ),
    (
        "lrange el 9223372036854775807 -9223372036854775808",
        "*0\r\n",
        SAME,
    ),
    (
        "lrange el 9223372036854775808 1",
        "-ERR value is not an integer or out of range\r\n",
        SAME,
    ),
    ("lindex el -9223372036854775808", "$-1\r\n", "_\r\n"),
    ("lindex el 9223372036854775807", "$-1\r\n", "_\r\n"),
    ("lrem el -9223372036854775808 zz", ":0\r\n", SAME),
    (
        "lpos el a COUNT 9223372036854775807",
        "*2\r\n:0\r\n:3\r\n",
        SAME,
    ),
    (
        "lpos el a MAXLEN 9223372036854775807 RANK -9223372036854775807",
        "$-1\r\n",
        "_\r\n",
    ),
    ("lpos el a RANK -1 COUNT 0 MAXLEN 1", "*1\r\n:3\r\n", SAME),
    (
        "lmpop 1 el left count 9223372036854775807",
        "*2\r\n$2\r\nel\r\n*4\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\na\r\n",
        SAME,
    ),
    ("rpush el a b c a", ":4\r\n", SAME),
    (
        "lpop el 9223372036854775807",
        "*4\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\na\r\n",
        SAME,
    ),
    ("rpush el a b c a", ":4\r\n", SAME),
    (
        "lpop el 9223372036854775808",
        "-ERR value is out of range, must be positive\r\n",
        SAME,
    ),
    (
        "ltrim el -9223372036854775808 9223372036854775807",
        "+OK\r\n",
        SAME,
    ),
    (
        "lrange el 0 -1",
        "*4\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\na\r\n",
        SAME,
    ),
    (
        "ltrim el 9223372036854775807 -9223372036854775808",
        "+OK\r\n",
        SAME,
    ),
    ("llen el", ":0\r\n", SAME),
    ("lpush el 1 2", ":2\r\n", SAME),
    ("lset el 1 x", "+OK\r\n", SAME),
    ("lset el -3 x", "-ERR index out of range\r\n", SAME),
    ("lset el -2 y", "+OK\r\n", SAME),
    ("lrange el 0 -1", "*2\r\n$1\r\ny\r\n$1\r\nx\r\n", SAME),
    ("linsert el before y y", ":3\r\n", SAME),
    (
        "lrange el 0 -1",
        "*3\r\n$1\r\ny\r\n$1\r\ny\r\n$1\r\nx\r\n",
        SAME,
    ),
    ("rpush w a", ":1\r\n", SAME),
    ("lmove w w left left", "$1\r\na\r\n", SAME),
    ("lmove w w right right", "$1\r\na\r\n", SAME),
    ("lrange w 0 -1", "*1\r\n$1\r\na\r\n", SAME),
    ("rpush w b", ":2\r\n", SAME),
    ("lmove w w right left", "$1\r\nb\r\n", SAME),
    ("lrange w 0 -1", "*2\r\n$1\r\nb\r\n$1\r\na\r\n", SAME),
    ("rpoplpush w w", "$1\r\na\r\n", SAME),
    ("lrange w 0 -1", "*2\r\n$1\r\na\r\n$1\r\nb\r\n", SAME),
];

fn run_cases(c: &mut Client, resp3: bool) {
    for (line, resp2_reply, resp3_reply) in CASES {
        let want = if resp3 && !resp3_reply.is_empty() {
            resp3_reply
        } else {
            resp2_reply
        };
        expect(c, line, want);
    }
}

#[test]
fn list_commands_reply_like_redis_in_resp2() {
    let server = TestServer::default_config();
    let mut c = server.client();
    run_cases(&mut c, false);
}

#[test]
fn list_commands_reply_like_redis_in_resp3() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let hello = c.call("HELLO 3");
    assert!(hello.starts_with(b"%"), "{}", show(&hello));
    run_cases(&mut c, true);
}

/// Lists live in the database SELECT chose; a move stays inside it.
#[test]
fn lists_live_in_the_selected_database() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "RPUSH k a b", ":2\r\n");
    expect(&mut c, "SELECT 5", "+OK\r\n");
    expect(&mut c, "LLEN k", ":0\r\n");
    expect(&mut c, "LPUSH k z", ":1\r\n");
    expect(&mut c, "LMOVE k other LEFT LEFT", "$1\r\nz\r\n");
    expect(&mut c, "LRANGE other 0 -1", "*1\r\n$1\r\nz\r\n");
    expect(
        &mut c,
        "BLPOP k other 0",
        "*2\r\n$5\r\nother\r\n$1\r\nz\r\n",
    );
    expect(&mut c, "SELECT 0", "+OK\r\n");
    expect(&mut c, "LRANGE k 0 -1", "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
    expect(&mut c, "LLEN other", ":0\r\n");
}

/// Another connection sees each write at once, and elements are binary-safe.
#[test]
fn lists_are_shared_and_binary_safe() {
    let server = TestServer::default_config();
    let mut a = server.client();
    let mut b = server.client();
    assert_eq!(a.call_args(&[b"RPUSH", b"bin", b"\r\n\0", b""]), b":2\r\n");
    assert_eq!(
        b.call_args(&[b"LRANGE", b"bin", b"0", b"-1"]),
        b"*2\r\n$3\r\n\r\n\0\r\n$0\r\n\r\n"
    );
    assert_eq!(b.call_args(&[b"LPOS", b"bin", b""]), b":1\r\n");
    assert_eq!(b.call_args(&[b"LREM", b"bin", b"0", b""]), b":1\r\n");
    expect(&mut a, "BRPOP bin 0", "*2\r\n$3\r\nbin\r\n$3\r\n\r\n\0\r\n");
    expect(&mut b, "LLEN bin", ":0\r\n");
}

/// A long list: ranges, trims and removals from both ends agree with a model kept here.
#[test]
fn long_lists_agree_with_a_model() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let mut model: std::collections::VecDeque<String> = Default::default();
    for i in 0..300 {
        let e = format!("e{}", i % 7);
        if i % 2 == 0 {
            expect(
                &mut c,
                &format!("RPUSH big {e}"),
                &format!(":{}\r\n", i + 1),
            );
            model.push_back(e);
        } else {
            expect(
                &mut c,
                &format!("LPUSH big {e}"),
                &format!(":{}\r\n", i + 1),
            );
            model.push_front(e);
        }
    }
    let bulk_array = |items: &[String]| {
        let mut s = format!("*{}\r\n", items.len());
        for i in items {
            s += &format!("${}\r\n{i}\r\n", i.len());
        }
        s
    };
    let all: Vec<String> = model.iter().cloned().collect();
    expect(&mut c, "LRANGE big 10 19", &bulk_array(&all[10..20]));
    expect(&mut c, "LRANGE big -5 -1", &bulk_array(&all[295..]));
    // LREM -3 e3: the last three e3s go.
    let mut gone = 0;
    for i in (0..model.len()).rev() {
        if gone < 3 && model[i] == "e3" {
            model.remove(i);
            gone += 1;
        }
    }
    expect(&mut c, "LREM big -3 e3", ":3\r\n");
    expect(&mut c, "LTRIM big 7 -8", "+OK\r\n");
    let kept: Vec<String> = model
        .iter()
        .skip(7)
        .take(model.len() - 14)
        .cloned()
        .collect();
    expect(&mut c, "LRANGE big 0 -1", &bulk_array(&kept));
    let first_e5 = kept.iter().position(|e| e == "e5").unwrap();
    expect(&mut c, "LPOS big e5", &format!(":{first_e5}\r\n"));
    let last = &kept[kept.len() - 1];
    expect(
        &mut c,
        "LINDEX big -1",
        &format!("${}\r\n{last}\r\n", last.len()),
    );
}
