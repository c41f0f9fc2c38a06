//! Pub/sub over TCP: subscription replies, message delivery across connections (and worker
//! threads), RESP2's subscribed mode and RESP3 push frames, PUBSUB introspection.

mod support;

use support::{Client, TestServer, expect, show};

fn read(c: &mut Client) -> String {
    show(&c.read_reply_bytes())
}

#[test]
fn resp2_subscribe_publish_unsubscribe() {
    let server = TestServer::start(|c| c.workers = 3);
    let mut sub = server.client();
    let mut publisher = server.client();
    sub.send(&support::words("SUBSCRIBE a b"));
    assert_eq!(
        read(&mut sub),
        show(b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n")
    );
    assert_eq!(
        read(&mut sub),
        show(b"*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n")
    );
    sub.send(&support::words("PSUBSCRIBE n*"));
    assert_eq!(
        read(&mut sub),
        show(b"*3\r\n$10\r\npsubscribe\r\n$2\r\nn*\r\n:3\r\n")
    );
    expect(&mut publisher, "PUBLISH a hello", ":1\r\n");
    assert_eq!(
        read(&mut sub),
        show(b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$5\r\nhello\r\n")
    );
    expect(&mut publisher, "PUBLISH news x", ":1\r\n");
    assert_eq!(
        read(&mut sub),
        show(b"*4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n$1\r\nx\r\n")
    );
    expect(&mut publisher, "PUBLISH nobody x", ":1\r\n");
    read(&mut sub);
    expect(&mut publisher, "PUBLISH zzz x", ":0\r\n");
    // Subscribed mode: only the pub/sub commands, PING, QUIT and RESET.
    expect(
        &mut sub,
        "GET a",
        "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n",
    );
    expect(&mut sub, "PING", "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    expect(&mut sub, "PING x", "*2\r\n$4\r\npong\r\n$1\r\nx\r\n");
    sub.send(&support::words("PUNSUBSCRIBE"));
    assert_eq!(
        read(&mut sub),
        show(b"*3\r\n$12\r\npunsubscribe\r\n$2\r\nn*\r\n:2\r\n")
    );
    sub.send(&support::words("UNSUBSCRIBE a"));
    assert_eq!(
        read(&mut sub),
        show(b"*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n")
    );
    sub.send(&support::words("UNSUBSCRIBE"));
    assert_eq!(
        read(&mut sub),
        show(b"*3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:0\r\n")
    );
    sub.send(&support::words("UNSUBSCRIBE"));
    assert_eq!(
        read(&mut sub),
        show(b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n")
    );
    // Out of subscribed mode.
    expect(&mut sub, "PING", "+PONG\r\n");
    expect(&mut publisher, "PUBLISH a x", ":0\r\n");
}

#[test]
fn resp3_pushes_and_normal_commands_while_subscribed() {
    let server = TestServer::default_config();
    let mut sub = server.client();
    let mut publisher = server.client();
    sub.call("HELLO 3");
    sub.send(&support::words("SUBSCRIBE a"));
    assert_eq!(
        read(&mut sub),
        show(b">3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n")
    );
    expect(&mut sub, "PING", "+PONG\r\n");
    expect(&mut sub, "ECHO x", "$1\r\nx\r\n");
    expect(&mut publisher, "PUBLISH a hi", ":1\r\n");
    assert_eq!(
        read(&mut sub),
        show(b">3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n")
    );
    sub.send(&support::words("UNSUBSCRIBE"));
    assert_eq!(
        read(&mut sub),
        show(b">3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:0\r\n")
    );
    sub.send(&support::words("PUNSUBSCRIBE"));
    assert_eq!(
        read(&mut sub),
        show(b">3\r\n$12\r\npunsubscribe\r\n_\r\n:0\r\n")
    );
}

#[test]
fn pubsub_introspection() {
    let server = TestServer::default_config();
    let mut a = server.client();
    let mut b = server.client();
    let mut c = server.client();
    a.send(&support::words("SUBSCRIBE ch1 ch2"));
    read(&mut a);
    read(&mut a);
    b.send(&support::words("SUBSCRIBE ch1"));
    read(&mut b);
    b.send(&support::words("PSUBSCRIBE p* q*"));
    read(&mut b);
    read(&mut b);
    expect(
        &mut c,
        "PUBSUB CHANNELS",
        "*2\r\n$3\r\nch1\r\n$3\r\nch2\r\n",
    );
    expect(&mut c, "PUBSUB CHANNELS *2", "*1\r\n$3\r\nch2\r\n");
    expect(
        &mut c,
        "PUBSUB NUMSUB ch1 ch2 none",
        "*6\r\n$3\r\nch1\r\n:2\r\n$3\r\nch2\r\n:1\r\n$4\r\nnone\r\n:0\r\n",
    );
    expect(&mut c, "PUBSUB NUMSUB", "*0\r\n");
    expect(&mut c, "PUBSUB NUMPAT", ":2\r\n");
    expect(&mut c, "PUBSUB SHARDCHANNELS", "*0\r\n");
    expect(
        &mut c,
        "PUBSUB foo",
        "-ERR unknown subcommand 'foo'. Try PUBSUB HELP.\r\n",
    );
    expect(
        &mut c,
        "PUBSUB NUMPAT x",
        "-ERR wrong number of arguments for 'pubsub|numpat' command\r\n",
    );
    expect(
        &mut c,
        "PUBSUB CHANNELS a b",
        "-ERR unknown subcommand or wrong number of arguments for 'CHANNELS'. Try PUBSUB HELP.\r\n",
    );
    expect(&mut c, "PUBLISH ch1 m", ":2\r\n");
    expect(&mut c, "PUBLISH ph m", ":1\r\n");
    // A closed connection's subscriptions go with it.
    drop(a);
    drop(b);
    let deadline = std::time::Instant::now() + support::IO_TIMEOUT;
    while c.call("PUBSUB NUMPAT") != b":0\r\n" || c.call("PUBSUB CHANNELS") != b"*0\r\n" {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    expect(&mut c, "PUBLISH ch1 m", ":0\r\n");
}

#[test]
fn reset_leaves_subscribed_mode() {
    let server = TestServer::default_config();
    let mut c = server.client();
    c.send(&support::words("SUBSCRIBE a"));
    read(&mut c);
    expect(&mut c, "RESET", "+RESET\r\n");
    expect(&mut c, "PING", "+PONG\r\n");
    let mut p = server.client();
    expect(&mut p, "PUBLISH a x", ":0\r\n");
}

#[test]
fn many_messages_arrive_in_order() {
    let server = TestServer::start(|c| c.workers = 2);
    let mut sub = server.client();
    sub.send(&support::words("SUBSCRIBE c"));
    read(&mut sub);
    let mut publisher = server.client();
    for i in 0..500 {
        publisher.send(&support::words(&format!("PUBLISH c {i}")));
    }
    for _ in 0..500 {
        assert_eq!(publisher.read_reply_bytes(), b":1\r\n");
    }
    for i in 0..500 {
        let want = format!(
            "*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n${}\r\n{i}\r\n",
            i.to_string().len()
        );
        assert_eq!(read(&mut sub), show(want.as_bytes()));
    }
}

#[test]
fn a_subscriber_that_does_not_read_is_disconnected() {
    let server = TestServer::default_config();
    let mut sub = server.client();
    sub.send(&support::words("SUBSCRIBE c"));
    read(&mut sub);
    let mut publisher = server.client();
    let payload = vec![b'x'; 64 << 10];
    // Far more than the socket buffers, the output pause and the 32 MiB mailbox hold.
    let mut delivered_to_none = false;
    for _ in 0..2000 {
        let reply = publisher.call_args(&[b"PUBLISH", b"c", &payload]);
        if reply == b":0\r\n" {
            delivered_to_none = true;
            break;
        }
        assert_eq!(reply, b":1\r\n");
    }
    assert!(delivered_to_none, "the subscriber was never dropped");
    let text = String::from_utf8(publisher.call("INFO stats")).unwrap();
    assert!(
        text.contains("client_output_buffer_limit_disconnections:1\r\n"),
        "{text}"
    );
}
