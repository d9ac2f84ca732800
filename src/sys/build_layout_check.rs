//! Part of build.rs (included there with `#[path]`), not of the library:
//! the pre-generated bindings checked against the installed headers.
//!
//! The committed bindings (`src/sys/pregenerated/`) were generated from one
//! rdma-core release; the build may find another. The shims are compiled
//! against the installed headers, so a struct the two lay out differently
//! is read or written with the wrong layout: rdma-core 56's
//! `ibv_query_port` shim writes 56 bytes into the 52-byte
//! `ibv_port_attr` of rdma-core 44's bindings. Before such bindings are
//! used, this module writes a C file of `_Static_assert`s, one per fact
//! bindgen recorded in its layout tests (size, alignment, offset of each
//! field), for every struct the crate's code names and every struct those
//! hold by value, and compiles it against the installed headers. A failed
//! assertion stops the build with the structs that differ.
//!
//! The facts come from the bindings themselves (bindgen's
//! `["Size of T"][size_of::<T>() - N]` lines), not from a hand-kept list.
//! A struct the provider allocates and the crate only reads through a
//! pointer, or one the C call reads and writes only as far as the crate
//! asks, may grow at its end ([`MAY_GROW`]); every other struct must
//! match exactly, because Rust allocates it and C fills it by the size
//! the header gives.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// Structs that may be larger in the installed headers than in the
/// bindings, as long as every field the bindings have sits at the same
/// offset: what a newer release appended the crate neither reads nor
/// allocates.
pub const MAY_GROW: [(&str, &str); 5] = [
    (
        "ibv_qp_ex",
        "the provider allocates it (ibv_qp_to_qp_ex); the crate calls entries at their offsets",
    ),
    (
        "ibv_cq_ex",
        "the provider allocates it (ibv_create_cq_ex); the crate reads entries at their offsets",
    ),
    (
        "mlx5dv_qp_ex",
        "the provider allocates it (mlx5dv_qp_ex_from_ibv_qp_ex)",
    ),
    (
        "mlx5dv_context",
        "mlx5dv_query_device fills only the fields whose comp_mask bit the crate sets (src/mlx5/caps.rs)",
    ),
    (
        "mlx5dv_obj",
        "mlx5dv_init_obj reads and writes only the members whose MLX5DV_OBJ_* bit the crate passes \
         (QP, CQ, AH: src/direct/mod.rs); a release after 44 appended devx",
    ),
];

/// One layout fact bindgen asserted: `what` of Rust type `ty` (and `field`)
/// is `value`.
#[derive(Debug, Clone)]
struct Fact {
    kind: Kind,
    ty: String,
    field: Option<String>,
    value: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Size,
    Align,
    Offset,
}

/// What the bindings say about their types.
#[derive(Default)]
struct Bindings {
    facts: Vec<Fact>,
    /// `struct` or `union`, for each type the bindings define.
    keyword: BTreeMap<String, &'static str>,
    /// The field types of each type (field name → type name), for the
    /// fields whose type is a plain path.
    fields: BTreeMap<String, Vec<(String, String)>>,
}

fn parse(text: &str, into: &mut Bindings) {
    // Layout facts: `["Size of T"][... - 52usize];` (possibly wrapped).
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for (kind, marker) in [
        (Kind::Size, "[\"Size of "),
        (Kind::Align, "[\"Alignment of "),
        (Kind::Offset, "[\"Offset of field: "),
    ] {
        for (at, _) in flat.match_indices(marker) {
            let rest = &flat[at + marker.len()..];
            let Some(end) = rest.find("\"]") else {
                continue;
            };
            let name = &rest[..end];
            let after = &rest[end..];
            let Some(stop) = after.find("usize]") else {
                continue;
            };
            let value = after[..stop]
                .rsplit(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|v| v.parse().ok());
            let Some(value) = value else { continue };
            let (ty, field) = match name.split_once("::") {
                Some((t, f)) => (t.to_string(), Some(f.to_string())),
                None => (name.to_string(), None),
            };
            into.facts.push(Fact {
                kind,
                ty,
                field,
                value,
            });
        }
    }
    // Definitions: `pub struct T {` / `pub union T {`, then `pub f: Ty,`.
    let mut current: Option<String> = None;
    for line in text.lines() {
        let l = line.trim();
        for keyword in ["struct", "union"] {
            if let Some(rest) = l.strip_prefix(&format!("pub {keyword} ")) {
                if let Some(name) = rest.strip_suffix(" {") {
                    let name = name.trim().to_string();
                    into.keyword.insert(name.clone(), keyword);
                    current = Some(name);
                }
            }
        }
        if l == "}" {
            current = None;
            continue;
        }
        if let (Some(ty), Some(rest)) = (&current, l.strip_prefix("pub ")) {
            if let Some((field, fty)) = rest.split_once(": ") {
                let fty = fty.trim_end_matches(',').trim();
                into.fields
                    .entry(ty.clone())
                    .or_default()
                    .push((field.to_string(), fty.to_string()));
            }
        }
    }
}

/// The type names a field type holds by value: `ibv_gid`, `[ibv_sge; 4usize]`.
fn by_value(fty: &str) -> Option<&str> {
    if fty.starts_with('*') || fty.contains("Option<") || fty.contains("fn(") {
        return None;
    }
    let inner = fty.trim_start_matches('[').split(';').next()?.trim();
    let name = inner.rsplit("::").next()?;
    (!name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_')).then_some(name)
}

/// The Rust keywords bindgen escapes with a trailing `_` (C's `type`,
/// `priv`, ...), to name the C field.
fn c_field(rust: &str) -> String {
    // Rust keywords that are C identifiers, which bindgen suffixes with `_`
    // (`struct mlx5dv_obj`'s `in` is `in_`).
    const KEYWORDS: [&str; 33] = [
        "type", "priv", "ref", "box", "move", "match", "mod", "fn", "impl", "use", "self", "async",
        "await", "dyn", "override", "final", "in", "as", "loop", "let", "mut", "pub", "crate",
        "super", "trait", "where", "unsafe", "yield", "macro", "abstract", "become", "virtual",
        "try",
    ];
    match rust.strip_suffix('_') {
        Some(k) if KEYWORDS.contains(&k) => k.to_string(),
        _ => rust.to_string(),
    }
}

/// The identifiers the crate's code names (outside the bindings).
fn named_in_sources(dir: &Path, names: &mut BTreeSet<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if !path.ends_with("pregenerated") {
                named_in_sources(&path, names);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            if let Ok(text) = fs::read_to_string(&path) {
                for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
                    if !word.is_empty() {
                        names.insert(word.to_string());
                    }
                }
            }
        }
    }
}

/// Where an anonymous type (`T__bindgen_ty_1`) sits: in which named type,
/// under which C member path, at which offset. bindgen records no offset
/// for an anonymous member (`__bindgen_anon_1`): the offsets of what lies
/// in one are then checked relative to its first field (`offset` is
/// `None`), and its place by the named fields around it.
struct Place {
    root: String,
    path: Vec<String>,
    offset: Option<u64>,
}

/// The C check: `_Static_assert`s, each with a message naming the struct
/// (the first word after `mlx5dv-layout:`), and how many structs and
/// assertions it has.
pub struct Check {
    pub source: String,
    pub structs: usize,
    pub asserts: usize,
}

/// Writes the check for the pre-generated bindings `bindings` (and the
/// rdma_cm ones, when given) of the types the sources under `sources`
/// name (the library, its tests and examples: all pass them to C).
pub fn make(bindings: &[PathBuf], sources: &[&Path], headers: &[&str]) -> Result<Check, String> {
    let mut b = Bindings::default();
    for p in bindings {
        let text =
            fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        parse(&text, &mut b);
    }
    let anon = |t: &str| t.contains("__bindgen_ty_");
    // Which anonymous type lies where: parent type, member, offset.
    let offset_of = |ty: &str, field: &str| {
        b.facts
            .iter()
            .find(|f| f.kind == Kind::Offset && f.ty == ty && f.field.as_deref() == Some(field))
            .map(|f| f.value)
    };
    let mut parent: BTreeMap<String, (String, String)> = BTreeMap::new();
    for (ty, fields) in &b.fields {
        for (f, fty) in fields {
            if anon(fty) && by_value(fty) == Some(fty.as_str()) {
                parent.insert(fty.clone(), (ty.clone(), f.clone()));
            }
        }
    }
    let place = |ty: &str| -> Option<Place> {
        let mut path = Vec::new();
        let mut offset = Some(0);
        let mut t = ty.to_string();
        while anon(&t) {
            let (p, f) = parent.get(&t)?;
            offset = offset.zip(offset_of(p, f)).map(|(a, b)| a + b);
            if !f.starts_with("__bindgen_anon_") {
                path.push(c_field(f));
            }
            t = p.clone();
        }
        path.reverse();
        Some(Place {
            root: t,
            path,
            offset,
        })
    };

    // The types the crate's code names, and what they hold by value.
    let mut words = BTreeSet::new();
    for dir in sources {
        named_in_sources(dir, &mut words);
    }
    let allowlisted = |t: &str| {
        ["ibv_", "mlx5dv_", "mlx5_", "rdma_"]
            .iter()
            .any(|p| t.starts_with(p))
    };
    let mut todo: Vec<String> = b
        .keyword
        .keys()
        .filter(|t| !anon(t) && allowlisted(t) && words.contains(*t))
        .cloned()
        .collect();
    let mut checked = BTreeSet::new();
    while let Some(t) = todo.pop() {
        if !checked.insert(t.clone()) {
            continue;
        }
        for (_, fty) in b.fields.get(&t).into_iter().flatten() {
            if let Some(inner) = by_value(fty) {
                if b.keyword.contains_key(inner) && (allowlisted(inner) || anon(inner)) {
                    todo.push(inner.to_string());
                }
            }
        }
    }

    let mut out = String::new();
    out.push_str(
        "/* Generated by build.rs (src/sys/build_layout_check.rs): the layout\n \
         * of the pre-generated bindings, asserted against the installed headers. */\n\
         #include <stddef.h>\n",
    );
    for h in headers {
        let _ = writeln!(out, "#include \"{h}\"");
    }
    let grows = |t: &str| MAY_GROW.iter().any(|(n, _)| *n == t);
    let mut asserts = 0;
    let mut structs = 0;
    for t in &checked {
        let Some(p) = place(t) else { continue };
        let Some(kw) = b.keyword.get(&p.root) else {
            continue;
        };
        let c_type = format!("{kw} {}", p.root);
        // The C expression of the member this type is (anonymous types).
        let member = p.path.join(".");
        let c_path = |field: &str| {
            let mut path = p.path.clone();
            path.push(c_field(field));
            path.join(".")
        };
        // Without the member's own offset: the first of its fields, whose
        // offset the others are measured from.
        let first = b
            .facts
            .iter()
            .filter(|f| &f.ty == t && f.kind == Kind::Offset)
            .filter_map(|f| Some((f.field.as_deref()?, f.value)))
            .filter(|(f, _)| !f.starts_with("__bindgen_anon_") && !f.starts_with("_bitfield"))
            .min_by_key(|&(_, v)| v);
        let mut any = false;
        for f in b.facts.iter().filter(|f| &f.ty == t) {
            let (expr, op, what, value) = match (f.kind, &f.field) {
                (Kind::Offset, Some(field)) => {
                    if field.starts_with("__bindgen_anon_") || field.starts_with("_bitfield") {
                        continue;
                    }
                    let path = c_path(field);
                    match (p.offset, first) {
                        (Some(base), _) => (
                            format!("offsetof({c_type}, {path})"),
                            "==",
                            format!("offset of {path}"),
                            base + f.value,
                        ),
                        (None, Some((f0, v0))) if f0 != field.as_str() => (
                            format!(
                                "offsetof({c_type}, {path}) - offsetof({c_type}, {}) + {v0}",
                                c_path(f0)
                            ),
                            "==",
                            format!("offset of {path} from {}", c_path(f0)),
                            f.value,
                        ),
                        _ => continue,
                    }
                }
                (Kind::Size, None) if member.is_empty() && !anon(t) => {
                    let op = if grows(t) { ">=" } else { "==" };
                    (format!("sizeof({c_type})"), op, "size".to_string(), f.value)
                }
                (Kind::Size, None) if !member.is_empty() => (
                    format!("sizeof((({c_type} *)0)->{member})"),
                    "==",
                    format!("size of {member}"),
                    f.value,
                ),
                (Kind::Align, None) if !anon(t) => (
                    format!("_Alignof({c_type})"),
                    "==",
                    "alignment".to_string(),
                    f.value,
                ),
                _ => continue,
            };
            // e.g. "ibv_port_attr size: 52 in the bindings, another in the
            // installed headers".
            let differs = if op == ">=" {
                format!("below the bindings' {value} in the installed headers")
            } else {
                format!("{value} in the bindings, another in the installed headers")
            };
            let _ = writeln!(
                out,
                "_Static_assert({expr} {op} {value}, \"mlx5dv-layout: {} {what}: {differs}\");",
                p.root
            );
            asserts += 1;
            any = true;
        }
        structs += usize::from(any && !anon(t));
    }
    Ok(Check {
        source: out,
        structs,
        asserts,
    })
}

/// The structs a failed check names, each with the facts that failed,
/// read from the compiler's messages.
pub fn failures(compiler_output: &str) -> BTreeMap<String, Vec<String>> {
    let mut by_struct: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // gcc: `error: static assertion failed: "mlx5dv-layout: ..."`; clang:
    // `error: static assertion failed due to requirement '...': mlx5dv-layout: ...`.
    // (The source line the compiler quotes after it is not a message.)
    for line in compiler_output.lines() {
        if !line.contains("static assertion failed") {
            continue;
        }
        let Some(at) = line.find("mlx5dv-layout: ") else {
            continue;
        };
        let msg = line[at + "mlx5dv-layout: ".len()..].trim_end_matches(['"', ' ']);
        let (ty, what) = msg.split_once(' ').unwrap_or((msg, ""));
        let v = by_struct.entry(ty.to_string()).or_default();
        if !v.iter().any(|w| w == what) {
            v.push(what.to_string());
        }
    }
    by_struct
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed() -> Check {
        let dir = Path::new("src/sys/pregenerated");
        let files = [dir.join("bindings.rs"), dir.join("cm_bindings.rs")];
        let sources = [Path::new("src"), Path::new("tests"), Path::new("examples")];
        make(&files, &sources, &["wrapper.h", "cm_wrapper.h"]).unwrap()
    }

    #[test]
    fn the_structs_the_crate_hands_to_c_are_checked_field_by_field() {
        let c = committed();
        for ty in [
            "struct ibv_port_attr",
            "struct ibv_qp_ex",
            "struct mlx5dv_context",
            "struct ibv_device_attr",
            "struct ibv_device_attr_ex",
            "struct ibv_qp_attr",
            "struct ibv_qp_init_attr_ex",
            "struct ibv_wc",
            "struct ibv_cq_ex",
            "struct mlx5dv_qp_ex",
            "struct ibv_sge",
            "struct rdma_cm_id",
            "struct rdma_conn_param",
        ] {
            assert!(
                c.source.contains(&format!("sizeof({ty})")),
                "{ty} not checked"
            );
        }
        // Allocated by Rust, filled by C by the header's size: exact.
        assert!(c.source.contains("sizeof(struct ibv_port_attr) == 52"));
        assert!(c
            .source
            .contains("offsetof(struct ibv_port_attr, port_cap_flags2) == 48"));
        // Allocated by the provider: may grow at its end, not move a field.
        assert!(c.source.contains("sizeof(struct ibv_qp_ex) >= 352"));
        assert!(c.source.contains("offsetof(struct ibv_qp_ex, wr_abort) =="));
        // A named member of anonymous type, and an anonymous member.
        assert!(c
            .source
            .contains("offsetof(struct rdma_cm_event, param.conn) == 24"));
        assert!(c.source.contains(
            "offsetof(struct ibv_wc, invalidated_rkey) - offsetof(struct ibv_wc, imm_data) + 0 == 0"
        ));
        // A field bindgen renamed from a Rust keyword, by its C name
        // (`struct mlx5dv_obj`'s `qp.in`, the direct path's).
        assert!(c.source.contains("offsetof(struct mlx5dv_obj, qp.in) == 0"));
        assert!(!c.source.contains(".in_)"));
        // Never glibc's own structs (their insides change between releases).
        assert!(!c.source.contains("_IO_FILE") && !c.source.contains("__pthread"));
        assert!(
            c.structs > 50 && c.asserts > 500,
            "{} structs, {} asserts",
            c.structs,
            c.asserts
        );
    }

    #[test]
    fn failed_assertions_are_read_from_gcc_and_clang_and_not_from_the_quoted_source() {
        let gcc = r#"layout_check.c:7:1: error: static assertion failed: "mlx5dv-layout: ibv_port_attr size: 52 in the bindings, another in the installed headers"
    7 | _Static_assert(sizeof(struct ibv_port_attr) == 52, "mlx5dv-layout: ibv_port_attr size: 52 in the bindings, another in the installed headers");
      | ^~~~~~~~~~~~~~"#;
        let clang = "layout_check.c:9:16: error: static assertion failed due to requirement \
            'sizeof(struct ibv_qp_ex) >= 352': mlx5dv-layout: ibv_qp_ex size: below the bindings' \
            352 in the installed headers";
        let f = failures(&format!("{gcc}\n{clang}\n"));
        assert_eq!(
            f.into_iter().collect::<Vec<_>>(),
            [
                (
                    "ibv_port_attr".to_string(),
                    vec!["size: 52 in the bindings, another in the installed headers".to_string()]
                ),
                (
                    "ibv_qp_ex".to_string(),
                    vec!["size: below the bindings' 352 in the installed headers".to_string()]
                ),
            ]
        );
    }
}
