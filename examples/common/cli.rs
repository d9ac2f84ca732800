//! The examples' command line, read as rdma-core's tools read theirs
//! (`getopt_long`), with [`lexopt`]: short options bundle (`-Ln100` is
//! `-L -n 100`), a value is attached or separate (`-s4096`, `-s 4096`,
//! `--size=4096`, `--size 4096`), and `--` ends the options.
//!
//! Every value is checked while the line is parsed, before the example
//! opens a device: an unknown option, a missing value, a value that is not
//! a number or is out of its option's range prints one line and a hint and
//! exits 2, on any machine, with or without RDMA.

use std::collections::HashMap;
use std::ffi::OsString;
use std::num::{IntErrorKind, ParseIntError};
use std::str::FromStr;
use std::sync::OnceLock;

use super::EXIT_USAGE;
use mlx5dv::Mtu;

/// What an option's value must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// No value: `-L`, `--loopback`.
    Flag,
    /// Any text: a device name.
    Text,
    /// A number from `min` to `max`, decimal or hex with `0x`.
    Num { min: u64, max: u64 },
    /// A path MTU in bytes: 256, 512, 1024, 2048 or 4096.
    Mtu,
}

/// One option: `-s`/`--size`, and what its value must be.
#[derive(Clone, Copy, Debug)]
pub struct Opt {
    /// The one-letter form, e.g. `'s'` for `-s`.
    pub short: char,
    /// The long form without dashes, e.g. `"size"`.
    pub long: &'static str,
    /// Its value.
    pub kind: Kind,
}

/// An option that takes a value. The options every example shares mean
/// the same everywhere, as in rdma-core's tools, and their values are
/// checked by that meaning: `ib-dev` is a device name, `ib-port` a device
/// port (1 to 255), `gid-idx` a GID index (0 to 255), `port` a TCP port,
/// `mtu` a path MTU in bytes; any other option's value is a number (0 to
/// 2^64 - 1; [`Cli::num`] reads it into the example's type).
pub const fn val(short: char, long: &'static str) -> Opt {
    let kind = if eq(long, "ib-dev") {
        Kind::Text
    } else if eq(long, "ib-port") {
        Kind::Num { min: 1, max: 255 }
    } else if eq(long, "gid-idx") {
        Kind::Num { min: 0, max: 255 }
    } else if eq(long, "port") {
        Kind::Num {
            min: 0,
            max: u16::MAX as u64,
        }
    } else if eq(long, "mtu") {
        Kind::Mtu
    } else {
        Kind::Num {
            min: 0,
            max: u64::MAX,
        }
    };
    Opt { short, long, kind }
}

/// An option without a value.
pub const fn flag(short: char, long: &'static str) -> Opt {
    Opt {
        short,
        long,
        kind: Kind::Flag,
    }
}

/// `a == b`, in a `const fn`.
const fn eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The program's name, as given to [`Cli::parse`]: for messages printed
/// far from `main` (a client waiting for its server).
static PROG: OnceLock<&'static str> = OnceLock::new();

/// The name [`Cli::parse`] was given (`"example"` before it ran).
pub fn prog() -> &'static str {
    PROG.get().copied().unwrap_or("example")
}

/// A parsed command line: every value in it is valid for its option.
#[derive(Debug)]
pub struct Cli {
    prog: &'static str,
    values: HashMap<&'static str, String>,
    flags: Vec<&'static str>,
    /// The arguments that are not options (the server's host name).
    pub positional: Vec<String>,
}

impl Cli {
    /// Parses `std::env::args()` against `opts`. `-h`/`--help` prints
    /// `usage` and exits 0; an unknown option, a missing value or a value
    /// its option does not take prints the reason and exits 2.
    pub fn parse(prog: &'static str, usage: &str, opts: &[Opt]) -> Cli {
        let _ = PROG.set(prog);
        match Self::try_parse_from(prog, opts, std::env::args_os().skip(1)) {
            Ok(Some(cli)) => cli,
            Ok(None) => {
                print!("{usage}");
                std::process::exit(0);
            }
            Err(m) => usage_error(prog, &m),
        }
    }

    /// [`Cli::parse`] with the device options every traffic example takes,
    /// `-d`/`--ib-dev`, `-i`/`--ib-port` and `-g`/`--gid-idx`, before `extra`.
    pub fn parse_with_device(prog: &'static str, usage: &str, extra: &[Opt]) -> Cli {
        let mut opts = vec![val('d', "ib-dev"), val('i', "ib-port"), val('g', "gid-idx")];
        opts.extend_from_slice(extra);
        Self::parse(prog, usage, &opts)
    }

    /// Parses `args` (without the program's name): `Ok(None)` when help
    /// was asked for, `Err` with the one-line reason when the line is bad.
    pub fn try_parse_from<I>(
        prog: &'static str,
        opts: &[Opt],
        args: I,
    ) -> Result<Option<Cli>, String>
    where
        I: IntoIterator,
        I::Item: Into<OsString>,
    {
        use lexopt::Arg;
        let mut cli = Cli {
            prog,
            values: HashMap::new(),
            flags: Vec::new(),
            positional: Vec::new(),
        };
        let mut parser = lexopt::Parser::from_args(args);
        while let Some(arg) = parser.next().map_err(reason)? {
            let (opt, given) = match arg {
                Arg::Short('h') | Arg::Long("help") => return Ok(None),
                Arg::Short(c) => (opts.iter().find(|o| o.short == c), format!("-{c}")),
                Arg::Long(name) => (opts.iter().find(|o| o.long == name), format!("--{name}")),
                Arg::Value(v) => {
                    cli.positional.push(utf8(v)?);
                    continue;
                }
            };
            let opt = opt.ok_or_else(|| format!("unknown option '{given}'"))?;
            if opt.kind == Kind::Flag {
                cli.flags.push(opt.long);
                continue;
            }
            let v = parser
                .value()
                .map_err(|_| format!("option '{given}' needs a value"))?;
            let v = utf8(v)?;
            check(opt, &v)?;
            cli.values.insert(opt.long, v);
        }
        Ok(Some(cli))
    }

    /// `-s` (bytes per work request), `-n` (work requests) and `-b`
    /// (work requests per batch), or these defaults; exits 2 unless each
    /// is at least 1 and the size below 4 GiB (a work request's length).
    pub fn size_iters_batch(&self, size: usize, iters: u64, batch: u32) -> (usize, u64, u32) {
        let r = (
            self.num_or("size", size),
            self.num_or("iters", iters),
            self.num_or("batch", batch),
        );
        if r.0 == 0 || r.1 == 0 || r.2 == 0 || r.0 > u32::MAX as usize {
            usage_error(
                self.prog,
                "--size, --iters and --batch must be at least 1 (size below 4 GiB)",
            );
        }
        r
    }

    /// Whether the flag was given.
    pub fn flag(&self, long: &str) -> bool {
        self.flags.contains(&long)
    }

    /// The option's text, if given.
    pub fn text(&self, long: &str) -> Option<&str> {
        self.values.get(long).map(String::as_str)
    }

    /// The option's number, if given. The parse checked it against its
    /// option's range; a value beyond `T` exits 2, so an example reads
    /// every option before it opens a device.
    pub fn num<T: TryFrom<u64>>(&self, long: &str) -> Option<T> {
        let text = self.text(long)?;
        let parsed = parse_u64(text).ok().and_then(|v| T::try_from(v).ok());
        Some(parsed.unwrap_or_else(|| {
            usage_error(self.prog, &format!("--{long}: {text} is out of range"))
        }))
    }

    /// The option's number, or `default`.
    pub fn num_or<T: TryFrom<u64>>(&self, long: &str, default: T) -> T {
        self.num(long).unwrap_or(default)
    }

    /// The server's host: `None` for a server, `Some` for a client; exits 2
    /// on more than one.
    pub fn host(&self) -> Option<&str> {
        match self.positional.as_slice() {
            [] => None,
            [h] => Some(h),
            [_, extra, ..] => usage_error(self.prog, &format!("unexpected argument '{extra}'")),
        }
    }

    /// Exits 2 when a host name was given: for examples that take none.
    pub fn no_positional(&self) {
        if let Some(p) = self.positional.first() {
            usage_error(self.prog, &format!("unexpected argument '{p}'"));
        }
    }

    /// The MTU option (`-m`), checked by the parse: one of 256 .. 4096.
    pub fn mtu(&self) -> Option<Mtu> {
        let bytes: u32 = self.num("mtu")?;
        Some(Mtu::from_bytes(bytes).unwrap_or_else(|_| {
            usage_error(self.prog, "--mtu must be 256, 512, 1024, 2048 or 4096")
        }))
    }
}

/// Refuses `v` unless it is what `opt` takes.
fn check(opt: &Opt, v: &str) -> Result<(), String> {
    let long = opt.long;
    let number = || match parse_u64(v) {
        Ok(n) => Ok(n),
        Err(e) if e.kind() == &IntErrorKind::PosOverflow => {
            Err(format!("--{long}: {v} is out of range"))
        }
        Err(_) => Err(format!(
            "--{long}: '{v}' is not a number (decimal, or hex with 0x)"
        )),
    };
    match opt.kind {
        Kind::Flag | Kind::Text => Ok(()),
        Kind::Num { min, max } => match number()? {
            n if (min..=max).contains(&n) => Ok(()),
            n => Err(format!("--{long}: {n} is out of range ({min} to {max})")),
        },
        Kind::Mtu => match u32::try_from(number()?).map(Mtu::from_bytes) {
            Ok(Ok(_)) => Ok(()),
            _ => Err(format!("--{long}: {v} is not 256, 512, 1024, 2048 or 4096")),
        },
    }
}

/// An argument as text.
fn utf8(v: OsString) -> Result<String, String> {
    v.into_string()
        .map_err(|v| format!("argument {v:?} is not valid UTF-8"))
}

/// lexopt's refusals, in the examples' words.
fn reason(e: lexopt::Error) -> String {
    match e {
        lexopt::Error::UnexpectedValue { option, .. } => {
            format!("option '{option}' takes no value")
        }
        lexopt::Error::NonUnicodeValue(v) => format!("argument {v:?} is not valid UTF-8"),
        e => e.to_string(),
    }
}

/// Prints the reason and the hint, and exits 2.
pub fn usage_error(prog: &str, msg: &str) -> ! {
    eprintln!("{prog}: {msg}");
    eprintln!("Try '{prog} -h'.");
    std::process::exit(i32::from(EXIT_USAGE));
}

/// Exits 2 when any of `others` (each: whether it was given, and its
/// spelling) was given along with the option `with`: `"<other> does not go
/// with <with>"`.
pub fn refuse_with(prog: &str, with: &str, others: &[(bool, &str)]) {
    if let Some((_, what)) = others.iter().find(|(given, _)| *given) {
        usage_error(prog, &format!("{what} does not go with {with}"));
    }
}

/// A number as the examples write it: decimal, or hex with `0x`.
fn parse_u64(s: &str) -> Result<u64, ParseIntError> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => u64::from_str(s),
    }
}
