//! What Redis Sentinel sends to a monitored server, in the order and shape Sentinel sends it
//! (redis `src/sentinel.c`; the list is in the README, "Redis Sentinel"): the connection set-up,
//! the hello channel, and the failover transaction `MULTI; SLAVEOF …; CONFIG REWRITE; CLIENT KILL
//! TYPE normal; CLIENT KILL TYPE pubsub; EXEC`. The command table decides what MULTI queues, so
//! the transaction includes SLAVEOF whenever the table has a row for it.

mod common;

use bytes::Bytes;
use common::{start_from, test_config, Conn};
use gradus_proto::Frame;

fn ok() -> Frame {
    Frame::Simple(Bytes::from_static(b"OK"))
}

fn text(f: &Frame) -> String {
    match f {
        Frame::Bulk(b) | Frame::Simple(b) => String::from_utf8_lossy(b).into_owned(),
        Frame::Verbatim { text, .. } => String::from_utf8_lossy(text).into_owned(),
        other => panic!("not text: {other:?}"),
    }
}

#[test]
fn sentinel_connection_setup_hello_and_failover_transaction() {
    let dir = std::env::temp_dir().join(format!("gradus-sentinel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("gradus.toml");
    std::fs::write(&file, "# monitored by Sentinel\nmaxclients = 100\n").unwrap();
    let mut config = test_config();
    config.dir = dir.join("data");
    config.durability.default = "none".into();
    config.maxclients = 100;
    let (port, shared, _thread) = start_from(config, Some(file.clone()));

    // The command link: named, pinged, asked for INFO.
    let mut cmd = Conn::new(port);
    assert_eq!(
        cmd.call(&["CLIENT", "SETNAME", "sentinel-0123abcd-cmd"]),
        ok()
    );
    assert_eq!(
        cmd.call(&["PING"]),
        Frame::Simple(Bytes::from_static(b"PONG"))
    );
    let info = text(&cmd.call(&["INFO"]));
    let run_id = info
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .expect("INFO has run_id");
    assert_eq!(run_id.len(), 40, "Sentinel reads 40 characters: {run_id}");
    assert_eq!(run_id, shared.run_id);

    // The pub/sub link: named, subscribed to the hello channel, and receiving what is published.
    let mut hello = Conn::new(port);
    assert_eq!(
        hello.call(&["CLIENT", "SETNAME", "sentinel-0123abcd-pubsub"]),
        ok()
    );
    hello.send(&["SUBSCRIBE", "__sentinel__:hello"]);
    assert_eq!(
        text(&match hello.read() {
            Frame::Array(items) | Frame::Push(items) => items[1].clone(),
            other => panic!("{other:?}"),
        }),
        "__sentinel__:hello"
    );
    let payload = format!(
        "127.0.0.1,26379,{},0,mymaster,127.0.0.1,{port},0",
        "a".repeat(40)
    );
    assert_eq!(
        cmd.call(&["PUBLISH", "__sentinel__:hello", &payload]),
        Frame::Integer(1)
    );
    match hello.read() {
        Frame::Array(items) | Frame::Push(items) => assert_eq!(text(&items[2]), payload),
        other => panic!("{other:?}"),
    }

    // A client of the application, to be disconnected by the failover transaction.
    let mut app = Conn::new(port);
    assert_eq!(app.call(&["SET", "k", "v"]), ok());

    // The failover transaction, as sentinelSendSlaveOf sends it (pipelined).
    let has_slaveof = gradus_server::command::table().get(b"slaveof").is_some();
    let mut sent: Vec<Vec<&str>> = vec![vec!["MULTI"]];
    if has_slaveof {
        sent.push(vec!["SLAVEOF", "NO", "ONE"]);
    }
    sent.push(vec!["CONFIG", "REWRITE"]);
    sent.push(vec!["CLIENT", "KILL", "TYPE", "normal"]);
    sent.push(vec!["CLIENT", "KILL", "TYPE", "pubsub"]);
    sent.push(vec!["EXEC"]);
    for c in &sent {
        cmd.send(c);
    }
    assert_eq!(cmd.read(), ok());
    for c in &sent[1..sent.len() - 1] {
        assert_eq!(
            cmd.read(),
            Frame::Simple(Bytes::from_static(b"QUEUED")),
            "{c:?} must be queued in MULTI"
        );
    }
    let Frame::Array(replies) = cmd.read() else {
        panic!("EXEC must run the transaction");
    };
    let mut replies = replies.into_iter();
    if has_slaveof {
        assert_eq!(replies.next(), Some(ok()), "SLAVEOF NO ONE");
    }
    assert_eq!(replies.next(), Some(ok()), "CONFIG REWRITE");
    // Every normal client but the sender (SKIPME yes), then every subscriber.
    assert_eq!(
        replies.next(),
        Some(Frame::Integer(1)),
        "CLIENT KILL TYPE normal"
    );
    assert_eq!(
        replies.next(),
        Some(Frame::Integer(1)),
        "CLIENT KILL TYPE pubsub"
    );
    assert_eq!(
        app.try_read(),
        None,
        "the application's connection is closed"
    );
    assert_eq!(
        hello.try_read(),
        None,
        "the subscriber's connection is closed"
    );
    assert_eq!(
        cmd.call(&["PING"]),
        Frame::Simple(Bytes::from_static(b"PONG"))
    );
    // The file is rewritten (here: nothing changed, so it is as it was).
    let after = std::fs::read_to_string(&file).unwrap();
    assert!(
        after.starts_with("# monitored by Sentinel\nmaxclients = 100\n"),
        "{after}"
    );

    cmd.shutdown();
    drop(shared);
    let _ = std::fs::remove_dir_all(&dir);
}
