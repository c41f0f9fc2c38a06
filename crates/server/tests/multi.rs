//! MULTI, EXEC, DISCARD, WATCH, UNWATCH over TCP, in RESP2 and RESP3, against Redis 7's replies.
//! The `t.*` commands (feature `test-commands`) read and write the data model.

mod support;

use support::{TestServer, expect};

#[test]
fn exec_runs_the_queue_and_replies_in_order() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "t.set a 1", "+QUEUED\r\n");
    expect(&mut c, "t.get a", "+QUEUED\r\n");
    expect(&mut c, "t.push a x", "+QUEUED\r\n");
    expect(&mut c, "PING", "+QUEUED\r\n");
    expect(
        &mut c,
        "EXEC",
        "*4\r\n+OK\r\n$1\r\n1\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n+PONG\r\n",
    );
    expect(&mut c, "t.get a", "$1\r\n1\r\n");
    // An empty transaction.
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "EXEC", "*0\r\n");
}

#[test]
fn errors_outside_and_inside_multi() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "EXEC", "-ERR EXEC without MULTI\r\n");
    expect(&mut c, "DISCARD", "-ERR DISCARD without MULTI\r\n");
    expect(
        &mut c,
        "MULTI x",
        "-ERR wrong number of arguments for 'multi' command\r\n",
    );
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "MULTI", "-ERR MULTI calls can not be nested\r\n");
    expect(
        &mut c,
        "WATCH x",
        "-ERR WATCH inside MULTI is not allowed\r\n",
    );
    expect(&mut c, "t.set a 1", "+QUEUED\r\n");
    expect(
        &mut c,
        "FOO",
        "-ERR unknown command 'FOO', with args beginning with: \r\n",
    );
    expect(
        &mut c,
        "EXEC",
        "-EXECABORT Transaction discarded because of previous errors.\r\n",
    );
    // Nothing ran, and the connection is out of MULTI.
    expect(&mut c, "t.get a", "$-1\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(
        &mut c,
        "t.get",
        "-ERR wrong number of arguments for 't.get' command\r\n",
    );
    expect(
        &mut c,
        "EXEC",
        "-EXECABORT Transaction discarded because of previous errors.\r\n",
    );
    // An unsupported command aborts the transaction too.
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(
        &mut c,
        "EVAL x 0",
        "-ERR EVAL is not supported by Kavach (see docs/server.md)\r\n",
    );
    expect(
        &mut c,
        "EXEC",
        "-EXECABORT Transaction discarded because of previous errors.\r\n",
    );
}

#[test]
fn discard_drops_the_queue() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "t.set a 1", "+QUEUED\r\n");
    expect(&mut c, "DISCARD", "+OK\r\n");
    expect(&mut c, "t.get a", "$-1\r\n");
    expect(&mut c, "EXEC", "-ERR EXEC without MULTI\r\n");
}

#[test]
fn watch_aborts_exec_when_another_client_writes() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let mut other = server.client();
    expect(&mut c, "WATCH k", "+OK\r\n");
    expect(&mut other, "t.set k changed", "+OK\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "t.set k mine", "+QUEUED\r\n");
    expect(&mut c, "EXEC", "*-1\r\n");
    expect(&mut c, "t.get k", "$7\r\nchanged\r\n");
    // EXEC unwatched everything: the next transaction runs.
    expect(&mut other, "t.set k again", "+OK\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "t.set k mine", "+QUEUED\r\n");
    expect(&mut c, "EXEC", "*1\r\n+OK\r\n");
    expect(&mut c, "t.get k", "$4\r\nmine\r\n");
}

#[test]
fn watch_in_resp3_aborts_with_null() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let mut other = server.client();
    c.call("HELLO 3");
    expect(&mut c, "WATCH k", "+OK\r\n");
    expect(&mut other, "t.push k x", ":1\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "t.get k", "+QUEUED\r\n");
    expect(&mut c, "EXEC", "_\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "t.bpop nolist 100", "+QUEUED\r\n");
    expect(&mut c, "t.get nokey", "+QUEUED\r\n");
    // Blocking commands do not block inside EXEC.
    expect(&mut c, "EXEC", "*2\r\n_\r\n_\r\n");
}

#[test]
fn unwatch_and_untouched_keys_let_exec_run() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let mut other = server.client();
    expect(&mut c, "WATCH a b", "+OK\r\n");
    expect(&mut other, "t.set unrelated 1", "+OK\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "PING", "+QUEUED\r\n");
    expect(&mut c, "EXEC", "*1\r\n+PONG\r\n");
    expect(&mut c, "WATCH a", "+OK\r\n");
    expect(&mut c, "UNWATCH", "+OK\r\n");
    expect(&mut other, "t.set a 1", "+OK\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "PING", "+QUEUED\r\n");
    expect(&mut c, "EXEC", "*1\r\n+PONG\r\n");
    // DISCARD unwatches too.
    expect(&mut c, "WATCH a", "+OK\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "DISCARD", "+OK\r\n");
    expect(&mut other, "t.set a 2", "+OK\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "PING", "+QUEUED\r\n");
    expect(&mut c, "EXEC", "*1\r\n+PONG\r\n");
}

#[test]
fn watch_sees_writes_in_its_own_database_only() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let mut other = server.client();
    expect(&mut c, "SELECT 3", "+OK\r\n");
    expect(&mut c, "WATCH k", "+OK\r\n");
    expect(&mut other, "t.set k 1", "+OK\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "PING", "+QUEUED\r\n");
    expect(&mut c, "EXEC", "*1\r\n+PONG\r\n");
    expect(&mut c, "WATCH k", "+OK\r\n");
    expect(&mut other, "SELECT 3", "+OK\r\n");
    expect(&mut other, "t.set k 1", "+OK\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "PING", "+QUEUED\r\n");
    expect(&mut c, "EXEC", "*-1\r\n");
}

#[test]
fn a_watched_key_that_expires_aborts_exec() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "t.set k v", "+OK\r\n");
    expect(&mut c, "t.pexpire k 30", ":1\r\n");
    expect(&mut c, "WATCH k", "+OK\r\n");
    // Wait until the key is gone (by reads; no timing assumption beyond "eventually").
    while c.call("t.get k") != b"$-1\r\n" {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "PING", "+QUEUED\r\n");
    expect(&mut c, "EXEC", "*-1\r\n");
}

#[test]
fn a_transaction_is_atomic_for_other_clients() {
    // Two transactions each move one unit between two keys many times; a reader of both keys
    // never sees a half-done transfer (the sum stays constant).
    let server = TestServer::default_config();
    let mut setup = server.client();
    expect(&mut setup, "t.set a 0", "+OK\r\n");
    let writer = {
        let addr = server.addr;
        std::thread::spawn(move || {
            let mut w = support::Client::connect(addr);
            for i in 0..200 {
                w.call("MULTI");
                w.call(&format!("t.set a {i}"));
                w.call(&format!("t.set b {i}"));
                assert_eq!(w.call("EXEC"), b"*2\r\n+OK\r\n+OK\r\n");
            }
        })
    };
    let mut r = server.client();
    for _ in 0..200 {
        r.call("MULTI");
        r.call("t.get a");
        r.call("t.get b");
        let reply = r.call("EXEC");
        let text = String::from_utf8_lossy(&reply).into_owned();
        let values: Vec<&str> = text
            .split("\r\n")
            .filter(|l| !l.starts_with(['*', '$']) && !l.is_empty())
            .collect();
        if values.len() == 2 {
            assert_eq!(values[0], values[1], "{text}");
        }
    }
    writer.join().unwrap();
}

#[test]
fn server_commands_inside_exec_answer() {
    // Commands that look at the whole server (INFO, HELLO, CONFIG, CLIENT, COMMAND) run inside
    // the EXEC's transaction without waiting for the locks it holds.
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "MULTI", "+OK\r\n");
    for line in [
        "INFO",
        "HELLO",
        "CONFIG GET maxmemory",
        "CLIENT ID",
        "COMMAND COUNT",
        "TIME",
        "PUBLISH ch x",
    ] {
        expect(&mut c, line, "+QUEUED\r\n");
    }
    c.send(&support::words("EXEC"));
    let server::resp::Reply::Array(replies) = c.read_reply() else {
        panic!("EXEC")
    };
    assert_eq!(replies.len(), 7);
    assert!(
        replies
            .iter()
            .all(|r| !matches!(r, server::resp::Reply::Error(_))),
        "{replies:?}"
    );
}

#[test]
fn whole_database_reads_inside_exec_see_the_exec_itself() {
    // DBSIZE, KEYS, SCAN and RANDOMKEY inside EXEC read through the EXEC's transaction (which
    // holds the whole keyspace) and see the writes queued before them, as in Redis.
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "SET a 1", "+OK\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    for line in [
        "SET b 2",
        "DBSIZE",
        "KEYS *",
        "SCAN 0 MATCH b",
        "DEL a",
        "RANDOMKEY",
        "SELECT 1",
        "DBSIZE",
    ] {
        expect(&mut c, line, "+QUEUED\r\n");
    }
    expect(
        &mut c,
        "EXEC",
        "*8\r\n+OK\r\n:2\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n*2\r\n$1\r\n0\r\n*1\r\n$1\r\nb\r\n:1\r\n$1\r\nb\r\n+OK\r\n:0\r\n",
    );
}

#[test]
fn smove_writes_the_destination_only_when_it_adds_the_member() {
    // Redis's "SMOVE only notify dstset when the addition is successful": a WATCH on a
    // destination that already holds the member survives the SMOVE.
    let server = TestServer::default_config();
    let mut c = server.client();
    let mut other = server.client();
    expect(&mut c, "SADD src a b", ":2\r\n");
    expect(&mut c, "SADD dst a", ":1\r\n");
    expect(&mut c, "WATCH dst", "+OK\r\n");
    expect(&mut other, "SMOVE src dst a", ":1\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "SCARD dst", "+QUEUED\r\n");
    expect(&mut c, "EXEC", "*1\r\n:1\r\n");
    // Adding the member does write the destination.
    expect(&mut c, "WATCH dst", "+OK\r\n");
    expect(&mut other, "SMOVE src dst b", ":1\r\n");
    expect(&mut c, "MULTI", "+OK\r\n");
    expect(&mut c, "SCARD dst", "+QUEUED\r\n");
    expect(&mut c, "EXEC", "*-1\r\n");
}
