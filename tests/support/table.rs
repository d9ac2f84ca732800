//! Bad-input tables: rows of (name, call, expected outcome), all run, every
//! mismatch collected, and one failure listing them all.
//!
//! A row's call returns `Result<()>`; the runner catches a panic and counts
//! it as a mismatch (a bad input must give a typed error, never a panic).

#![allow(dead_code)]

use mlx5dv::Error;
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    /// Where the last row that panicked did so.
    static PANIC_AT: RefCell<String> = const { RefCell::new(String::new()) };
}

/// What a row must give.
#[derive(Debug, Clone, Copy)]
pub enum Expect {
    /// Success: the input is at the limit, not over it.
    Ok,
    /// `Error::OutOfRange` whose `what` is this, with a non-empty `limit`.
    OutOfRange(&'static str),
    /// `Error::InvalidArgument`.
    InvalidArgument,
    /// `Error::DeviceNotFound`.
    DeviceNotFound,
    /// `Error::Unsupported`.
    Unsupported,
    /// `Error::Verbs` from this C call: a limit only the device knows.
    Verbs(&'static str),
    /// `Error::SendQueueFull`.
    SendQueueFull,
    /// Any typed error (the device decides which), but not success.
    Refused,
    /// Whatever the device decides, success or a typed error: the man
    /// page sets no rule; only a panic fails.
    Any,
}

/// A row's call: it gets the table's fixture.
pub type Call<'a, C> = Box<dyn FnOnce(&mut C) -> mlx5dv::Result<()> + 'a>;

/// One row: a name, the call, and what it must give.
pub struct Row<'a, C> {
    pub name: String,
    pub expect: Expect,
    pub call: Call<'a, C>,
}

/// A row whose call needs the fixture.
pub fn row<'a, C>(
    name: impl Into<String>,
    expect: Expect,
    call: impl FnOnce(&mut C) -> mlx5dv::Result<()> + 'a,
) -> Row<'a, C> {
    Row {
        name: name.into(),
        expect,
        call: Box::new(call),
    }
}

/// A row whose call needs no fixture; its result is reduced to `()`.
pub fn pure<'a, C, T>(
    name: impl Into<String>,
    expect: Expect,
    call: impl FnOnce() -> mlx5dv::Result<T> + 'a,
) -> Row<'a, C> {
    row(name, expect, move |_: &mut C| call().map(drop))
}

/// Why `got` does not match `expect`, if it does not.
fn mismatch(expect: Expect, got: &mlx5dv::Result<()>) -> Option<String> {
    let ok = match (expect, got) {
        (Expect::Ok, Ok(())) => true,
        (Expect::OutOfRange(want), Err(Error::OutOfRange { what, limit, .. })) => {
            if *what != want {
                return Some(format!("OutOfRange of {what:?}, expected of {want:?}"));
            }
            if limit.is_empty() {
                return Some("OutOfRange without its limit".into());
            }
            true
        }
        (Expect::InvalidArgument, Err(Error::InvalidArgument(_))) => true,
        (Expect::DeviceNotFound, Err(Error::DeviceNotFound { .. })) => true,
        (Expect::Unsupported, Err(Error::Unsupported { .. })) => true,
        (Expect::Verbs(want), Err(Error::Verbs { call, .. })) => {
            if *call != want {
                return Some(format!("Verbs error from {call}, expected from {want}"));
            }
            true
        }
        (Expect::SendQueueFull, Err(Error::SendQueueFull { .. })) => true,
        (Expect::Refused, Err(_)) => true,
        (Expect::Any, _) => true,
        _ => false,
    };
    (!ok).then(|| format!("expected {expect:?}, got {}", describe(got)))
}

/// A result in one line: `Ok` or the error's variant and text (cut at
/// 300 characters).
pub fn describe(got: &mlx5dv::Result<()>) -> String {
    let mut line = describe_whole(got);
    if let Some((cut, _)) = line.char_indices().nth(300) {
        line.truncate(cut);
        line.push_str("...");
    }
    line
}

fn describe_whole(got: &mlx5dv::Result<()>) -> String {
    match got {
        Ok(()) => "Ok".into(),
        Err(e) => {
            let kind = format!("{e:?}");
            let kind = kind
                .split([':', ' ', '(', '{'])
                .next()
                .unwrap_or("?")
                .to_string();
            match e.errno() {
                Some(errno) => format!("{kind} (errno {errno}): {e}"),
                None => format!("{kind}: {e}"),
            }
        }
    }
}

/// Runs every row against `fixture`, prints each outcome and the counts,
/// and panics listing every mismatch (a panic in a row is one).
pub fn run<C>(title: &str, fixture: &mut C, rows: Vec<Row<'_, C>>) {
    let tried = rows.len();
    let mut failures = Vec::new();
    // A row's panic is reported as its mismatch, in one line with where it
    // happened, rather than by the default hook.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        let at = info.location().map(|l| l.to_string()).unwrap_or_default();
        PANIC_AT.with(|p| *p.borrow_mut() = at);
    }));
    for Row { name, expect, call } in rows {
        let verdict = match catch_unwind(AssertUnwindSafe(|| call(fixture))) {
            Ok(got) => {
                let m = mismatch(expect, &got);
                println!(
                    "{} {name}: {}",
                    if m.is_some() { "MISMATCH" } else { "ok" },
                    describe(&got)
                );
                m
            }
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "(non-string panic)".into());
                let at = PANIC_AT.with(|p| p.take());
                println!("MISMATCH {name}: panicked at {at}: {msg}");
                Some(format!("panicked at {at}: {msg}"))
            }
        };
        if let Some(why) = verdict {
            failures.push(format!("{name}: {why}"));
        }
    }
    std::panic::set_hook(hook);
    println!(
        "bad-input table {title}: {tried} rows tried, {} passed, {} failed",
        tried - failures.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "bad-input table {title}: {} of {tried} rows did not give what they must:\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}
