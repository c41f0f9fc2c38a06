//! `include/kavach.h` cannot drift from the Rust code: every exported function, every `KV_*`
//! code and every `#[repr(C)]` struct of `src/` is read from the source, turned into the C
//! declaration it must have, and compared with the header's, both ways (nothing missing,
//! nothing extra, the same types, parameter names and values).
//!
//! The header is written by hand (its comments are the C API's documentation); this test is
//! what keeps it true. The translation of Rust types to C is the table in [`c_type`]: a type
//! missing from it fails the test until it is added.

use std::collections::BTreeMap;
use std::path::Path;

const CRATE: &str = env!("CARGO_MANIFEST_DIR");

/// The C spelling of a Rust type of the API, normalised as [`norm`] does.
fn c_type(rust: &str) -> Result<String, String> {
    let rust = rust.split_whitespace().collect::<Vec<_>>().join(" ");
    let (qualifier, base) = if let Some(b) = rust.strip_prefix("*const ") {
        ("const ", b)
    } else if let Some(b) = rust.strip_prefix("*mut ") {
        ("", b)
    } else {
        let scalar = match rust.as_str() {
            "u64" => "uint64_t",
            "f64" => "double",
            "u32" => "uint32_t",
            "usize" => "size_t",
            "c_int" => "int",
            "KvOid" => "kv_oid",
            "()" => "void",
            _ => return Err(format!("no C spelling for the Rust type `{rust}`")),
        };
        return Ok(scalar.to_owned());
    };
    let pointee = match base {
        "KvPool" => "kv_pool",
        "KvMutex" => "kv_mutex",
        "c_char" => "char",
        "c_void" => "void",
        _ => return Err(format!("no C spelling for the pointer type `{rust}`")),
    };
    Ok(norm(&format!("{qualifier}{pointee} *")))
}

/// A C type with one space between tokens and around `*`.
fn norm(c: &str) -> String {
    c.replace('*', " * ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// A C declaration: return type, then (type, name) per parameter.
#[derive(Debug, PartialEq, Eq)]
struct Prototype {
    ret: String,
    params: Vec<(String, String)>,
}

impl std::fmt::Display for Prototype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        let params = if params.is_empty() {
            "void".to_owned()
        } else {
            params.join(", ")
        };
        write!(f, "{} NAME({params})", self.ret)
    }
}

/// The Rust sources of the crate, concatenated (`src/*.rs`).
fn rust_sources() -> String {
    let mut files: Vec<_> = std::fs::read_dir(Path::new(CRATE).join("src"))
        .expect("read src/")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no sources in src/");
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text of the header without its comments.
fn header() -> String {
    let h = std::fs::read_to_string(Path::new(CRATE).join("include/kavach.h")).expect("kavach.h");
    let mut out = String::new();
    let mut rest = h.as_str();
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        let end = rest[i..]
            .find("*/")
            .expect("an unterminated comment in kavach.h");
        rest = &rest[i + end + 2..];
    }
    out.push_str(rest);
    out.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `extern "C" fn`s of `src/` that are not part of the C API: signal handlers, passed to
/// `sigaction` by address. Each must be private and not `no_mangle` (so it is not exported).
const NOT_EXPORTED: [&str; 1] = ["on_sigsegv"];

/// Every `extern "C" fn` of the sources, translated to C. Each must be `#[unsafe(no_mangle)]`
/// and `pub`, or it is not what C links against (except the private ones of [`NOT_EXPORTED`]).
fn rust_functions(src: &str) -> Result<BTreeMap<String, Prototype>, String> {
    let mut out = BTreeMap::new();
    let mut rest = src;
    while let Some(i) = rest.find("extern \"C\" fn ") {
        let before = &rest[..i];
        let after = &rest[i + "extern \"C\" fn ".len()..];
        let open = after.find('(').ok_or("no `(` after extern \"C\" fn")?;
        let name = after[..open].trim().to_owned();
        let close = after.find(')').ok_or_else(|| format!("{name}: no `)`"))?;
        let body = after.find('{').ok_or_else(|| format!("{name}: no body"))?;
        let head = before.rsplit_once('\n').map_or(before, |(_, l)| l);
        let attrs = before
            .trim_end()
            .strip_suffix(head.trim())
            .unwrap_or(before)
            .trim_end();
        if NOT_EXPORTED.contains(&name.as_str()) {
            if head.trim_start().starts_with("pub") || attrs.ends_with("#[unsafe(no_mangle)]") {
                return Err(format!(
                    "{name}: a signal handler must be private, not exported"
                ));
            }
            rest = &after[body..];
            continue;
        }
        if !head.trim_start().starts_with("pub ") || !attrs.ends_with("#[unsafe(no_mangle)]") {
            return Err(format!(
                "{name}: an extern \"C\" fn must be `pub` and `#[unsafe(no_mangle)]`"
            ));
        }
        let mut params = Vec::new();
        for p in after[open + 1..close].split(',').map(str::trim) {
            if p.is_empty() {
                continue;
            }
            let (n, t) = p
                .split_once(':')
                .ok_or_else(|| format!("{name}: parameter `{p}`"))?;
            params.push((
                c_type(t).map_err(|e| format!("{name}: {e}"))?,
                n.trim().to_owned(),
            ));
        }
        let ret = match after[close + 1..body].trim().strip_prefix("->") {
            Some(t) => c_type(t).map_err(|e| format!("{name}: {e}"))?,
            None => "void".to_owned(),
        };
        if out
            .insert(name.clone(), Prototype { ret, params })
            .is_some()
        {
            return Err(format!("{name} is defined twice"));
        }
        rest = &after[body..];
    }
    Ok(out)
}

/// Every function declaration of the header (`type name(params);` at file scope).
fn c_functions(h: &str) -> Result<BTreeMap<String, Prototype>, String> {
    let mut out = BTreeMap::new();
    let code: String = h
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join(" ");
    for decl in code.split([';', '{', '}']).map(str::trim) {
        let Some(open) = decl.find('(') else {
            continue;
        };
        if decl.starts_with("typedef") || decl.starts_with("extern") || !decl.ends_with(')') {
            continue;
        }
        let (ret, name) = split_declarator(&decl[..open])
            .ok_or_else(|| format!("cannot read the declaration `{decl}`"))?;
        let mut params = Vec::new();
        let inner = decl[open + 1..decl.len() - 1].trim();
        if inner != "void" {
            for p in inner.split(',') {
                let (t, n) = split_declarator(p)
                    .ok_or_else(|| format!("{name}: parameter `{p}` has no name"))?;
                params.push((t, n));
            }
        }
        if out
            .insert(name.clone(), Prototype { ret, params })
            .is_some()
        {
            return Err(format!("{name} is declared twice in kavach.h"));
        }
    }
    Ok(out)
}

/// `const char *path` -> (`const char *`, `path`).
fn split_declarator(d: &str) -> Option<(String, String)> {
    let d = norm(d);
    let (t, n) = d.rsplit_once(' ')?;
    let ident = |s: &str| {
        s.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
            && s.chars().next().is_some_and(|c| !c.is_ascii_digit())
    };
    ident(n).then(|| (t.to_owned(), n.to_owned()))
}

/// What differs between the exported functions and the declared ones.
fn differences(rust: &BTreeMap<String, Prototype>, c: &BTreeMap<String, Prototype>) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, r) in rust {
        match c.get(name) {
            None => problems.push(format!("{name} is exported but not declared: {r}")),
            Some(h) if h != r => {
                problems.push(format!("{name}: the Rust code says {r}, kavach.h says {h}"))
            }
            Some(_) => {}
        }
    }
    for (name, h) in c {
        if !rust.contains_key(name) {
            problems.push(format!("{name} is declared ({h}) but not exported"));
        }
    }
    problems
}

#[test]
fn every_exported_function_is_declared_with_its_rust_signature() {
    let rust = rust_functions(&rust_sources()).unwrap_or_else(|e| panic!("src/: {e}"));
    let c = c_functions(&header()).unwrap_or_else(|e| panic!("kavach.h: {e}"));
    assert!(
        rust.len() >= 20,
        "found only {} exported functions",
        rust.len()
    );
    let problems = differences(&rust, &c);
    assert!(
        problems.is_empty(),
        "kavach.h against src/:\n{}",
        problems.join("\n")
    );
}

/// `pub const KV_X: c_int = N;` against `#define KV_X N`, both ways.
#[test]
fn every_error_code_is_defined_with_its_value() {
    let mut rust = BTreeMap::new();
    for line in rust_sources().lines() {
        let Some(rest) = line.trim().strip_prefix("pub const KV_") else {
            continue;
        };
        let (name, value) = rest
            .split_once(": c_int =")
            .unwrap_or_else(|| panic!("a KV_ constant that is not a c_int: {line}"));
        let value: i64 = value
            .trim()
            .trim_end_matches(';')
            .parse()
            .expect("a literal");
        assert!(rust.insert(format!("KV_{name}"), value).is_none(), "{line}");
    }
    let mut c = BTreeMap::new();
    for line in header().lines() {
        let mut w = line.split_whitespace();
        if w.next() != Some("#define") {
            continue;
        }
        let (Some(name), Some(value)) = (w.next(), w.next()) else {
            continue;
        };
        if let (true, Ok(v)) = (name.starts_with("KV_"), value.parse::<i64>()) {
            assert!(
                c.insert(name.to_owned(), v).is_none(),
                "{name} defined twice"
            );
        }
    }
    assert!(rust.len() >= 10, "found only {} codes", rust.len());
    assert_eq!(rust, c, "KV_* codes: src/ (left) against kavach.h (right)");
}

/// Each `#[repr(C)] pub struct KvX` against `typedef struct kv_x { ... } kv_x;`.
#[test]
fn every_shared_struct_has_the_same_fields() {
    let src = rust_sources();
    let mut rust = BTreeMap::new();
    for (i, _) in src.match_indices("#[repr(C)]") {
        let rest = &src[i..];
        let Some(s) = rest.find("pub struct ") else {
            continue;
        };
        let rest = &rest[s + "pub struct ".len()..];
        let (name, rest) = rest.split_once('{').expect("a struct body");
        let body = rest.split_once('}').expect("the end of the struct").0;
        let fields: Vec<String> = body
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with("//") && !l.is_empty())
            .map(|l| {
                let (n, t) = l
                    .trim_start_matches("pub ")
                    .trim_end_matches(',')
                    .split_once(':')
                    .unwrap_or_else(|| panic!("{name}: field `{l}`"));
                let t = t.trim();
                match t.strip_prefix('[').and_then(|a| a.strip_suffix(']')) {
                    Some(array) => {
                        let (elem, len) = array.split_once(';').expect("[T; N]");
                        let elem = c_type(elem).unwrap_or_else(|e| panic!("{name}: {e}"));
                        format!("{elem} {}[{}]", n.trim(), len.trim())
                    }
                    None => {
                        let t = c_type(t).unwrap_or_else(|e| panic!("{name}: {e}"));
                        format!("{t} {}", n.trim())
                    }
                }
            })
            .collect();
        let c_name = match name.trim() {
            "KvOid" => "kv_oid",
            "KvMutex" => "kv_mutex",
            other => panic!("no C name for the #[repr(C)] struct {other}"),
        };
        rust.insert(c_name.to_owned(), fields);
    }
    let h = header();
    let mut c = BTreeMap::new();
    for (i, _) in h.match_indices("typedef struct ") {
        let rest = &h[i + "typedef struct ".len()..];
        let (name, rest) = rest.split_once(['{', ';', ' ']).expect("a name");
        let rest = rest.trim_start();
        let Some(body) = rest
            .strip_prefix('{')
            .map(|r| r.split_once('}').expect("end").0)
        else {
            continue; // An opaque type (kv_pool).
        };
        let fields: Vec<String> = body
            .split(';')
            .map(|f| norm(f).replace(" [", "["))
            .filter(|f| !f.is_empty())
            .collect();
        c.insert(name.trim().to_owned(), fields);
    }
    assert_eq!(rust.len(), 2, "{rust:?}");
    assert_eq!(rust, c, "structs: src/ (left) against kavach.h (right)");
}

/// The checks above catch drift: a changed type, a renamed parameter, a missing and an extra
/// declaration.
#[test]
fn the_comparison_sees_drift() {
    let rust = rust_functions(&rust_sources()).expect("src/");
    let h = header();
    for (from, to) in [
        (
            "kv_oid kv_root(kv_pool *pop, size_t size)",
            "kv_oid kv_root(kv_pool *pop, uint64_t size)",
        ),
        (
            "int kv_tx_free(kv_pool *pop, kv_oid oid)",
            "int kv_tx_free(kv_pool *pool, kv_oid oid)",
        ),
        ("const char *kv_errormsg(void);", ""),
        (
            "int kv_tx_active(const kv_pool *pop);",
            "int kv_tx_active(const kv_pool *pop); int kv_gone(void);",
        ),
        (
            "int kv_tx_active(const kv_pool *pop)",
            "int kv_tx_active(kv_pool *pop)",
        ),
        (
            "void kv_tx_abort(kv_pool *pop, int err)",
            "int kv_tx_abort(kv_pool *pop, int err)",
        ),
    ] {
        assert!(h.contains(from), "the header no longer has `{from}`");
        let c = c_functions(&h.replace(from, to)).expect("parse");
        assert!(
            !differences(&rust, &c).is_empty(),
            "replacing `{from}` by `{to}` went unnoticed"
        );
    }
}
