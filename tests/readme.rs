//! The front page (README.md) stays true: its program is
//! `examples/hello_rc.rs`, whole, and its Quick start's two commands are
//! the ones CI runs. (The README's and the guides' Rust blocks are compiled
//! as doctests from `src/lib.rs`; these checks need no device.)

use std::path::Path;

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The lines of the first fenced block that opens with `fence` after the
/// heading `heading`.
fn block_after<'a>(text: &'a str, heading: &str, fence: &str) -> Vec<&'a str> {
    let mut lines = text.lines().skip_while(|l| *l != heading);
    assert!(
        lines.next().is_some(),
        "README.md has no heading {heading:?}"
    );
    let mut lines = lines.skip_while(|l| *l != fence);
    assert!(lines.next().is_some(), "no {fence} block after {heading:?}");
    lines.take_while(|l| *l != "```").collect()
}

#[test]
fn the_front_page_program_is_hello_rc_whole() {
    let readme = read("README.md");
    let shown = block_after(&readme, "## The front-page program", "```rust,no_run");
    let example = read("examples/hello_rc.rs");
    let example: Vec<&str> = example.lines().collect();
    assert_eq!(
        shown, example,
        "README.md's front-page program differs from examples/hello_rc.rs: copy the example into the README"
    );
}

#[test]
fn the_quick_start_runs_the_demo_and_the_test_command() {
    let readme = read("README.md");
    let commands: Vec<&str> = block_after(&readme, "## Quick start", "```sh")
        .into_iter()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(commands, ["scripts/demo", "scripts/test"]);
}
