//! Blocked connections over TCP: woken by a write from another connection (on any worker),
//! first come first served, timeouts, CLIENT UNBLOCK, and requests pipelined behind a blocked
//! command. The blocking pop is the test-only `t.bpop key... timeout-ms` (feature
//! `test-commands`), which blocks through the same `Action::Block` the list commands use; its
//! timeout reply is Redis 7.0's for every blocking command (null array; RESP3 null). No test
//! relies on timing: each waits for a reply, never for a duration.

mod support;

use support::{Client, TestServer, expect, show};

/// Waits until INFO says `n` clients are blocked, so the next write surely finds them parked.
fn wait_blocked(c: &mut Client, n: usize) {
    let want = format!("blocked_clients:{n}\r\n");
    let deadline = std::time::Instant::now() + support::IO_TIMEOUT;
    loop {
        let info = String::from_utf8_lossy(&c.call("INFO clients")).into_owned();
        if info.contains(&want) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{info}");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[test]
fn a_push_from_another_connection_wakes_the_blocked_one() {
    let server = TestServer::start(|c| c.workers = 3);
    let mut blocked = server.client();
    let mut other = server.client();
    blocked.send(&support::words("t.bpop l1 l2 0"));
    // Requests pipelined behind the blocked command wait for it.
    blocked.send(&support::words("PING"));
    wait_blocked(&mut other, 1);
    expect(&mut other, "t.push l2 x", ":1\r\n");
    assert_eq!(
        show(&blocked.read_reply_bytes()),
        show(b"*2\r\n$2\r\nl2\r\n$1\r\nx\r\n")
    );
    assert_eq!(blocked.read_reply_bytes(), b"+PONG\r\n");
    // The pop took the element.
    expect(&mut other, "t.bpop l2 1", "*-1\r\n");
    wait_blocked(&mut other, 0);
}

#[test]
fn an_element_already_there_is_taken_without_blocking() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "t.push l a b", ":2\r\n");
    expect(&mut c, "t.bpop l 0", "*2\r\n$1\r\nl\r\n$1\r\na\r\n");
}

#[test]
fn timeouts_answer_null_in_both_protocols() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "t.bpop nothing 20", "*-1\r\n");
    c.call("HELLO 3");
    expect(&mut c, "t.bpop nothing 20", "_\r\n");
    // After the timeout the connection serves requests again.
    expect(&mut c, "PING", "+PONG\r\n");
}

#[test]
fn clients_blocked_on_one_key_are_served_in_arrival_order() {
    let server = TestServer::start(|c| c.workers = 2);
    let mut pusher = server.client();
    let mut first = server.client();
    first.send(&support::words("t.bpop q 0"));
    wait_blocked(&mut pusher, 1);
    let mut second = server.client();
    second.send(&support::words("t.bpop q 0"));
    wait_blocked(&mut pusher, 2);
    expect(&mut pusher, "t.push q one", ":1\r\n");
    assert_eq!(
        show(&first.read_reply_bytes()),
        show(b"*2\r\n$1\r\nq\r\n$3\r\none\r\n")
    );
    wait_blocked(&mut pusher, 1);
    expect(&mut pusher, "t.push q two", ":1\r\n");
    assert_eq!(
        show(&second.read_reply_bytes()),
        show(b"*2\r\n$1\r\nq\r\n$3\r\ntwo\r\n")
    );
}

#[test]
fn one_push_of_two_elements_serves_two_blocked_clients() {
    let server = TestServer::start(|c| c.workers = 2);
    let mut pusher = server.client();
    let mut a = server.client();
    let mut b = server.client();
    a.send(&support::words("t.bpop q 0"));
    wait_blocked(&mut pusher, 1);
    b.send(&support::words("t.bpop q 0"));
    wait_blocked(&mut pusher, 2);
    expect(&mut pusher, "t.push q x y", ":2\r\n");
    assert_eq!(
        show(&a.read_reply_bytes()),
        show(b"*2\r\n$1\r\nq\r\n$1\r\nx\r\n")
    );
    assert_eq!(
        show(&b.read_reply_bytes()),
        show(b"*2\r\n$1\r\nq\r\n$1\r\ny\r\n")
    );
}

#[test]
fn a_push_inside_exec_wakes_a_blocked_client() {
    let server = TestServer::default_config();
    let mut blocked = server.client();
    let mut c = server.client();
    blocked.send(&support::words("t.bpop l 0"));
    wait_blocked(&mut c, 1);
    c.call("MULTI");
    c.call("t.push l a");
    c.call("t.push l b");
    expect(&mut c, "EXEC", "*2\r\n:1\r\n:2\r\n");
    assert_eq!(
        show(&blocked.read_reply_bytes()),
        show(b"*2\r\n$1\r\nl\r\n$1\r\na\r\n")
    );
}

#[test]
fn client_unblock_ends_a_blocked_command() {
    let server = TestServer::default_config();
    let mut blocked = server.client();
    let Ok(id) = String::from_utf8(blocked.call("CLIENT ID"))
        .unwrap()
        .trim_start_matches(':')
        .trim_end()
        .parse::<u64>()
    else {
        panic!("CLIENT ID")
    };
    let mut c = server.client();
    expect(&mut c, &format!("CLIENT UNBLOCK {id}"), ":0\r\n");
    blocked.send(&support::words("t.bpop l 0"));
    wait_blocked(&mut c, 1);
    expect(&mut c, &format!("CLIENT UNBLOCK {id}"), ":1\r\n");
    assert_eq!(blocked.read_reply_bytes(), b"*-1\r\n");
    blocked.send(&support::words("t.bpop l 0"));
    wait_blocked(&mut c, 1);
    expect(&mut c, &format!("CLIENT UNBLOCK {id} ERROR"), ":1\r\n");
    assert_eq!(
        show(&blocked.read_reply_bytes()),
        show(b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n")
    );
    expect(
        &mut c,
        &format!("CLIENT UNBLOCK {id} FOO"),
        "-ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR\r\n",
    );
    expect(
        &mut c,
        "CLIENT UNBLOCK x",
        "-ERR value is not an integer or out of range\r\n",
    );
}

#[test]
fn a_blocked_client_that_disconnects_leaves_the_queue() {
    let server = TestServer::default_config();
    let mut c = server.client();
    {
        let mut gone = server.client();
        gone.send(&support::words("t.bpop l 0"));
        wait_blocked(&mut c, 1);
    }
    wait_blocked(&mut c, 0);
    let mut waiting = server.client();
    waiting.send(&support::words("t.bpop l 0"));
    wait_blocked(&mut c, 1);
    expect(&mut c, "t.push l x", ":1\r\n");
    assert_eq!(
        show(&waiting.read_reply_bytes()),
        show(b"*2\r\n$1\r\nl\r\n$1\r\nx\r\n")
    );
}

#[test]
fn a_wrong_type_write_wakes_and_errors() {
    let server = TestServer::default_config();
    let mut blocked = server.client();
    let mut c = server.client();
    blocked.send(&support::words("t.bpop k 0"));
    wait_blocked(&mut c, 1);
    expect(&mut c, "t.set k v", "+OK\r\n");
    assert_eq!(
        show(&blocked.read_reply_bytes()),
        show(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n")
    );
}

#[test]
fn blocked_clients_are_served_before_the_writer_hears_back() {
    // Redis serves the clients a write unblocks (and those their moves unblock in turn) before
    // the writer's reply: when the push returns, the chain l1 -> l2 -> l3 is done.
    let server = TestServer::start(|c| c.workers = 3);
    let mut writer = server.client();
    let mut first = server.client();
    let mut second = server.client();
    first.send(&support::words("t.bmove l1 l2 0"));
    wait_blocked(&mut writer, 1);
    second.send(&support::words("t.bmove l2 l3 0"));
    wait_blocked(&mut writer, 2);
    expect(&mut writer, "t.push l1 foo", ":1\r\n");
    expect(&mut writer, "t.len l1", ":0\r\n");
    expect(&mut writer, "t.len l2", ":0\r\n");
    expect(&mut writer, "t.len l3", ":1\r\n");
    assert_eq!(first.read_reply_bytes(), b"$3\r\nfoo\r\n");
    assert_eq!(second.read_reply_bytes(), b"$3\r\nfoo\r\n");
}

#[test]
fn a_push_made_by_an_unblocked_move_breaks_a_watch() {
    let server = TestServer::start(|c| c.workers = 3);
    let mut blocked = server.client();
    let mut watching = server.client();
    let mut writer = server.client();
    blocked.send(&support::words("t.bmove src dst 0"));
    wait_blocked(&mut writer, 1);
    expect(&mut watching, "WATCH dst", "+OK\r\n");
    expect(&mut watching, "MULTI", "+OK\r\n");
    expect(&mut watching, "t.get somekey", "+QUEUED\r\n");
    expect(&mut writer, "t.push src element", ":1\r\n");
    expect(&mut watching, "EXEC", "*-1\r\n");
    assert_eq!(blocked.read_reply_bytes(), b"$7\r\nelement\r\n");
}

#[test]
fn clients_blocked_in_a_circle_are_all_served() {
    // Each moves from its list to the other's: one push goes round once and stops.
    let server = TestServer::start(|c| c.workers = 2);
    let mut writer = server.client();
    let mut a = server.client();
    let mut b = server.client();
    a.send(&support::words("t.bmove x y 0"));
    wait_blocked(&mut writer, 1);
    b.send(&support::words("t.bmove y x 0"));
    wait_blocked(&mut writer, 2);
    expect(&mut writer, "t.push x v", ":1\r\n");
    assert_eq!(a.read_reply_bytes(), b"$1\r\nv\r\n");
    assert_eq!(b.read_reply_bytes(), b"$1\r\nv\r\n");
    expect(&mut writer, "t.len x", ":1\r\n");
    expect(&mut writer, "t.len y", ":0\r\n");
    wait_blocked(&mut writer, 0);
}

#[test]
fn many_blocked_clients_and_pushers_lose_no_element() {
    // 16 clients block on one list while 4 others push 4 elements each, concurrently, on 3
    // workers: every element reaches exactly one blocked client.
    let server = TestServer::start(|c| c.workers = 3);
    let mut observer = server.client();
    let mut waiting: Vec<Client> = (0..16).map(|_| server.client()).collect();
    for c in &mut waiting {
        c.send(&support::words("t.bpop work 0"));
    }
    wait_blocked(&mut observer, 16);
    let pushers: Vec<_> = (0..4)
        .map(|p| {
            let addr = server.addr;
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                for i in 0..4 {
                    let reply = c.call(&format!("t.push work p{p}e{i}"));
                    assert!(reply.starts_with(b":"), "{}", show(&reply));
                }
            })
        })
        .collect();
    for p in pushers {
        p.join().unwrap();
    }
    let mut got: Vec<String> = waiting
        .iter_mut()
        .map(|c| {
            let reply = String::from_utf8(c.read_reply_bytes()).unwrap();
            reply.rsplit("\r\n").nth(1).unwrap().to_string()
        })
        .collect();
    got.sort();
    let mut want: Vec<String> = (0..4)
        .flat_map(|p| (0..4).map(move |i| format!("p{p}e{i}")))
        .collect();
    want.sort();
    assert_eq!(got, want);
    expect(&mut observer, "t.len work", ":0\r\n");
    wait_blocked(&mut observer, 0);
}

#[test]
fn a_key_that_becomes_another_kind_leaves_the_client_blocked() {
    // Redis 7.0 serves a blocked client only from a key of its kind: a list replaced by a
    // string in one EXEC does not wake it with WRONGTYPE; a later push does serve it.
    let server = TestServer::default_config();
    let mut blocked = server.client();
    let mut other = server.client();
    blocked.send(&support::words("BLPOP l 0"));
    wait_blocked(&mut other, 1);
    expect(&mut other, "MULTI", "+OK\r\n");
    expect(&mut other, "LPUSH l foo", "+QUEUED\r\n");
    expect(&mut other, "DEL l", "+QUEUED\r\n");
    expect(&mut other, "SET l foo", "+QUEUED\r\n");
    expect(&mut other, "EXEC", "*3\r\n:1\r\n:1\r\n+OK\r\n");
    wait_blocked(&mut other, 1);
    expect(&mut other, "DEL l", ":1\r\n");
    expect(&mut other, "LPUSH l bar", ":1\r\n");
    assert_eq!(
        show(&blocked.read_reply_bytes()),
        show(b"*2\r\n$1\r\nl\r\n$3\r\nbar\r\n")
    );
    // The same for a sorted-set pop.
    blocked.send(&support::words("BZPOPMIN z 0"));
    wait_blocked(&mut other, 1);
    expect(&mut other, "SET z x", "+OK\r\n");
    wait_blocked(&mut other, 1);
    expect(&mut other, "DEL z", ":1\r\n");
    expect(&mut other, "ZADD z 1 m", ":1\r\n");
    assert_eq!(
        show(&blocked.read_reply_bytes()),
        show(b"*3\r\n$1\r\nz\r\n$1\r\nm\r\n$1\r\n1\r\n")
    );
}
