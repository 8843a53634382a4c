//! The runtime staticlib at link time: where to find it, the native libraries it needs,
//! and the linker warnings about it that a static link must not show.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::{DriverError, Lang, ENV_RUNTIME_LIB};

/// File name of the runtime staticlib (crate `trestle-runtime`).
pub const RUNTIME_LIB_NAME: &str = "libtrestle_runtime.a";

/// Native libraries the runtime staticlib needs, from
/// `cargo rustc -p trestle-runtime --lib --crate-type staticlib -- --print native-static-libs`.
/// Rerun that when the runtime gains a dependency on another system library.
pub const RUNTIME_NATIVE_LIBS: &[&str] = &[
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
    "-lc",
];

/// The runtime and its native libraries, appended after the user's link arguments.
///
/// Only what the program then uses is linked (`--as-needed`, for these libraries
/// alone): every shared library a program loads is mapped again in each child a
/// forkserver forks, and its finalisers run at each exit. A C program gets the
/// unwinder the runtime needs from static `libgcc_eh` (its symbols are hidden, so it
/// stays the runtime's own) instead of loading `libgcc_s`; a C++ program keeps
/// `libgcc_s`, which `libstdc++` loads anyway and whose unwinder its exceptions use.
pub(super) fn runtime_link_args(runtime: &Path, static_link: bool, lang: Lang) -> Vec<OsString> {
    let mut out = vec![runtime.as_os_str().to_os_string()];
    if static_link {
        // libgcc_s exists only as a shared library; its static counterpart is gcc_eh.
        out.extend(RUNTIME_NATIVE_LIBS.iter().map(|l| {
            if *l == "-lgcc_s" {
                "-lgcc_eh".into()
            } else {
                OsString::from(l)
            }
        }));
        return out;
    }
    out.push("-Wl,--push-state,--as-needed".into());
    for l in RUNTIME_NATIVE_LIBS {
        if *l == "-lgcc_s" && lang == Lang::C {
            out.extend(["-Wl,-Bstatic", "-lgcc_eh", "-Wl,-Bdynamic"].map(OsString::from));
        } else {
            out.push(l.into());
        }
    }
    out.push("-Wl,--pop-state".into());
    out
}

/// Find `libtrestle_runtime.a`: `$TRESTLE_RUNTIME_LIB`, else next to the wrapper.
pub fn find_runtime(
    env_override: Option<&OsStr>,
    exe: Option<&Path>,
) -> Result<PathBuf, DriverError> {
    if let Some(path) = env_override.filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(DriverError::RuntimeNotFound {
                looked_at: vec![format!("{ENV_RUNTIME_LIB}={}", path.display())],
            })
        };
    }
    let mut looked_at = vec![format!("{ENV_RUNTIME_LIB} (not set)")];
    if let Some(dir) = exe.and_then(Path::parent) {
        let candidate = dir.join(RUNTIME_LIB_NAME);
        if candidate.is_file() {
            return Ok(candidate);
        }
        looked_at.push(candidate.display().to_string());
    }
    Err(DriverError::RuntimeNotFound { looked_at })
}

/// Remove the linker's glibc warnings about Rust std functions in the runtime
/// (`getpwuid_r`, `getaddrinfo`) from a static link's stderr: the runtime never calls
/// them, and libtool and configure read any stderr output as "`-static` does not
/// work". Each warning is two lines: `ld: <archive>(<member>): in function ...` then
/// `...: warning: Using '...' in statically linked applications requires ...`.
pub(super) fn drop_runtime_static_warnings(stderr: &str, archive: &str) -> String {
    let from_runtime = |l: &str| l.contains(&format!("{archive}(")) && l.contains("in function");
    let static_warning = |l: &str| l.contains("in statically linked applications requires");
    let lines: Vec<&str> = stderr.split_inclusive('\n').collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        if from_runtime(lines[i]) && lines.get(i + 1).is_some_and(|l| static_warning(l)) {
            i += 2;
        } else {
            out.push_str(lines[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::test_support::{build_of, strs};

    #[test]
    fn static_link_uses_gcc_eh() {
        let b = build_of(&["-static", "a.o"]);
        assert!(b.static_link);
        let args = strs(&runtime_link_args(
            Path::new("/r/libtrestle_runtime.a"),
            true,
            Lang::C,
        ));
        assert!(args.contains(&"-lgcc_eh".into()) && !args.contains(&"-lgcc_s".into()));
    }

    #[test]
    fn dynamic_links_take_only_the_libraries_used() {
        // C: the unwinder from static libgcc_eh, everything else as needed; the
        // linker's state is restored for whatever follows.
        let args = strs(&runtime_link_args(
            Path::new("/r/libtrestle_runtime.a"),
            false,
            Lang::C,
        ));
        assert_eq!(args[0], "/r/libtrestle_runtime.a");
        assert_eq!(args[1], "-Wl,--push-state,--as-needed");
        assert_eq!(args.last().map(String::as_str), Some("-Wl,--pop-state"));
        let eh = args.iter().position(|a| a == "-lgcc_eh").expect("gcc_eh");
        assert_eq!(
            (args[eh - 1].as_str(), args[eh + 1].as_str()),
            ("-Wl,-Bstatic", "-Wl,-Bdynamic")
        );
        assert!(!args.contains(&"-lgcc_s".into()));
        // C++: libstdc++ loads libgcc_s anyway; its exceptions use that unwinder.
        let args = strs(&runtime_link_args(
            Path::new("/r/libtrestle_runtime.a"),
            false,
            Lang::Cxx,
        ));
        assert!(args.contains(&"-lgcc_s".into()) && !args.contains(&"-lgcc_eh".into()));
    }

    #[test]
    fn static_link_warnings_from_the_runtime_are_dropped() {
        let stderr =
            "/usr/bin/ld: /t/libtrestle_runtime.a(std-1.rcgu.o): in function `home_dir':\n\
                      os.rs:519: warning: Using 'getpwuid_r' in statically linked applications \
                      requires at runtime the shared libraries from the glibc version\n\
                      /usr/bin/ld: main.o: in function `main':\n\
                      main.c:3: warning: Using 'getpwnam' in statically linked applications \
                      requires at runtime the shared libraries from the glibc version\n\
                      ld: warning: something else\n";
        let kept = drop_runtime_static_warnings(stderr, "libtrestle_runtime.a");
        assert!(
            !kept.contains("getpwuid_r") && !kept.contains("libtrestle_runtime"),
            "{kept}"
        );
        assert!(
            kept.contains("getpwnam") && kept.contains("in function `main'"),
            "{kept}"
        );
        assert!(kept.ends_with("ld: warning: something else\n"), "{kept}");
    }

    #[test]
    fn runtime_lookup_order_and_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lib = dir.path().join(RUNTIME_LIB_NAME);
        std::fs::write(&lib, b"!<arch>\n").expect("write");
        let exe = dir.path().join("trestle-cc");
        assert_eq!(
            find_runtime(None, Some(&exe)).expect("found next to exe"),
            lib
        );
        assert_eq!(
            find_runtime(Some(lib.as_os_str()), None).expect("found via env"),
            lib
        );
        let err = find_runtime(Some(OsStr::new("/nope/lib.a")), Some(&exe)).expect_err("missing");
        assert!(err.to_string().contains("/nope/lib.a"), "{err}");
        let err = find_runtime(None, Some(Path::new("/nope/bin/trestle-cc"))).expect_err("missing");
        let msg = err.to_string();
        assert!(msg.contains("/nope/bin/libtrestle_runtime.a") && msg.contains("cargo build"));
        assert!(!msg.contains('\n'));
    }
}
