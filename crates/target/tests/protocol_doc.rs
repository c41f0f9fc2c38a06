//! `docs/format/target-protocol.md` against the code: its field tables, constants, operations
//! and statuses must say exactly what `target::proto` says.

use pmem::format_doc::{backticked, check_fields, compare_constants, named_rows, verdict};
use std::path::PathBuf;
use target::proto::{self, hello, info, op, reply, request, status};

fn doc() -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/format/target-protocol.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Number(u64),
    Bytes(Vec<u8>),
}

fn parse_value(cell: &str) -> Result<Value, String> {
    if let Some(b) = backticked(cell) {
        return Ok(Value::Bytes(b.as_bytes().to_vec()));
    }
    cell.parse::<u64>()
        .map(Value::Number)
        .map_err(|_| format!("value `{cell}` is neither a decimal nor `bytes`"))
}

/// The rows of the table after `marker`: (name, value).
fn table(md: &str, marker: &str, header: &str) -> Vec<(String, Value)> {
    named_rows(md, marker, header, 0)
        .unwrap_or_else(|e| panic!("{marker}: {e}"))
        .into_iter()
        .map(|r| {
            let v = parse_value(r.cells[1]).unwrap_or_else(|e| panic!("{e} in `{}`", r.line));
            (r.name.to_string(), v)
        })
        .collect()
}

fn check(md: &str, marker: &str, header: &str, code: &[(&str, Value)]) -> Result<(), String> {
    let doc = table(md, marker, header);
    let required: Vec<&str> = code.iter().map(|(n, _)| *n).collect();
    verdict(marker, compare_constants(&doc, code, &required))
}

fn n(v: impl Into<u64>) -> Value {
    Value::Number(v.into())
}

#[test]
fn field_tables_match_the_code() {
    let md = doc();
    let mut errors = Vec::new();
    for (name, fields) in [
        ("request", &request::FIELDS[..]),
        ("reply", &reply::FIELDS[..]),
        ("hello", &hello::FIELDS[..]),
        ("info", &info::FIELDS[..]),
    ] {
        if let Err(e) = check_fields(&md, name, fields) {
            errors.push(e);
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    // The headers fill exactly HEADER_BYTES, the fixed HELLO and the info their sizes.
    let end = |f: &[pmem::layout::Field]| f.last().map(|l| l.offset + l.size).unwrap();
    assert_eq!(end(&request::FIELDS), proto::HEADER_BYTES);
    assert_eq!(end(&reply::FIELDS), proto::HEADER_BYTES);
    assert_eq!(end(&hello::FIELDS), proto::HELLO_FIXED_BYTES);
    assert_eq!(end(&info::FIELDS), proto::INFO_BYTES);
}

#[test]
fn constants_ops_and_statuses_match_the_code() {
    let md = doc();
    let constants = vec![
        ("PROTOCOL_VERSION", n(proto::PROTOCOL_VERSION)),
        ("REQUEST_MAGIC", Value::Bytes(proto::REQUEST_MAGIC.to_vec())),
        ("REPLY_MAGIC", Value::Bytes(proto::REPLY_MAGIC.to_vec())),
        ("HEADER_BYTES", n(proto::HEADER_BYTES as u64)),
        ("MAX_PAYLOAD", n(proto::MAX_PAYLOAD)),
        ("MAX_MESSAGE", n(proto::MAX_MESSAGE)),
        ("HELLO_FIXED_BYTES", n(proto::HELLO_FIXED_BYTES as u64)),
        ("INFO_BYTES", n(proto::INFO_BYTES as u64)),
        ("FLAG_CREATE", n(proto::FLAG_CREATE)),
        ("INFO_CREATED", n(proto::INFO_CREATED)),
        ("TENANT_CLASS_MAX", n(proto::TENANT_CLASS_MAX)),
        ("TENANT_LEVEL_MAX", n(proto::TENANT_LEVEL_MAX)),
        ("MAX_STATS", n(proto::MAX_STATS)),
    ];
    let ops: Vec<(&str, Value)> = op::ALL.iter().map(|&(s, v)| (s, n(v))).collect();
    let statuses: Vec<(&str, Value)> = status::ALL.iter().map(|&(s, v)| (s, n(v))).collect();
    let errors: Vec<String> = [
        check(
            &md,
            "<!-- constants -->",
            "| constant | value | meaning |",
            &constants,
        ),
        check(
            &md,
            "<!-- ops -->",
            "| op | value | request | OK reply data |",
            &ops,
        ),
        check(
            &md,
            "<!-- statuses -->",
            "| status | value | meaning |",
            &statuses,
        ),
    ]
    .into_iter()
    .filter_map(Result::err)
    .collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn the_documented_checksums_are_the_ones_on_the_wire() {
    // "header_crc: CRC-32C of bytes 0 to 43"; "body_crc: CRC-32C of the body".
    let body = b"some data";
    let h = proto::RequestHeader {
        op: op::WRITE,
        flags: 0,
        id: 3,
        offset: 8,
        length: body.len() as u64,
        body_len: body.len() as u32,
        body_crc: crc32c::crc32c(body),
    }
    .encode();
    assert_eq!(&h[..4], b"KVTQ");
    assert_eq!(
        u32::from_le_bytes(h[44..48].try_into().unwrap()),
        crc32c::crc32c(&h[..44])
    );
    assert_eq!(
        u32::from_le_bytes(h[36..40].try_into().unwrap()),
        crc32c::crc32c(body)
    );
    // Reply: "CRC-32C over the message then the data".
    let r = proto::ReplyHeader {
        op: op::READ,
        status: status::BUSY,
        id: 3,
        code: -1,
        message_len: 2,
        data_len: 0,
        body_crc: crc32c::crc32c(b"hi"),
    }
    .encode();
    assert_eq!(&r[..4], b"KVTR");
    assert_eq!(i32::from_le_bytes(r[16..20].try_into().unwrap()), -1);
    assert_eq!(
        u32::from_le_bytes(r[44..48].try_into().unwrap()),
        crc32c::crc32c(&r[..44])
    );
}

#[test]
fn the_documented_stats_fields_are_the_ones_the_controller_sends() {
    // Every key of a STATS document with QoS on must be named (in backticks) in the section
    // "Quality of service".
    let md = doc();
    let start = md
        .find("## Quality of service")
        .expect("a section \"Quality of service\"");
    let end = md[start + 3..]
        .find("\n## ")
        .map_or(md.len(), |e| start + 3 + e);
    let section = &md[start..end];
    let stats = haq::stats::ControllerStats {
        policy: haq::arbiter::Policy::Drr,
        weights: haq::arbiter::ArbiterConfig::dissertation_drr().weights,
        tenants: vec![haq::stats::TenantStats {
            name: "job".into(),
            class: haq::class::Class::High,
            commands: 1,
            bytes: 2,
            queued: 3,
            max_queued: 4,
            bandwidth_bps: 5.0,
            iops: 6.0,
            wait_p50_us: 7.0,
            wait_p99_us: 8.0,
            latency_p99_us: 9.0,
        }],
        uptime_s: 10.0,
    };
    let v = serde_json::to_value(&stats).unwrap();
    let mut keys = vec!["qos".to_string()];
    let mut collect = |o: &serde_json::Value| {
        for k in o.as_object().expect("an object").keys() {
            keys.push(k.clone());
        }
    };
    collect(&v);
    collect(&v["weights"]);
    collect(&v["tenants"][0]);
    let missing: Vec<&String> = keys
        .iter()
        .filter(|k| !section.contains(&format!("`{k}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "STATS fields not documented: {missing:?}"
    );
    // And the values of the enumerations, as they are written.
    for (what, text) in [
        (
            "policy",
            serde_json::to_value(haq::arbiter::Policy::Wrr).unwrap(),
        ),
        (
            "class",
            serde_json::to_value(haq::class::Class::Urgent).unwrap(),
        ),
    ] {
        let t = format!("`{text}`");
        assert!(section.contains(&t), "{what} value {t} not documented");
    }
}
