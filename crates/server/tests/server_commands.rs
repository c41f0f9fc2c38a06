//! Server commands over TCP in RESP2 and RESP3: INFO's sections, CONFIG GET/SET, COMMAND
//! GETKEYS, TIME, LASTSAVE, BGSAVE, WAIT, RESET, the commands Kavach does not serve, and active
//! expiry (keys past their deadline leave DBSIZE-level counts without being read).

mod support;

use server::resp::Reply;
use support::{TestServer, expect, show};

fn info_field(c: &mut support::Client, section: &str, name: &str) -> Option<String> {
    let text = String::from_utf8(c.call(&format!("INFO {section}"))).unwrap();
    text.split("\r\n")
        .find_map(|l| l.strip_prefix(&format!("{name}:")).map(str::to_string))
}

#[test]
fn info_has_the_fields_clients_read() {
    let server = TestServer::default_config();
    let mut c = server.client();
    assert_eq!(
        info_field(&mut c, "cluster", "cluster_enabled").as_deref(),
        Some("0")
    );
    assert_eq!(
        info_field(&mut c, "server", "redis_mode").as_deref(),
        Some("standalone")
    );
    assert_eq!(
        info_field(&mut c, "memory", "maxmemory").as_deref(),
        Some("0")
    );
    assert_eq!(
        info_field(&mut c, "memory", "maxmemory_human").as_deref(),
        Some("0B")
    );
    assert_eq!(
        info_field(&mut c, "memory", "maxmemory_policy").as_deref(),
        Some("noeviction")
    );
    expect(&mut c, "t.set a 123456", "+OK\r\n");
    let used: u64 = info_field(&mut c, "memory", "used_memory")
        .unwrap()
        .parse()
        .unwrap();
    assert!(used > 0);
    assert!(info_field(&mut c, "cpu", "used_cpu_user").is_some());
    assert_eq!(
        info_field(&mut c, "stats", "expired_keys").as_deref(),
        Some("0")
    );
    // Keyspace from the data model, per non-empty database.
    expect(&mut c, "SELECT 2", "+OK\r\n");
    expect(&mut c, "t.set b 1", "+OK\r\n");
    expect(&mut c, "t.set c 1", "+OK\r\n");
    expect(&mut c, "t.pexpire c 100000", ":1\r\n");
    assert_eq!(
        info_field(&mut c, "keyspace", "db2").as_deref(),
        Some("keys=2,expires=1,avg_ttl=0")
    );
    assert_eq!(info_field(&mut c, "keyspace", "db1"), None);
    // RESP3: a verbatim string.
    c.call("HELLO 3");
    let reply = c.call("INFO cluster");
    assert!(reply.starts_with(b"="), "{}", show(&reply));
    assert!(show(&reply).contains("txt:# Cluster\\r\\ncluster_enabled:0"));
}

#[test]
fn config_get_and_set() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(
        &mut c,
        "CONFIG GET databases maxmemory",
        "*4\r\n$9\r\ndatabases\r\n$2\r\n16\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n",
    );
    expect(
        &mut c,
        "CONFIG GET maxmemory*",
        "*4\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n",
    );
    expect(
        &mut c,
        "CONFIG SET foo 1",
        "-ERR Unknown option or number of arguments for CONFIG SET - 'foo'\r\n",
    );
    expect(
        &mut c,
        "CONFIG SET databases 3",
        "-ERR CONFIG SET failed (possibly related to argument 'databases') - can't set immutable config\r\n",
    );
    expect(
        &mut c,
        "CONFIG SET timeout 0 timeout 0",
        "-ERR CONFIG SET failed (possibly related to argument 'timeout') - duplicate parameter\r\n",
    );
    expect(&mut c, "CONFIG SET timeout 0 appendonly yes", "+OK\r\n");
    expect(
        &mut c,
        "CONFIG SET maxmemory-policy nosuch",
        "-ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - argument(s) must be one of the following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction\r\n",
    );
    expect(
        &mut c,
        "CONFIG SET maxmemory lots",
        "-ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be a memory value\r\n",
    );
    // The reference store cannot change its limit: refused, and nothing changed.
    let reply = show(&c.call("CONFIG SET maxmemory 1mb"));
    assert!(reply.starts_with("-ERR CONFIG SET failed"), "{reply}");
    expect(
        &mut c,
        "CONFIG GET maxmemory",
        "*2\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n",
    );
    // Setting what is already there is fine.
    expect(
        &mut c,
        "CONFIG SET maxmemory 0 maxmemory-policy noeviction",
        "+OK\r\n",
    );
    c.call("HELLO 3");
    expect(
        &mut c,
        "CONFIG GET databases",
        "%1\r\n$9\r\ndatabases\r\n$2\r\n16\r\n",
    );
}

#[test]
fn time_lastsave_bgsave_wait() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let Reply::Array(parts) = ({
        c.send(&support::words("TIME"));
        c.read_reply()
    }) else {
        panic!("TIME")
    };
    let [Reply::Bulk(secs), Reply::Bulk(micros)] = parts.as_slice() else {
        panic!("TIME parts")
    };
    let secs: u64 = String::from_utf8_lossy(secs).parse().unwrap();
    let micros: u64 = String::from_utf8_lossy(micros).parse().unwrap();
    assert!(secs > 1_600_000_000 && micros < 1_000_000);
    expect(
        &mut c,
        "TIME x",
        "-ERR wrong number of arguments for 'time' command\r\n",
    );
    let before = c.call("LASTSAVE");
    assert!(before.starts_with(b":"));
    expect(&mut c, "BGSAVE", "+Background saving started\r\n");
    expect(&mut c, "BGSAVE x", "-ERR syntax error\r\n");
    // The background save finishes by itself; SAVE counts too.
    let deadline = std::time::Instant::now() + support::IO_TIMEOUT;
    while server.backend.save_calls() < 1 {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    expect(&mut c, "WAIT 0 0", ":0\r\n");
    expect(&mut c, "WAIT 1 10", ":0\r\n");
    expect(
        &mut c,
        "WAIT 0 x",
        "-ERR timeout is not an integer or out of range\r\n",
    );
    expect(
        &mut c,
        "WAIT 1",
        "-ERR wrong number of arguments for 'wait' command\r\n",
    );
}

#[test]
fn reset_returns_the_connection_to_its_first_state() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let mut other = server.client();
    c.call("HELLO 3 SETNAME me");
    expect(&mut c, "SELECT 5", "+OK\r\n");
    expect(&mut c, "WATCH k", "+OK\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "RESET", "+RESET\r\n");
    // RESP2 again, database 0, no name, no transaction, no watch.
    expect(&mut c, "CLIENT GETNAME", "$-1\r\n");
    expect(&mut c, "EXEC", "-ERR EXEC without MULTI\r\n");
    expect(&mut c, "t.set k 0", "+OK\r\n");
    expect(&mut other, "t.get k", "$1\r\n0\r\n");
    expect(&mut other, "t.set k 1", "+OK\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "PING", "+QUEUED\r\n");
    expect(&mut c, "EXEC", "*1\r\n+PONG\r\n");
    expect(
        &mut c,
        "RESET x",
        "-ERR wrong number of arguments for 'reset' command\r\n",
    );
}

#[test]
fn commands_kavach_does_not_serve_say_so() {
    let server = TestServer::default_config();
    let mut c = server.client();
    for (line, name) in [
        ("EVAL return 0", "EVAL"),
        ("evalsha abc 0", "EVALSHA"),
        ("SCRIPT LOAD x", "SCRIPT"),
        ("FCALL f 0", "FCALL"),
        ("MODULE LIST", "MODULE"),
        ("CLUSTER INFO", "CLUSTER"),
        ("XADD s * a 1", "XADD"),
        ("XRANGE s - +", "XRANGE"),
        ("DEBUG SLEEP 0", "DEBUG"),
        ("PFADD h a", "PFADD"),
        ("GEOADD g 1 1 a", "GEOADD"),
    ] {
        expect(
            &mut c,
            line,
            &format!("-ERR {name} is not supported by Kavach (see docs/server.md)\r\n"),
        );
    }
    expect(
        &mut c,
        "NOSUCH a",
        "-ERR unknown command 'NOSUCH', with args beginning with: 'a' \r\n",
    );
}

#[test]
fn command_getkeys_follows_the_table() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "COMMAND GETKEYS t.get a", "*1\r\n$1\r\na\r\n");
    expect(
        &mut c,
        "COMMAND GETKEYS t.bpop a b 0",
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n",
    );
    expect(
        &mut c,
        "COMMAND GETKEYS mset a 1 b 2",
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n",
    );
    expect(
        &mut c,
        "COMMAND GETKEYS ping",
        "-ERR The command has no key arguments\r\n",
    );
    expect(
        &mut c,
        "COMMAND GETKEYS nosuch a",
        "-ERR Invalid command specified\r\n",
    );
    expect(
        &mut c,
        "COMMAND GETKEYS",
        "-ERR wrong number of arguments for 'command|getkeys' command\r\n",
    );
}

#[test]
fn active_expiry_removes_keys_nobody_reads() {
    let server = TestServer::start(|c| {
        c.active_expiry_period = std::time::Duration::from_millis(10);
    });
    let mut c = server.client();
    for i in 0..50 {
        expect(&mut c, &format!("t.set k{i} v"), "+OK\r\n");
        expect(&mut c, &format!("t.pexpire k{i} 1"), ":1\r\n");
    }
    expect(&mut c, "t.set keep v", "+OK\r\n");
    // Without reading the keys, the expired ones leave the store and are counted.
    let deadline = std::time::Instant::now() + support::IO_TIMEOUT;
    loop {
        let expired = info_field(&mut c, "stats", "expired_keys").unwrap();
        let keyspace = info_field(&mut c, "keyspace", "db0");
        if expired == "50" && keyspace.as_deref() == Some("keys=1,expires=0,avg_ttl=0") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "expired {expired}, {keyspace:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    expect(&mut c, "t.get keep", "$1\r\nv\r\n");
}

/// The CLIENT LIST line of client `id`.
fn client_line(c: &mut support::Client, id: &str) -> String {
    let text = String::from_utf8(c.call("CLIENT LIST")).unwrap();
    text.lines()
        .find(|l| l.contains(&format!("id={id} ")))
        .unwrap_or_else(|| panic!("no client {id} in {text}"))
        .to_string()
}

fn client_id(c: &mut support::Client) -> String {
    String::from_utf8(c.call("CLIENT ID"))
        .unwrap()
        .trim_start_matches(':')
        .trim_end()
        .to_string()
}

#[test]
fn client_list_shows_pubsub_multi_and_blocked_state() {
    let server = TestServer::default_config();
    let mut observer = server.client();
    let mut sub = server.client();
    let sub_id = client_id(&mut sub);
    sub.send(&support::words("SUBSCRIBE a b"));
    sub.read_reply_bytes();
    sub.read_reply_bytes();
    let line = client_line(&mut observer, &sub_id);
    assert!(
        line.contains(" flags=P db=0 sub=2 psub=0 ssub=0 multi=-1 "),
        "{line}"
    );
    assert!(line.contains(" cmd=subscribe "), "{line}");

    let mut tx = server.client();
    let tx_id = client_id(&mut tx);
    expect(&mut tx, "SELECT 3", "+OK\r\n");
    expect(&mut tx, "MULTI", "+OK\r\n");
    expect(&mut tx, "PING", "+QUEUED\r\n");
    expect(&mut tx, "PING", "+QUEUED\r\n");
    let line = client_line(&mut observer, &tx_id);
    assert!(
        line.contains(" flags=x db=3 sub=0 psub=0 ssub=0 multi=2 "),
        "{line}"
    );
    assert!(line.contains(" cmd=ping "), "{line}");

    let mut blocked = server.client();
    let blocked_id = client_id(&mut blocked);
    blocked.send(&support::words("t.bpop l 0"));
    let deadline = std::time::Instant::now() + support::IO_TIMEOUT;
    while !client_line(&mut observer, &blocked_id).contains(" flags=b ") {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    expect(&mut observer, "t.push l x", ":1\r\n");
    blocked.read_reply_bytes();
    let line = client_line(&mut observer, &blocked_id);
    assert!(line.contains(" flags=N "), "{line}");
}

#[test]
fn save_and_shutdown_are_refused_inside_multi() {
    let server = TestServer::default_config();
    let mut c = server.client();
    for command in ["SAVE", "SHUTDOWN NOSAVE"] {
        expect(&mut c, "MULTI", "+OK\r\n");
        expect(&mut c, "t.set a 1", "+QUEUED\r\n");
        expect(
            &mut c,
            command,
            "-ERR Command not allowed inside a transaction\r\n",
        );
        expect(
            &mut c,
            "EXEC",
            "-EXECABORT Transaction discarded because of previous errors.\r\n",
        );
    }
    assert_eq!(server.backend.save_calls(), 0);
    expect(&mut c, "t.get a", "$-1\r\n");
    // BGSAVE may be queued.
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "BGSAVE", "+QUEUED\r\n");
    expect(&mut c, "EXEC", "*1\r\n+Background saving started\r\n");
}

#[test]
fn command_docs_name_each_command_of_the_table() {
    let server = TestServer::default_config();
    let mut c = server.client();
    c.send(&support::words("COMMAND COUNT"));
    let Reply::Integer(count) = c.read_reply() else {
        panic!("COMMAND COUNT")
    };
    c.send(&support::words("COMMAND DOCS"));
    let Reply::Array(flat) = c.read_reply() else {
        panic!("COMMAND DOCS")
    };
    assert_eq!(flat.len() as i64, count * 2);
    c.call("HELLO 3");
    expect(
        &mut c,
        "COMMAND DOCS multi publish",
        "%2\r\n$5\r\nmulti\r\n%1\r\n$5\r\ngroup\r\n$12\r\ntransactions\r\n$7\r\npublish\r\n%1\r\n$5\r\ngroup\r\n$6\r\npubsub\r\n",
    );
}

#[test]
fn encoding_thresholds_are_kept_and_used_by_object_encoding() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(
        &mut c,
        "CONFIG GET hash-max-ziplist-entries",
        "*2\r\n$24\r\nhash-max-ziplist-entries\r\n$3\r\n512\r\n",
    );
    expect(&mut c, "HSET h a 1 b 2 c 3", ":3\r\n");
    expect(&mut c, "OBJECT ENCODING h", "$8\r\nlistpack\r\n");
    // Either name sets both; OBJECT ENCODING follows.
    expect(&mut c, "CONFIG SET hash-max-listpack-entries 2", "+OK\r\n");
    expect(
        &mut c,
        "CONFIG GET hash-max-ziplist-entries",
        "*2\r\n$24\r\nhash-max-ziplist-entries\r\n$1\r\n2\r\n",
    );
    expect(&mut c, "OBJECT ENCODING h", "$9\r\nhashtable\r\n");
    expect(
        &mut c,
        "CONFIG SET zset-max-ziplist-value x",
        "-ERR CONFIG SET failed (possibly related to argument 'zset-max-ziplist-value') - argument couldn't be parsed into an integer\r\n",
    );
    expect(&mut c, "CONFIG SET set-max-intset-entries 0", "+OK\r\n");
    expect(&mut c, "SADD s 1", ":1\r\n");
    expect(&mut c, "OBJECT ENCODING s", "$9\r\nhashtable\r\n");
}

#[test]
fn function_flush_and_list_answer_that_there_are_no_functions() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "FUNCTION FLUSH", "+OK\r\n");
    expect(&mut c, "FUNCTION FLUSH SYNC", "+OK\r\n");
    expect(&mut c, "FUNCTION FLUSH LATER", "-ERR syntax error\r\n");
    expect(&mut c, "FUNCTION LIST", "*0\r\n");
    expect(
        &mut c,
        "FUNCTION LOAD x",
        "-ERR FUNCTION LOAD is not supported by Kavach (see docs/server.md)\r\n",
    );
}

#[test]
fn memory_usage_estimates_a_key_and_grows_with_it() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "MEMORY USAGE nokey", "$-1\r\n");
    expect(&mut c, "SET k v", "+OK\r\n");
    let small = c.call("MEMORY USAGE k");
    expect(
        &mut c,
        "SET k vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv",
        "+OK\r\n",
    );
    let large = c.call("MEMORY USAGE k SAMPLES 5");
    let n = |r: Vec<u8>| -> i64 {
        String::from_utf8(r)
            .unwrap()
            .trim_start_matches(':')
            .trim()
            .parse()
            .unwrap()
    };
    assert!(n(large) > n(small));
    expect(&mut c, "MEMORY USAGE k SAMPLES -1", "-ERR syntax error\r\n");
    expect(&mut c, "MEMORY USAGE k FOO", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "MEMORY STATS",
        "-ERR MEMORY STATS is not supported by Kavach (see docs/server.md)\r\n",
    );
}

#[test]
fn client_reply_off_skip_and_on() {
    let server = TestServer::default_config();
    let mut c = server.client();
    // OFF: neither it nor the commands after it answer, until ON (which does).
    c.send(&support::words("CLIENT REPLY OFF"));
    c.send(&support::words("INCR a"));
    c.send(&support::words("GET a"));
    expect(&mut c, "CLIENT REPLY ON", "+OK\r\n");
    expect(&mut c, "INCR a", ":2\r\n");
    // SKIP: it and the next command do not answer; the one after does.
    c.send(&support::words("CLIENT REPLY SKIP"));
    c.send(&support::words("INCR b"));
    expect(&mut c, "INCR b", ":2\r\n");
    expect(&mut c, "CLIENT REPLY MAYBE", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "CLIENT REPLY",
        "-ERR wrong number of arguments for 'client|reply' command\r\n",
    );
}

/// With busy polling on (and a budget far above anything the test waits for), pipelined
/// clients, a worker left idle between bursts and a request after the idle time are all
/// served, every command counted once.
#[test]
fn busy_polling_workers_serve_every_request() {
    let server = TestServer::start(|c| {
        c.busy_poll = std::time::Duration::from_millis(10);
    });
    const THREADS: usize = 4;
    const ROUNDS: usize = 150;
    const DEPTH: usize = 16;
    let addr = server.addr;
    let clients: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = support::Client::connect(addr);
                for round in 0..ROUNDS {
                    let mut wire = Vec::new();
                    for i in 0..DEPTH {
                        let key = format!("k{t}-{i}");
                        let value = format!("{round}");
                        wire.extend(support::frame(&[
                            b"t.set",
                            key.as_bytes(),
                            value.as_bytes(),
                        ]));
                    }
                    c.send_raw(&wire);
                    for _ in 0..DEPTH {
                        assert_eq!(c.read_reply_bytes(), b"+OK\r\n");
                    }
                }
            })
        })
        .collect();
    for h in clients {
        h.join().unwrap();
    }
    let mut c = server.client();
    std::thread::sleep(std::time::Duration::from_millis(30));
    for t in 0..THREADS {
        let last = format!("{}", ROUNDS - 1);
        let want = format!("${}\r\n{last}\r\n", last.len());
        expect(&mut c, &format!("t.get k{t}-{}", DEPTH - 1), &want);
    }
    let summary = server.stop();
    assert_eq!(
        summary.commands_processed,
        (THREADS * ROUNDS * DEPTH + THREADS) as u64
    );
}

/// Replies wait for the end of the worker's pass and go out together. Many connections whose
/// requests arrive at once, each asking for a value larger than a socket's buffer and a small
/// one after it, all get both replies whole and in order: the part a full socket refuses at
/// the end of the pass goes when the socket drains.
#[test]
fn replies_written_at_the_end_of_a_pass_all_arrive() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let big = "b".repeat(3 << 20);
    expect(&mut c, &format!("t.set big {big}"), "+OK\r\n");
    expect(&mut c, "t.set small s", "+OK\r\n");
    let mut clients: Vec<_> = (0..12).map(|_| server.client()).collect();
    let mut wire = support::frame(&[b"t.get", b"big"]);
    wire.extend(support::frame(&[b"t.get", b"small"]));
    for c in &mut clients {
        c.send_raw(&wire);
    }
    let want_big = format!("${}\r\n{big}\r\n", big.len()).into_bytes();
    for c in &mut clients {
        assert!(c.read_reply_bytes() == want_big, "the large value, whole");
        assert_eq!(c.read_reply_bytes(), b"$1\r\ns\r\n");
    }
}
