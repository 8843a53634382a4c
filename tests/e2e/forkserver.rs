//! The system-test forkserver on a real program built with trestle-cc: every
//! execution gets its own arguments, stdin, files and environment; crashes, hangs,
//! `exit()` and a child that closes every descriptor are each one execution's end;
//! the server survives thousands of executions that corrupt the heap; each child
//! takes its request's resource limits, the server none; a program not built with
//! trestle-cc is no server; a dead server is reported.

use std::path::Path;
use std::time::{Duration, Instant};
use trestle_abi::sysserver::ChildLimits;
use trestle_exec::forkserver::{ForkServer, Request, RunEnd};
use trestle_tests::*;

const NONE: ChildLimits = ChildLimits {
    cpu_secs: 0,
    address_space: 0,
    open_files: 0,
};

const PROGRAM: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static int boot_count;
__attribute__((constructor)) static void boot(void) { boot_count++; }
int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "crash")) { volatile int *p = 0; *p = 1; }
    if (!strcmp(what, "hang")) for (;;) pause();
    if (!strcmp(what, "exit")) exit(7);
    if (!strcmp(what, "hog")) {   /* 1 GiB: refused under a 256 MiB address-space limit */
        char *p = malloc(1u << 30);
        if (!p) return 12;
        memset(p, 1, 1u << 30);
        free(p);
        return 0;
    }
    if (!strcmp(what, "spin")) for (volatile unsigned long i = 0;; i++) {}
    if (!strcmp(what, "say")) { printf("to stdout %s\n", argc > 2 ? argv[2] : ""); fprintf(stderr, "to stderr\n"); return 0; }
    if (!strcmp(what, "closefds")) { for (int fd = 0; fd < 1024; fd++) close(fd); return 0; }
    if (!strcmp(what, "corrupt")) {
        char *a = malloc(32), *b = malloc(32);
        memset(a, 0x41, 80);   /* over b's chunk header */
        free(b);
        free(a);
        return 0;
    }
    FILE *out = fopen("seen.txt", "w");
    fprintf(out, "boot=%d argc=%d", boot_count, argc);
    for (int i = 1; i < argc; i++) fprintf(out, " [%s]", argv[i]);
    char line[256] = "";
    if (!fgets(line, sizeof line, stdin)) strcpy(line, "(none)");
    line[strcspn(line, "\n")] = 0;
    fprintf(out, " stdin=%s", line);
    FILE *in = argc > 2 ? fopen(argv[2], "r") : NULL;
    char body[256] = "(none)";
    if (in && fgets(body, sizeof body, in)) body[strcspn(body, "\n")] = 0;
    fprintf(out, " file=%s env=%s\n", body, getenv("KV_MODE") ? getenv("KV_MODE") : "(unset)");
    fclose(out);
    return 3;
}
"#;

fn server(prog: &Path) -> ForkServer {
    let mut cmd = std::process::Command::new(prog);
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    ForkServer::start(cmd)
        .unwrap()
        .expect("a program built with trestle-cc serves")
}

/// The test program built and serving, with a stdin file holding `input`.
struct Served {
    dir: tempfile::TempDir,
    prog: std::path::PathBuf,
    fs: ForkServer,
    stdin: std::path::PathBuf,
}

fn served(input: &str) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "served", PROGRAM, "-O1");
    let fs = server(&prog);
    let stdin = dir.path().join("stdin");
    std::fs::write(&stdin, input).unwrap();
    Served {
        dir,
        prog,
        fs,
        stdin,
    }
}

/// One execution with its output discarded.
fn go(
    fs: &mut ForkServer,
    argv: &[&[u8]],
    env: &[(&[u8], &[u8])],
    cwd: &Path,
    stdin: &Path,
    limits: ChildLimits,
    timeout: Duration,
) -> RunEnd {
    fs.run(
        &Request {
            argv,
            env,
            cwd,
            stdin,
            stdout: None,
            stderr: None,
            limits,
        },
        timeout,
    )
}

fn exit_code(end: RunEnd) -> Option<i32> {
    match end {
        RunEnd::Ended(e) if libc::WIFEXITED(e.status as i32) => {
            Some(libc::WEXITSTATUS(e.status as i32))
        }
        _ => None,
    }
}

fn signal(end: RunEnd) -> Option<i32> {
    match end {
        RunEnd::Ended(e) if libc::WIFSIGNALED(e.status as i32) => {
            Some(libc::WTERMSIG(e.status as i32))
        }
        _ => None,
    }
}

#[test]
fn every_execution_sees_its_own_arguments_stdin_files_and_environment() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "served", PROGRAM, "-O1");
    let mut fs = server(&prog);
    let name = prog.as_os_str().as_encoded_bytes();
    for k in 0..3 {
        let cwd = dir.path().join(format!("cwd-{k}"));
        std::fs::create_dir(&cwd).unwrap();
        std::fs::write(cwd.join("in.txt"), format!("content {k}\n")).unwrap();
        let stdin = dir.path().join(format!("stdin-{k}"));
        std::fs::write(&stdin, format!("line {k}\n")).unwrap();
        let arg = format!("arg{k}");
        let mode = format!("m{k}");
        let env: Vec<(&[u8], &[u8])> = if k == 1 {
            vec![]
        } else {
            vec![(b"KV_MODE", mode.as_bytes())]
        };
        let end = go(
            &mut fs,
            &[name, arg.as_bytes(), b"in.txt"],
            &env,
            &cwd,
            &stdin,
            NONE,
            Duration::from_secs(5),
        );
        assert_eq!(exit_code(end), Some(3), "{end:?}");
        let seen = std::fs::read_to_string(cwd.join("seen.txt")).unwrap();
        let env_seen = if k == 1 {
            "(unset)".to_owned()
        } else {
            mode.clone()
        };
        // The constructors ran once, in the server, before main: a fresh main each time.
        assert_eq!(
            seen.trim(),
            format!(
                "boot=1 argc=3 [{arg}] [in.txt] stdin=line {k} file=content {k} env={env_seen}"
            )
        );
    }
}

#[test]
fn crashes_hangs_exits_and_closed_descriptors_end_one_execution_only() {
    let Served {
        dir,
        prog,
        mut fs,
        stdin,
    } = served("x\n");
    let name = prog.as_os_str().as_encoded_bytes();
    let cwd = dir.path();
    let run = |fs: &mut ForkServer, what: &[u8], t: u64| {
        go(
            fs,
            &[name, what],
            &[],
            cwd,
            &stdin,
            NONE,
            Duration::from_secs(t),
        )
    };
    assert_eq!(signal(run(&mut fs, b"crash", 5)), Some(libc::SIGSEGV));
    let t = Instant::now();
    assert!(
        matches!(run(&mut fs, b"hang", 1), RunEnd::Timeout(_)),
        "the hang is a timeout"
    );
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "the hang was killed at its limit: {:?}",
        t.elapsed()
    );
    assert_eq!(exit_code(run(&mut fs, b"exit", 5)), Some(7));
    assert_eq!(exit_code(run(&mut fs, b"closefds", 5)), Some(0));
    // After all of that, the server still serves.
    assert_eq!(exit_code(run(&mut fs, b"plain", 5)), Some(3));
}

#[test]
fn the_server_survives_ten_thousand_executions_that_corrupt_the_heap() {
    let Served {
        dir,
        prog,
        mut fs,
        stdin,
    } = served("");
    let name = prog.as_os_str().as_encoded_bytes();
    let mut ends = std::collections::BTreeMap::new();
    for _ in 0..10_000 {
        let end = go(
            &mut fs,
            &[name, b"corrupt"],
            &[],
            dir.path(),
            &stdin,
            NONE,
            Duration::from_secs(5),
        );
        assert_ne!(end, RunEnd::ServerDied);
        *ends
            .entry(format!(
                "{:?}",
                signal(end).map_or("exit".to_owned(), |s| format!("signal {s}"))
            ))
            .or_insert(0) += 1;
    }
    assert_eq!(
        exit_code(go(
            &mut fs,
            &[name, b"plain"],
            &[],
            dir.path(),
            &stdin,
            NONE,
            Duration::from_secs(5)
        )),
        Some(3),
        "{ends:?}"
    );
}

#[test]
fn a_plain_program_is_no_server_and_a_dead_server_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("plain.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let plain = dir.path().join("plain");
    ok(std::process::Command::new("clang-19")
        .arg("-O1")
        .arg(&src)
        .arg("-o")
        .arg(&plain));
    let mut cmd = std::process::Command::new(&plain);
    cmd.stdout(std::process::Stdio::null());
    let t = Instant::now();
    assert!(ForkServer::start(cmd).unwrap().is_none());
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "a program that exits is not waited for"
    );

    let prog = build_c(dir.path(), "served", PROGRAM, "-O1");
    let mut fs = server(&prog);
    // SAFETY: killing the server this test started.
    unsafe { libc::kill(fs.pid() as i32, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(100));
    let stdin = dir.path().join("stdin");
    std::fs::write(&stdin, "").unwrap();
    let name = prog.as_os_str().as_encoded_bytes();
    assert_eq!(
        go(
            &mut fs,
            &[name],
            &[],
            dir.path(),
            &stdin,
            NONE,
            Duration::from_secs(5)
        ),
        RunEnd::ServerDied
    );
}

#[test]
fn each_child_takes_its_own_limits_and_the_server_none() {
    let Served {
        dir,
        prog,
        mut fs,
        stdin,
    } = served("");
    let name = prog.as_os_str().as_encoded_bytes();
    let small = ChildLimits {
        cpu_secs: 1,
        address_space: 256 << 20,
        open_files: 0,
    };
    // Memory: the allocation fails under the limit, succeeds without it.
    assert_eq!(
        exit_code(go(
            &mut fs,
            &[name, b"hog"],
            &[],
            dir.path(),
            &stdin,
            small,
            Duration::from_secs(10)
        )),
        Some(12)
    );
    assert_eq!(
        exit_code(go(
            &mut fs,
            &[name, b"hog"],
            &[],
            dir.path(),
            &stdin,
            NONE,
            Duration::from_secs(10)
        )),
        Some(0)
    );
    // CPU: a spinning child is stopped by its own limit (SIGXCPU) before the wall-clock one.
    let t = Instant::now();
    let end = go(
        &mut fs,
        &[name, b"spin"],
        &[],
        dir.path(),
        &stdin,
        small,
        Duration::from_secs(20),
    );
    assert!(
        matches!(signal(end), Some(s) if [libc::SIGXCPU, libc::SIGKILL].contains(&s)),
        "{end:?}"
    );
    let RunEnd::Ended(e) = end else {
        unreachable!()
    };
    assert!(
        e.cpu_ms >= 500,
        "the server reports what the child used: {e:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // The server itself kept no limit: it goes on serving.
    assert_eq!(
        exit_code(go(
            &mut fs,
            &[name, b"plain"],
            &[],
            dir.path(),
            &stdin,
            NONE,
            Duration::from_secs(5)
        )),
        Some(3)
    );
}

#[test]
fn each_child_writes_its_output_where_its_request_says() {
    let Served {
        dir,
        prog,
        mut fs,
        stdin,
    } = served("");
    let name = prog.as_os_str().as_encoded_bytes();
    for k in 0..2 {
        let (out, err) = (
            dir.path().join(format!("out-{k}")),
            dir.path().join(format!("err-{k}")),
        );
        let arg = format!("run {k}");
        let argv: [&[u8]; 3] = [name, b"say", arg.as_bytes()];
        let req = Request {
            argv: &argv,
            env: &[],
            cwd: dir.path(),
            stdin: &stdin,
            stdout: Some(&out),
            stderr: Some(&err),
            limits: NONE,
        };
        let end = fs.run(&req, Duration::from_secs(5));
        assert_eq!(exit_code(end), Some(0), "{end:?}");
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            format!("to stdout run {k}\n")
        );
        assert_eq!(std::fs::read_to_string(&err).unwrap(), "to stderr\n");
    }
    // Without files the output goes where the server's goes (here: nowhere), and no
    // file of an earlier run is touched.
    assert_eq!(
        exit_code(go(
            &mut fs,
            &[name, b"say", b"again"],
            &[],
            dir.path(),
            &stdin,
            NONE,
            Duration::from_secs(5)
        )),
        Some(0)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out-1")).unwrap(),
        "to stdout run 1\n"
    );
}

/// `trestle exec --json` on `tests`: its exit status and one JSON object per line.
fn exec_json(prog: &Path, tests: &Path, extra: &[&str]) -> (Option<i32>, Vec<serde_json::Value>) {
    let out = run(trestle(&[&"exec", &"--program", &prog, &tests, &"--json"]).args(extra));
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("exec --json prints JSON lines ({e}): {l}"))
        })
        .collect();
    (out.status.code(), lines)
}

#[test]
fn trestle_exec_reports_a_planted_crash_an_exit_status_and_output_sizes_through_the_forkserver() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "served", PROGRAM, "-O1");
    let tests = dir.path().join("tests");
    write_test(&tests, "a_crash", &serde_json::json!({"args": ["crash"]}));
    write_test(&tests, "b_exit", &serde_json::json!({"args": ["exit"]}));
    write_test(
        &tests,
        "c_say",
        &serde_json::json!({"args": ["say", "hello"]}),
    );
    write_test(&tests, "d_hang", &serde_json::json!({"args": ["hang"]}));
    for (extra, forked) in [(&[][..], true), (&["--no-forkserver"][..], false)] {
        let (code, runs) = exec_json(&prog, &tests, &[&["--timeout", "500ms"], extra].concat());
        // Every test ran, whatever the program did: success.
        assert_eq!(code, Some(0), "{runs:?}");
        let by_name = |n: &str| {
            runs.iter()
                .find(|r| r["name"] == n)
                .unwrap_or_else(|| panic!("no {n} in {runs:?}"))
                .clone()
        };
        let crash = by_name("a_crash");
        assert_eq!(crash["signal"], libc::SIGSEGV, "{crash}");
        assert!(
            crash["crash"]
                .as_str()
                .is_some_and(|c| c.contains("SIGSEGV")),
            "{crash}"
        );
        assert_eq!(by_name("b_exit")["exit"], 7);
        let say = by_name("c_say");
        assert_eq!(
            (
                say["exit"].as_i64(),
                say["stdout_bytes"].as_u64(),
                say["stderr_bytes"].as_u64()
            ),
            (Some(0), Some(16), Some(10)),
            "{say}"
        );
        assert_eq!(by_name("d_hang")["timeout"], true);
        assert!(
            runs.iter().all(|r| r["forkserver"] == forked),
            "forkserver should be {forked}: {runs:?}"
        );
    }
    // Round-robin for a while: every execution forked from the one server.
    let (code, summary) = exec_json(&prog, &tests.join("c_say.json"), &["--for", "300ms"]);
    assert_eq!(code, Some(0));
    let n = summary[0]["executions"].as_u64().unwrap();
    assert!(n > 1 && summary[0]["forked"] == n, "{summary:?}");
    // A test that is not one is bad input.
    std::fs::write(tests.join("e_bad.json"), "{\"args\": 3}").unwrap();
    assert_eq!(exec_json(&prog, &tests, &[]).0, Some(2));
}

/// Under `--sandbox` a test cannot write outside its own directory, and
/// `--profile-dir` still collects each run's LLVM profile (how the benchmarks replay
/// fuzzer-made tests on a coverage build without letting `sed -i /bin/sh` through).
#[test]
fn trestle_exec_in_the_sandbox_keeps_writes_inside_and_collects_coverage_profiles() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("w.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(int c, char **v) { FILE *f = c > 1 ? fopen(v[1], \"w\") : 0;\n\
         if (f) { fputs(\"x\", f); fclose(f); } return f ? 0 : 3; }\n",
    )
    .unwrap();
    let prog = dir.path().join("w");
    let built = std::process::Command::new("clang-19")
        .args(["-fprofile-instr-generate", "-fcoverage-mapping", "-o"])
        .arg(&prog)
        .arg(&src)
        .status()
        .unwrap();
    assert!(built.success());
    let outside = dir.path().join("outside");
    let tests = dir.path().join("tests");
    write_test(&tests, "inside", &serde_json::json!({"args": ["here"]}));
    write_test(
        &tests,
        "outside",
        &serde_json::json!({"args": [outside.to_str().unwrap()]}),
    );
    let prof = dir.path().join("prof");
    let (code, runs) = exec_json(
        &prog,
        &tests,
        &["--sandbox", "--profile-dir", prof.to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{runs:?}");
    let exit_of = |n: &str| runs.iter().find(|r| r["name"] == n).unwrap()["exit"].as_i64();
    assert_eq!(exit_of("inside"), Some(0), "{runs:?}");
    // (It wrote to the sandbox's own /tmp, thrown away after the run.)
    assert!(exit_of("outside").is_some(), "{runs:?}");
    assert!(
        !outside.exists(),
        "a sandboxed test wrote {}",
        outside.display()
    );
    for n in ["inside", "outside"] {
        let p = prof.join(format!("{n}.profraw"));
        assert!(
            std::fs::metadata(&p).is_ok_and(|m| m.len() > 0),
            "no profile {}",
            p.display()
        );
    }
}
