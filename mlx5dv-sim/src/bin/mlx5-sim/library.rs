//! Which interposer library the command is started with, in this order:
//!
//! 1. `MLX5DV_SIM_LIB`, as given;
//! 2. the copy built into this runner (see the crate's `build.rs`), written
//!    for this run into a fresh directory only the user can enter, read back
//!    and compared before use, and removed when the run ends: an installed
//!    runner (`cargo install`) has nothing beside it;
//! 3. `libmlx5dv_sim.so` beside this executable, or one directory up (a
//!    runner built with `MLX5DV_SIM_EMBED=0`, in its target directory).
//!
//! The copy goes under `$TMPDIR` (default `/tmp`) or, when that file system
//! is mounted `noexec` (the dynamic loader could not map the library),
//! `$XDG_RUNTIME_DIR`.

use std::ffi::CString;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The interposer built into this runner, if it was built with one.
#[cfg(mlx5dv_sim_embedded)]
const EMBEDDED: Option<&[u8]> = Some(include_bytes!(env!("MLX5DV_SIM_EMBEDDED_LIB")));
#[cfg(not(mlx5dv_sim_embedded))]
const EMBEDDED: Option<&[u8]> = None;

/// The file name the copy is written under (what the loader's messages name).
const FILE_NAME: &str = "libmlx5dv_sim.so";

/// The library to preload; a written copy is removed on drop.
pub struct Library {
    path: PathBuf,
    /// The directory holding the written copy (`None`: not ours to remove).
    written: Option<PathBuf>,
}

impl Library {
    /// The file for `LD_PRELOAD`.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        if let Some(dir) = &self.written {
            if let Err(e) = fs::remove_dir_all(dir) {
                eprintln!("mlx5-sim: cannot remove {}: {e}", dir.display());
            }
        }
    }
}

/// Finds (or writes) the library; the error says what to do.
pub fn find() -> Result<Library, String> {
    if let Some(p) = std::env::var_os("MLX5DV_SIM_LIB") {
        return Ok(Library {
            path: PathBuf::from(p),
            written: None,
        });
    }
    if let Some(bytes) = EMBEDDED {
        return write_copy(bytes);
    }
    beside_executable()
}

fn beside_executable() -> Result<Library, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let dir = exe.parent().ok_or("executable without a directory")?;
    for cand in [dir.join(FILE_NAME), dir.join("..").join(FILE_NAME)] {
        if cand.exists() {
            let path = cand
                .canonicalize()
                .map_err(|e| format!("{}: {e}", cand.display()))?;
            return Ok(Library {
                path,
                written: None,
            });
        }
    }
    Err(format!(
        "{} was built without its copy of the interposer library (MLX5DV_SIM_EMBED=0) and \
         {FILE_NAME} is not beside it: build the mlx5dv-sim crate, or set MLX5DV_SIM_LIB",
        exe.display()
    ))
}

/// Where a copy may go: `$TMPDIR` (or `/tmp`), then `$XDG_RUNTIME_DIR`.
fn bases() -> Vec<PathBuf> {
    let mut bases = vec![std::env::temp_dir()];
    if let Some(run) = std::env::var_os("XDG_RUNTIME_DIR").filter(|r| !r.is_empty()) {
        bases.push(PathBuf::from(run));
    }
    bases
}

/// Writes `bytes` to a fresh private directory under the first base
/// directory that allows mapping code, and checks what landed there.
fn write_copy(bytes: &[u8]) -> Result<Library, String> {
    let mut refused = Vec::new();
    for base in bases() {
        match noexec(&base) {
            Ok(false) => {}
            Ok(true) => {
                refused.push(format!("{} is mounted noexec", base.display()));
                continue;
            }
            Err(e) => {
                refused.push(format!("{}: {e}", base.display()));
                continue;
            }
        }
        let dir = private_dir(&base).map_err(|e| {
            format!("cannot create a directory under {} for the interposer library: {e} (set TMPDIR, or MLX5DV_SIM_LIB)", base.display())
        })?;
        let lib = Library {
            path: dir.join(FILE_NAME),
            written: Some(dir),
        };
        // On error `lib` is dropped, which removes the directory.
        write_checked(lib.path(), bytes)
            .map_err(|e| format!("cannot write {}: {e}", lib.path().display()))?;
        return Ok(lib);
    }
    Err(format!(
        "no directory to write the interposer library to: {} (set TMPDIR to a directory on an exec-mounted file system, or MLX5DV_SIM_LIB)",
        refused.join("; ")
    ))
}

/// Whether `dir`'s file system is mounted `noexec`.
fn noexec(dir: &Path) -> io::Result<bool> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path; `st` is a writable statvfs that
    // statvfs(3) fills when it returns 0.
    if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs(3) returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Ok(st.f_flag & libc::ST_NOEXEC != 0)
}

/// Creates `base/mlx5-sim-lib.<pid>.<n>`, mode 0700, that did not exist.
fn private_dir(base: &Path) -> io::Result<PathBuf> {
    let pid = std::process::id();
    for n in 0..1000u32 {
        let dir = base.join(format!("mlx5-sim-lib.{pid}.{n}"));
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "a thousand directories of this name exist",
    ))
}

/// Writes `bytes` to the new file `path`, makes it read-and-execute only,
/// and reads it back: a short or altered copy is an error, not a command
/// run without the device.
fn write_checked(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(path)?;
    f.write_all(bytes)?;
    drop(f);
    fs::set_permissions(path, fs::Permissions::from_mode(0o500))?;
    if fs::read(path)? != bytes {
        return Err(io::Error::other(
            "the file read back differs from the library built into this runner",
        ));
    }
    Ok(())
}
