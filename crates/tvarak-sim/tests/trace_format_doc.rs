//! `docs/format/tvarak-trace.md` against the code: its header field table, constants, op values
//! and worked example must say exactly what `tvarak_sim::trace` does.

use pmem::format_doc::{
    ConstValue, check_fields, compare_constants, named_rows, parse_constant, verdict,
};
use std::io::Read;
use std::path::PathBuf;
use tvarak_sim::trace::{self, Event, TraceHeader, header, op};

fn doc() -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/format/tvarak-trace.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn table(md: &str, marker: &str, header_row: &str) -> Vec<(String, ConstValue)> {
    named_rows(md, marker, header_row, 0)
        .unwrap_or_else(|e| panic!("{marker}: {e}"))
        .into_iter()
        .map(|r| {
            let v = parse_constant(r.cells[1]).unwrap_or_else(|e| panic!("{e} in `{}`", r.line));
            (r.name.to_string(), v)
        })
        .collect()
}

fn n(v: impl Into<u64>) -> ConstValue {
    ConstValue::number(v.into())
}

#[test]
fn header_fields_match_the_code() {
    let md = doc();
    if let Err(e) = check_fields(&md, "header", &header::FIELDS) {
        panic!("{e}");
    }
    let last = header::FIELDS.last().unwrap();
    assert_eq!(last.offset + last.size, trace::HEADER_BYTES);
}

#[test]
fn constants_and_ops_match_the_code() {
    let md = doc();
    let constants = vec![
        ("MAGIC", ConstValue::Bytes(trace::MAGIC.to_vec())),
        ("VERSION", n(trace::VERSION)),
        ("MIN_VERSION", n(trace::MIN_VERSION)),
        ("HEADER_BYTES", n(trace::HEADER_BYTES as u64)),
        ("FLAG_WITH_DATA", n(trace::FLAG_WITH_DATA)),
        ("MAX_NAME_BYTES", n(trace::MAX_NAME_BYTES)),
        ("MAX_CORES", n(trace::MAX_CORES)),
        ("MAX_PM_BYTES", n(trace::MAX_PM_BYTES)),
        ("MAX_ACCESS_LEN", n(trace::MAX_ACCESS_LEN)),
        ("MAX_TX_RANGES", n(trace::MAX_TX_RANGES)),
    ];
    let ops: Vec<(&str, ConstValue)> = op::ALL.iter().map(|&(s, v)| (s, n(v))).collect();
    let errors: Vec<String> = [
        (
            "<!-- constants -->",
            "| constant | value | meaning |",
            &constants,
        ),
        (
            "<!-- ops -->",
            "| op | value | operands after the op byte and the core |",
            &ops,
        ),
    ]
    .into_iter()
    .filter_map(|(marker, header_row, code)| {
        let d = table(&md, marker, header_row);
        let required: Vec<&str> = code.iter().map(|(name, _)| *name).collect();
        verdict(marker, compare_constants(&d, code, &required)).err()
    })
    .collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// The hex bytes of the code block after `marker`.
fn hex_block(md: &str, marker: &str) -> Vec<u8> {
    let at = md
        .find(marker)
        .unwrap_or_else(|| panic!("{marker} missing"));
    let rest = &md[at..];
    let start = rest.find("```\n").expect("a code block") + 4;
    let end = start + rest[start..].find("```").expect("its end");
    rest[start..end]
        .split_whitespace()
        .map(|h| u8::from_str_radix(h, 16).unwrap_or_else(|e| panic!("`{h}`: {e}")))
        .collect()
}

#[test]
fn the_worked_example_is_what_the_writer_writes() {
    let md = doc();
    let h = TraceHeader {
        name: "ex".into(),
        pm_bytes: 4096,
        cores: 2,
        with_data: true,
    };
    let events = vec![
        Event::Store {
            core: 1,
            addr: 64,
            len: 2,
            data: Some(vec![0xaa, 0xbb]),
        },
        Event::Flush { core: 1, addr: 64 },
        Event::Fence { core: 1 },
        Event::Load {
            core: 0,
            addr: 128,
            len: 8,
        },
        Event::Load {
            core: 1,
            addr: 66,
            len: 64,
        },
    ];
    let bytes = trace::to_bytes(&h, &events).unwrap();
    let head = hex_block(&md, "<!-- example: header -->");
    assert_eq!(&bytes[..head.len()], &head[..], "header and name");
    let mut body = Vec::new();
    flate2::read::DeflateDecoder::new(&bytes[head.len()..])
        .read_to_end(&mut body)
        .unwrap();
    assert_eq!(body, hex_block(&md, "<!-- example: body -->"), "body");
    assert_eq!(trace::from_bytes(&bytes).unwrap(), (h, events));
}
