//! Carving end to end: every bundled subject, built with trestle-cc at -O0 and -O2,
//! is recorded on its seeds, carved and replayed; replays must be faithful and every
//! called function carved. A crashing subject keeps what it recorded.

use serde_json::{json, Value};
use trestle_tests::*;

/// Record → carve → replay --check --json; returns (replay summary, unit index).
fn pipeline(
    program: &std::path::Path,
    seeds: &std::path::Path,
    work: &std::path::Path,
) -> (Value, Value) {
    let traces = work.join("traces");
    let units = work.join("units");
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &program,
        &"--tests",
        &seeds,
        &"--out",
        &traces,
    ]));
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let summary = check_replay(&units);
    let index: Value =
        serde_json::from_slice(&std::fs::read(units.join("index.json")).expect("index.json"))
            .expect("index is JSON");
    (summary, index)
}

fn check_subject(name: &str, opt: &str) {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join(name);
    build_subject(&subject(name), opt, &prog);
    let (summary, index) = pipeline(&prog, &subject(name).join("seeds"), dir.path());
    let units = summary["units"].as_u64().unwrap();
    let faithful = summary["faithful"].as_u64().unwrap();
    let fidelity = summary["fidelity"].as_f64().unwrap();
    assert!(units >= 10, "{name} {opt}: only {units} units carved");
    assert!(summary["functions"]
        .as_array()
        .is_some_and(|f| !f.is_empty()));
    assert!(
        fidelity >= 0.95,
        "{name} {opt}: fidelity {fidelity:.3} ({faithful}/{units}); failures: {:#}",
        summary["failures"]
    );
    let not_carved = index["not_carved"].as_array().unwrap();
    assert!(
        not_carved.is_empty(),
        "{name} {opt}: called but not carved: {not_carved:?}"
    );
    assert!(index["called_functions"].as_u64().unwrap() >= 10);
}

#[test]
fn strproc_o0() {
    check_subject("strproc", "-O0");
}

#[test]
fn strproc_o2() {
    check_subject("strproc", "-O2");
}

#[test]
fn linked_o0() {
    check_subject("linked", "-O0");
}

#[test]
fn linked_o2() {
    check_subject("linked", "-O2");
}

#[test]
fn dispatch_o0() {
    check_subject("dispatch", "-O0");
}

#[test]
fn dispatch_o2() {
    check_subject("dispatch", "-O2");
}

#[test]
fn shapes_cpp_o0() {
    check_subject("shapes", "-O0");
}

#[test]
fn shapes_cpp_o2() {
    check_subject("shapes", "-O2");
}

const CRASHER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct rec { char *name; int n; };
static int count_vowels(const char *s) {
    int n = 0;
    for (; *s; s++) n += strchr("aeiou", *s) != NULL;
    return n;
}
static struct rec *make(const char *s) {
    struct rec *r = malloc(sizeof *r);
    r->name = strdup(s);
    r->n = count_vowels(s);
    return r;
}
static int boom(struct rec *r) {
    if (strcmp(r->name, "crash") == 0) {
        int *volatile p = NULL;     /* volatile: the optimiser must keep the fault */
        return *p + r->n;           /* the planted crash */
    }
    return r->n;
}
int main(int argc, char **argv) {
    int total = 0;
    for (int i = 1; i < argc; i++) total += boom(make(argv[i]));
    printf("%d\n", total);
    return 0;
}
"#;

#[test]
fn a_crashing_subject_keeps_every_record_written_before_the_crash() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "crasher", CRASHER, "-O1");
    let seeds = dir.path().join("seeds");
    write_test(
        &seeds,
        "crash",
        &json!({"args": ["banana", "kiwi", "crash"]}),
    );
    let traces = dir.path().join("traces");
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &seeds,
        &"--out",
        &traces,
    ]));
    let record: Value =
        serde_json::from_slice(&std::fs::read(traces.join("record.json")).unwrap()).unwrap();
    assert_eq!(
        record["tests"][0]["status"],
        json!({"Signaled": 11}),
        "the subject must really crash"
    );
    let units = dir.path().join("units");
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let index: Value =
        serde_json::from_slice(&std::fs::read(units.join("index.json")).unwrap()).unwrap();
    let rows = index["units"].as_array().unwrap();
    let count = |f: &str| rows.iter().filter(|r| r["function"] == f).count();
    // Three calls each of make and count_vowels happened before the crash.
    assert_eq!(count("make"), 3, "{rows:#?}");
    assert_eq!(count("count_vowels"), 3);
    assert_eq!(count("boom"), 3);
    // The crashing invocation's outcome was recorded by the crash handler, and its
    // replay crashes the same way: that counts as faithful.
    let out = ok(&mut trestle(&[&"replay", &units, &"--check", &"--json"]));
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["faithful"], summary["units"], "{summary:#}");
    let shown: Vec<String> = rows
        .iter()
        .filter(|r| r["function"] == "boom")
        .map(|r| {
            ok(&mut trestle(&[
                &"show",
                &units.join(r["file"].as_str().unwrap()),
            ]))
        })
        .collect();
    assert_eq!(
        shown
            .iter()
            .filter(|s| s.contains("expected  crashed with signal 11"))
            .count(),
        1,
        "exactly the call on \"crash\" crashed: {shown:#?}"
    );
}

/// Record → carve → replay of a one-file C subject at -O2 on the given seed tests;
/// returns the replay summary and the unit index.
fn carve_c(name: &str, source: &str, seeds: &[(&str, Value)]) -> (Value, Value, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), name, source, "-O2");
    let seed_dir = dir.path().join("seeds");
    for (test, json) in seeds {
        write_test(&seed_dir, test, json);
    }
    let (summary, index) = pipeline(&prog, &seed_dir, dir.path());
    (summary, index, dir)
}

/// The functions whose units replayed unfaithfully, with the first difference.
fn unfaithful(summary: &Value) -> Vec<(String, String)> {
    summary["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["function"].as_str().unwrap().to_owned(),
                f["verdict"].to_string(),
            )
        })
        .collect()
}

fn units_of(index: &Value, function: &str) -> usize {
    index["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["function"] == function)
        .count()
}

const STRUCT_RETURNS: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
typedef struct { int tag; char *text; } item;          /* 16 bytes: two registers */
typedef struct { double re, im; } cplx;                /* two SSE registers */
typedef struct { long a, b, c; char name[16]; } big;   /* 40 bytes: returned through sret */
typedef struct { long pid; const char *who; } stamp;
static item make_item(const char *s, size_t len) {
    item it;
    it.tag = (int)len;
    it.text = malloc(len + 1);
    memcpy(it.text, s, len);
    it.text[len] = 0;
    return it;
}
static cplx mul(cplx x, cplx y) {
    cplx z = { x.re * y.re - x.im * y.im, x.re * y.im + x.im * y.re };
    return z;
}
static big describe(const item *it) {
    big b;
    memset(&b, 0, sizeof b);
    b.a = it->tag;
    b.b = it->text[0];
    b.c = (long)strlen(it->text) * 3;
    strncpy(b.name, it->text, sizeof b.name - 1);
    return b;
}
/* Differs in every process: its replay must not be judged faithful. */
static stamp stamp_now(const char *who) {
    stamp s = { (long)getpid(), who };
    return s;
}
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        item it = make_item(argv[i], strlen(argv[i]));
        big b = describe(&it);
        cplx z = mul((cplx){ (double)b.a, (double)b.b }, (cplx){ 1.5, -2.0 });
        printf("%s %ld %ld %g %g\n", b.name, b.c, (long)it.tag, z.re, z.im);
        free(it.text);
    }
    stamp s = stamp_now(argv[0]);
    printf("%d\n", s.pid > 0);
    return 0;
}
"#;

#[test]
fn functions_returning_structs_by_value_are_carved_and_replayed() {
    let (summary, index, _dir) = carve_c(
        "structret",
        STRUCT_RETURNS,
        &[
            ("words", json!({"args": ["alpha", "be", "gamma-delta"]})),
            ("one", json!({"args": ["x"]})),
        ],
    );
    let not_carved = index["not_carved"].as_array().unwrap();
    assert!(
        not_carved.is_empty(),
        "called but not carved: {not_carved:?}"
    );
    for f in ["make_item", "mul", "describe", "stamp_now"] {
        assert!(
            units_of(&index, f) > 0,
            "no unit of {f}: {:#}",
            index["units"]
        );
    }
    // Every replay is faithful but the one whose result holds the process id.
    let bad = unfaithful(&summary);
    assert!(bad.iter().all(|(f, _)| f == "stamp_now"), "{bad:#?}");
    assert!(
        bad.iter().any(|(f, _)| f == "stamp_now"),
        "a changed return struct must be seen: {summary:#}"
    );
}

const VARIADIC: &str = r#"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
static int errors;
static char last[128];
/* The error reporter of bc and dc: a format and its arguments. */
static void report(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last, sizeof last, fmt, ap);
    va_end(ap);
    errors++;
    fprintf(stderr, "error: %s\n", last);
}
/* More arguments than registers: the rest comes on the stack. */
static long sum(int n, ...) {
    va_list ap;
    va_start(ap, n);
    long s = 0;
    for (int i = 0; i < n; i++) s += va_arg(ap, long) * (i + 1);
    va_end(ap);
    return s;
}
static double mean(int n, ...) {
    va_list ap;
    va_start(ap, n);
    double s = 0;
    for (int i = 0; i < n; i++) s += va_arg(ap, double);
    va_end(ap);
    return n ? s / n : 0;
}
int main(int argc, char **argv) {
    long total = 0;
    for (int i = 1; i < argc; i++) {
        char *end;
        long v = strtol(argv[i], &end, 10);
        if (*end) report("not a number: %s (argument %d of %d)", argv[i], i, argc - 1);
        else total += v;
    }
    long s = sum(9, total, 2L, 3L, 4L, 5L, 6L, 7L, 8L, (long)argc);
    double m = mean(3, (double)total, 2.5, (double)argc);
    printf("%ld %ld %g %d %s\n", total, s, m, errors, last);
    return errors != 0;
}
"#;

#[test]
fn variadic_functions_are_carved_and_replayed() {
    let (summary, index, _dir) = carve_c(
        "variadic",
        VARIADIC,
        &[
            ("numbers", json!({"args": ["1", "22", "333"]})),
            ("words", json!({"args": ["7", "seven", "x9"]})),
        ],
    );
    let not_carved = index["not_carved"].as_array().unwrap();
    assert!(
        not_carved.is_empty(),
        "called but not carved: {not_carved:?}"
    );
    for f in ["report", "sum", "mean"] {
        assert!(
            units_of(&index, f) > 0,
            "no unit of {f}: {:#}",
            index["units"]
        );
    }
    assert_eq!(summary["faithful"], summary["units"], "{summary:#}");
}

const FREE_LIST: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* bc's number cache: a freed number keeps its (dangling) digit pointer and goes on
   a free list, from which the next number is taken. */
struct num { int refs; int len; struct num *next; char *digits; char *value; };
static struct num *free_list;
static struct num *new_num(int len) {
    struct num *n;
    if (free_list) {
        n = free_list;
        free_list = n->next;
    } else {
        n = malloc(sizeof *n);
    }
    n->refs = 1;
    n->len = len;
    n->digits = malloc(len);
    memset(n->digits, '0', len);
    n->value = n->digits;
    return n;
}
static void free_num(struct num **p) {
    if (!*p) return;
    if (--(*p)->refs == 0) {
        free((*p)->digits);
        (*p)->next = free_list;
        free_list = *p;
    }
    *p = NULL;
}
static struct num *parse(const char *s) {
    int len = (int)strlen(s);
    struct num *n = new_num(len);
    for (int i = 0; i < len; i++) n->digits[len - 1 - i] = (s[i] >= '0' && s[i] <= '9') ? s[i] : '0';
    return n;
}
static struct num *add(struct num *a, struct num *b) {
    int len = (a->len > b->len ? a->len : b->len) + 1;
    struct num *r = new_num(len);
    int carry = 0;
    for (int i = 0; i < len; i++) {
        int d = carry + (i < a->len ? a->digits[i] - '0' : 0) + (i < b->len ? b->digits[i] - '0' : 0);
        r->digits[i] = (char)('0' + d % 10);
        carry = d / 10;
    }
    return r;
}
static void print_num(const struct num *n) {
    int i = n->len - 1;
    while (i > 0 && n->digits[i] == '0') i--;
    for (; i >= 0; i--) putchar(n->digits[i]);
    putchar('\n');
}
/* Reads a freed number's digits: what it sees is not part of any context, so its
   replay must not be judged faithful. */
static int stale_digit(const struct num *n) {
    return n && n->digits ? *(volatile char *)n->digits : -1;
}
int main(int argc, char **argv) {
    struct num *sum = new_num(1);
    for (int i = 1; i < argc; i++) {
        struct num *x = parse(argv[i]);
        struct num *s = add(sum, x);
        free_num(&x);
        free_num(&sum);
        sum = s;
        print_num(sum);
    }
    print_num(sum);
    free_num(&sum);
    printf("%d\n", stale_digit(free_list));
    return 0;
}
"#;

#[test]
fn numbers_on_a_free_list_keep_their_dangling_pointers_faithfully() {
    let (summary, index, _dir) = carve_c(
        "freelist",
        FREE_LIST,
        &[
            (
                "sum",
                json!({"args": ["12", "989", "5", "70001", "3", "44"]}),
            ),
            (
                "big",
                json!({"args": ["99999999", "1", "123456789012345", "7"]}),
            ),
        ],
    );
    for f in [
        "new_num",
        "free_num",
        "add",
        "parse",
        "print_num",
        "stale_digit",
    ] {
        assert!(
            units_of(&index, f) > 0,
            "no unit of {f}: {:#}",
            index["units"]
        );
    }
    let bad = unfaithful(&summary);
    assert!(bad.iter().all(|(f, _)| f == "stale_digit"), "{bad:#?}");
    assert!(
        bad.iter().any(|(f, _)| f == "stale_digit"),
        "a read of freed memory must not replay faithfully: {summary:#}"
    );
}

/// dc's numeric.c: the operations and the constant they copy.
const CALLBACKS_NUMERIC: &str = r#"
#include <stdlib.h>
struct num { int refs; long v; };
struct num *zero;   /* set once at start-up; the operations copy it */
void init_numbers(void) {
    zero = calloc(1, sizeof *zero);
    zero->refs = 1;
}
static struct num *copy_num(struct num *n) {
    n->refs++;
    return n;
}
int add_nums(long a, long b, long *out) {
    struct num *z = copy_num(zero);
    *out = a + b + z->v;
    z->refs--;
    return 0;
}
int mul_nums(long a, long b, long *out) {
    struct num *z = copy_num(zero);
    *out = a * b + z->v;
    z->refs--;
    return 0;
}
"#;

/// dc's eval.c and stack.c: the operations are passed by address, from another file.
const CALLBACKS_EVAL: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
void init_numbers(void);
int add_nums(long, long, long *);
int mul_nums(long, long, long *);
static long stack[16];
static int top;
void binop(int (*op)(long, long, long *)) {
    long r;
    if (top < 2) return;
    if (op(stack[top - 2], stack[top - 1], &r) == 0) {
        top--;
        stack[top - 1] = r;
    }
}
int main(int argc, char **argv) {
    init_numbers();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "+") == 0) binop(add_nums);
        else if (strcmp(argv[i], "*") == 0) binop(mul_nums);
        else if (top < 16) stack[top++] = atol(argv[i]);
    }
    printf("%ld\n", top ? stack[top - 1] : 0);
    return 0;
}
"#;

#[test]
fn a_callback_defined_in_another_file_brings_its_globals_into_the_context() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("numeric.c"), CALLBACKS_NUMERIC).unwrap();
    std::fs::write(src.join("eval.c"), CALLBACKS_EVAL).unwrap();
    let prog = dir.path().join("calc");
    build_subject(&src, "-O2", &prog);
    let seeds = dir.path().join("seeds");
    write_test(
        &seeds,
        "rpn",
        &json!({"args": ["2", "3", "+", "4", "*", "10", "+"]}),
    );
    let (summary, index) = pipeline(&prog, &seeds, dir.path());
    assert!(units_of(&index, "binop") > 0, "{:#}", index["units"]);
    // Without `zero` in binop's context, add_nums would read a null pointer.
    assert_eq!(summary["faithful"], summary["units"], "{summary:#}");
}

/// bc's main makes stdout line-buffered; its scanner picks stdout up on first use.
const LINE_BUFFERED: &str = r#"
#include <stdio.h>
#include <string.h>
static FILE *out;
static int echo(const char *word) {
    if (!out) out = stdout;   /* first call: stdout is not in the context yet */
    fputs(word, out);
    fputc(strlen(word) > 3 ? '\n' : ' ', out);
    return (int)strlen(word);
}
int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int n = 0;
    for (int i = 1; i < argc; i++) n += echo(argv[i]);
    printf("%d\n", n);
    return 0;
}
"#;

#[test]
fn a_stream_made_line_buffered_in_main_is_line_buffered_in_replay() {
    let (summary, index, _dir) = carve_c(
        "linebuf",
        LINE_BUFFERED,
        &[("words", json!({"args": ["a", "longer", "word", "b"]}))],
    );
    assert!(units_of(&index, "echo") > 0, "{:#}", index["units"]);
    assert_eq!(summary["faithful"], summary["units"], "{summary:#}");
}

/// mawk's output table: the standard streams behind the program's own pointers,
/// stderr unbuffered (the C library's default) and not yet written when the first
/// warning goes to it.
const UNBUFFERED_STDERR: &str = r#"
#include <stdio.h>
#include <string.h>
static FILE *sinks[2];
static int report(int to_err, const char *msg) {
    FILE *f = sinks[to_err];
    fputs(msg, f);
    fputc('\n', f);
    return (int)strlen(msg);
}
static void warn_to(FILE *f, const char *msg) {
    fprintf(f, "warning: %s\n", msg);
}
int main(int argc, char **argv) {
    sinks[0] = stdout;
    sinks[1] = stderr;
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '!') warn_to(stderr, argv[i] + 1);
        else n += report(argv[i][0] == '?', argv[i]);
    }
    printf("%d\n", n);
    return 0;
}
"#;

#[test]
fn an_unbuffered_stderr_stays_unbuffered_in_replay() {
    let (summary, index, _dir) = carve_c(
        "stderrsink",
        UNBUFFERED_STDERR,
        &[
            (
                "report-first",
                json!({"args": ["?first", "out", "?second"]}),
            ),
            (
                "warn-first",
                json!({"args": ["!careful", "?then", "!again"]}),
            ),
        ],
    );
    assert!(units_of(&index, "report") >= 3, "{:#}", index["units"]);
    assert!(units_of(&index, "warn_to") >= 2, "{:#}", index["units"]);
    // A replay that gave stderr a buffer the recording never had reaches one more
    // extent after the call than the recording did.
    let bad = unfaithful(&summary);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// mawk's output table again: `print` writes through the table's `FILE *`, and
/// `printf`, `putchar` or `fflush(stdout)` elsewhere in the same call use the C
/// library's own `stdout`; reading does the same with `stdin`. Both pointers name one
/// stream, so a replay must restore that stream where the C library's globals point,
/// not as a copy only the table sees.
const STD_STREAMS_SHARED: &str = r#"
#include <stdio.h>
#include <string.h>
struct sink { const char *name; FILE *fp; };
static struct sink sinks[2];
static int emit(struct sink *s, const char *msg) {
    fputs(msg, s->fp);
    printf(" (%zu)\n", strlen(msg));
    return (int)strlen(msg);
}
static int take(struct sink *s) {
    int a = fgetc(s->fp);
    int b = getchar();
    return a < 0 || b < 0 ? -1 : a * 256 + b;
}
int main(int argc, char **argv) {
    sinks[0].name = "-"; sinks[0].fp = stdout;
    sinks[1].name = "/dev/stdin"; sinks[1].fp = stdin;
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '<') n += take(&sinks[1]);
        else n += emit(&sinks[0], argv[i]);
    }
    printf("%d\n", n);
    return 0;
}
"#;

#[test]
fn a_standard_stream_behind_a_program_pointer_is_restored_where_the_c_library_sees_it() {
    let (summary, index, _dir) = carve_c(
        "stdshared",
        STD_STREAMS_SHARED,
        &[
            ("emit", json!({"args": ["one", "two", "three"]})),
            (
                "take",
                json!({"args": ["<", "x", "<", "<"], "stdin": "abcdefgh"}),
            ),
        ],
    );
    assert!(units_of(&index, "emit") >= 3, "{:#}", index["units"]);
    assert!(units_of(&index, "take") >= 2, "{:#}", index["units"]);
    // Restored as a copy, the table's stream and the C library's diverge: emit's
    // buffer misses what printf wrote, take's second byte comes from past the
    // read-ahead.
    let bad = unfaithful(&summary);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// mawk's output pipes: `print | "cmd"` starts the command in one call (a pipe and
/// a fork), later calls write to it, `close` (or the exit) waits for it in another.
/// A replay of the waiting call alone has no child to wait for; a call that starts
/// its child and waits for it itself replays as recorded.
const CHILD_PROCESSES: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
struct pipe_out { FILE *fp; int pid; char cmd[32]; };
static struct pipe_out outs[4];
static int nouts;
static struct pipe_out *open_pipe(const char *cmd) {
    int fds[2];
    if (pipe(fds) < 0) return 0;
    struct pipe_out *o = &outs[nouts++];
    strncpy(o->cmd, cmd, sizeof o->cmd - 1);
    fflush(stdout);
    o->pid = fork();
    if (o->pid == 0) {
        close(fds[1]);
        dup2(fds[0], 0);
        execl("/bin/sh", "sh", "-c", cmd, (char *)0);
        _exit(127);
    }
    close(fds[0]);
    o->fp = fdopen(fds[1], "w");
    return o;
}
static int wait_for(int pid) {
    int status, id;
    while ((id = wait(&status)) != pid)
        if (id < 0) { fprintf(stderr, "wait_for: no child %d\n", pid); exit(3); }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}
static int close_pipe(struct pipe_out *o) {
    fclose(o->fp);
    return wait_for(o->pid);
}
static int run_and_wait(const char *cmd) {
    int pid = fork();
    if (pid == 0) { execl("/bin/sh", "sh", "-c", cmd, (char *)0); _exit(127); }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}
static int count_through(const char *cmd, const char *text) {
    FILE *p = popen(cmd, "w");
    if (!p) return -1;
    fputs(text, p);
    return pclose(p);
}
int main(int argc, char **argv) {
    int sum = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "open")) open_pipe("cat >/dev/null");
        else if (!strcmp(argv[i], "close") && nouts) sum += close_pipe(&outs[--nouts]);
        else if (!strncmp(argv[i], "run:", 4)) sum += run_and_wait(argv[i] + 4);
        else if (!strncmp(argv[i], "popen:", 6)) sum += count_through(argv[i] + 6, "text\n");
        else if (nouts) fprintf(outs[nouts - 1].fp, "%s\n", argv[i]);
    }
    printf("%d\n", sum);
    return 0;
}
"#;

#[test]
fn calls_that_wait_for_a_child_started_before_them_are_not_carved_and_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "children", CHILD_PROCESSES, "-O2");
    let seeds = dir.path().join("seeds");
    write_test(
        &seeds,
        "pipes",
        &json!({"args": ["open", "a", "b", "close", "open", "c", "close"]}),
    );
    write_test(
        &seeds,
        "commands",
        &json!({"args": ["run:exit 3", "popen:cat >/dev/null", "run:true"]}),
    );
    let (traces, units) = (dir.path().join("traces"), dir.path().join("units"));
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &seeds,
        &"--out",
        &traces,
    ]));
    let out = run(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("not carved: waits for a child process started before the call (wait)"),
        "{err}"
    );
    let index: Value =
        serde_json::from_slice(&std::fs::read(units.join("index.json")).unwrap()).unwrap();
    let unreplayable = index["unreplayable"]
        .as_object()
        .expect("unreplayable counts in the index");
    let waits: u64 = unreplayable.values().map(|n| n.as_u64().unwrap()).sum();
    // close_pipe and wait_for, twice each.
    assert!(waits >= 4, "{index:#}");
    for f in ["close_pipe", "wait_for"] {
        assert_eq!(units_of(&index, f), 0, "{:#}", index["units"]);
        let not_carved = index["not_carved"].as_array().unwrap();
        assert!(
            not_carved.iter().any(|n| n
                .as_str()
                .unwrap()
                .starts_with(&format!("{f}: every carvable call waits for a child"))),
            "{f}: {not_carved:#?}"
        );
    }
    // Starting a child, or starting one and waiting for it in the same call, replays
    // as recorded; so does main, in which every child starts and ends.
    for f in ["open_pipe", "run_and_wait", "count_through", "main"] {
        assert!(units_of(&index, f) > 0, "{f}: {:#}", index["units"]);
    }
    let summary = check_replay(&units);
    let bad = unfaithful(&summary);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// Two globals a call writes, one of which a replay cannot reproduce: the program
/// asks for an environment variable only the replay sets.
const NAMED_GLOBALS: &str = r#"
#include <stdio.h>
#include <stdlib.h>
int replayed_here;
static int calls;
static int note(const char *var) {
    replayed_here = getenv(var) != 0;
    return ++calls;
}
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) note(argv[i]);
    printf("%d %d\n", calls, replayed_here);
    return 0;
}
"#;

#[test]
fn show_and_replay_differences_name_globals_by_name() {
    let (summary, index, dir) = carve_c(
        "named",
        NAMED_GLOBALS,
        &[(
            "env",
            json!({"args": [trestle_abi::hooks::ENV_REPLAY, "HOME"]}),
        )],
    );
    assert!(units_of(&index, "note") >= 1, "{:#}", index["units"]);
    let bad = unfaithful(&summary);
    let note = bad
        .iter()
        .find(|(f, _)| f == "note")
        .unwrap_or_else(|| panic!("note replays unfaithfully: {bad:#?}"));
    assert!(
        note.1
            .contains("(global replayed_here): byte 0 is 0x00 recorded, 0x01 in replay"),
        "{note:?}"
    );
    let unit = index["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["function"] == "note")
        .unwrap();
    let shown = ok(&mut trestle(&[
        &"show",
        &dir.path()
            .join("units")
            .join(unit["file"].as_str().unwrap()),
    ]));
    for g in ["global replayed_here", "global calls"] {
        assert!(shown.contains(g), "{g}: {shown}");
    }
    assert!(
        !shown.contains("global 0") && !shown.contains("Global {"),
        "{shown}"
    );
}

/// mawk seeds `rand()` from the clock at start-up (`time`, in seconds, as configured
/// on Debian): the seed differs between the recording and a replay, though not
/// between two replays in the same second.
const CLOCK_SEED: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
struct rng { unsigned long seed; double seeded_at; int draws; };
static struct rng rng;
static void seed_from_clock(void) {
    rng.seeded_at = (double)time(0);
    rng.seed = (unsigned long)rng.seeded_at;
    rng.draws = 0;
}
static unsigned draw(unsigned bound) {
    rng.seed = rng.seed * 6364136223846793005UL + 1442695040888963407UL;
    rng.draws++;
    return (unsigned)(rng.seed >> 33) % bound;
}
int main(int argc, char **argv) {
    seed_from_clock();
    unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 3, sum = 0;
    for (unsigned i = 0; i < n; i++) sum += draw(100) < 100;
    printf("%u %d\n", sum, rng.draws);
    return 0;
}
"#;

#[test]
fn a_seed_taken_from_the_clock_does_not_count_against_a_replay() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "clockseed", CLOCK_SEED, "-O2");
    let seeds = dir.path().join("seeds");
    write_test(&seeds, "three", &json!({"args": ["3"]}));
    write_test(&seeds, "five", &json!({"args": ["5"]}));
    let (traces, units) = (dir.path().join("traces"), dir.path().join("units"));
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &seeds,
        &"--out",
        &traces,
    ]));
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    // The replays come in a later second than the recording.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let summary = check_replay(&units);
    let index: Value =
        serde_json::from_slice(&std::fs::read(units.join("index.json")).unwrap()).unwrap();
    assert!(
        units_of(&index, "seed_from_clock") > 0,
        "{:#}",
        index["units"]
    );
    // draw depends on the seed only through its context: faithful as it is.
    let bad = unfaithful(&summary);
    assert!(bad.is_empty(), "{bad:#?}");
    // seed_from_clock (and main, which calls it) differ from the recording only in
    // the seed and the time it was taken, which two replays in the same second agree
    // on, unless the second runs with the clock shifted.
    assert!(summary["unstable"].as_u64().unwrap() >= 2, "{summary:#}");
}

/// A call that leaves the address of one of its locals in memory (a dangling
/// pointer kept as an integer, as a debugging field or a stack-depth probe would):
/// the replay runs at another stack depth than the recording, so the word differs,
/// and it is no evidence against the replay.
const STACK_ADDRESS: &str = r#"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
struct probe { uintptr_t deepest; int calls; };
__attribute__((noinline)) static void note_depth(struct probe *p, int v) {
    volatile int local = v;
    p->deepest = (uintptr_t)&local;
    p->calls += local > 0;
}
int main(int argc, char **argv) {
    struct probe *p = calloc(1, sizeof *p);
    for (int i = 0; i < argc + 1; i++) note_depth(p, i + 1);
    printf("%d\n", p->calls);
    free(p);
    return 0;
}
"#;

#[test]
fn a_stack_address_a_call_leaves_in_memory_does_not_count_against_a_replay() {
    let (served, index, dir) = carve_c(
        "stackaddr",
        STACK_ADDRESS,
        &[
            ("one", json!({"args": ["a"]})),
            ("two", json!({"args": ["a", "b"]})),
        ],
    );
    assert!(units_of(&index, "note_depth") > 0, "{:#}", index["units"]);
    // Served from forks of one server, the second replay of a unit that differs runs
    // deeper in the stack (as a fresh process with one more environment variable
    // does): the address differs between the two replays and is left out.
    let fresh = check_replay_with(&dir.path().join("units"), &["--no-forkserver"]);
    for (how, summary) in [("served", served), ("fresh", fresh)] {
        let bad = unfaithful(&summary);
        assert!(bad.is_empty(), "{how}: {bad:#?}");
        assert!(
            summary["unstable"].as_u64().unwrap() >= 1,
            "{how}: {summary:#}"
        );
    }
}

/// What differs from run to run without the clock: a hash salt from getrandom (as
/// expat takes one) and the process id.
const RUN_TO_RUN: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/random.h>
struct table { unsigned salt; int entries; };
static struct table table;
__attribute__((noinline)) static void make_salt(void) {
    unsigned s = 0;
    if (getrandom(&s, sizeof s, 0) != sizeof s) s = 1;
    table.salt = s | 1;
}
__attribute__((noinline)) static int self_id(void) { return (int)getpid(); }
__attribute__((noinline)) static unsigned bucket(unsigned key) {
    table.entries++;
    return (key * table.salt) % 97;
}
int main(int argc, char **argv) {
    make_salt();
    unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 3, sum = 0;
    for (unsigned i = 0; i < n; i++) sum += bucket(i) < 97;
    printf("%u %d %d\n", sum, table.entries, self_id() > 0);
    return 0;
}
"#;

#[test]
fn what_two_recordings_of_a_call_disagree_on_is_left_out_of_its_oracle_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "runtorun", RUN_TO_RUN, "-O2");
    let seeds = dir.path().join("seeds");
    write_test(&seeds, "three", &json!({"args": ["3"]}));
    write_test(&seeds, "five", &json!({"args": ["5"]}));
    let carve_into = |name: &str| {
        let (traces, units) = (
            dir.path().join(format!("traces-{name}")),
            dir.path().join(format!("units-{name}")),
        );
        ok(&mut trestle(&[
            &"record",
            &"--program",
            &prog,
            &"--tests",
            &seeds,
            &"--out",
            &traces,
        ]));
        ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
        units
    };
    let (units, again) = (carve_into("first"), carve_into("second"));
    // Alone, a replay cannot know the process id it should return: two replays differ
    // in the return value, which is never left out on their word.
    let alone = check_replay(&units);
    let bad = unfaithful(&alone);
    assert!(
        bad.iter()
            .any(|(f, v)| f == "self_id" && v.contains("return value")),
        "{bad:#?}"
    );
    // The two recordings disagree on it too: left out for that unit, and said.
    let out = run(&mut trestle(&[
        &"replay", &units, &"--check", &"--json", &"--twin", &again,
    ]));
    let twin: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{twin:#}");
    assert!(unfaithful(&twin).is_empty(), "{twin:#}");
    // Paired: the calls that start from the same context in both recordings
    // (make_salt, self_id), not bucket, whose context holds the salt.
    let twinned = twin["twinned"].as_u64().unwrap();
    assert!(
        twinned >= 4 && twinned < twin["units"].as_u64().unwrap(),
        "{twin:#}"
    );
    let said: Vec<(String, String)> = twin["nondeterministic_units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["function"].as_str().unwrap().to_owned(),
                u["verdict"].to_string(),
            )
        })
        .collect();
    assert!(
        said.iter()
            .any(|(f, v)| f == "self_id" && v.contains("the return value")),
        "{said:#?}"
    );
    assert_eq!(
        twin["nondeterministic"].as_u64().unwrap() as usize,
        said.len()
    );
    // bucket depends on the salt only through its context: compared in full.
    assert!(
        said.iter()
            .any(|(f, v)| f == "make_salt" && v.contains("word(s) of memory")),
        "{said:#?}"
    );
    assert!(
        units_of(
            &serde_json::from_slice(&std::fs::read(units.join("index.json")).unwrap()).unwrap(),
            "bucket"
        ) >= 8
    );
    assert!(said.iter().all(|(f, _)| f != "bucket"), "{said:#?}");
    // Pairs are found from the unit directories' indexes; units carved before the
    // index said the process are read instead, and paired the same.
    for dir in [&units, &again] {
        let index = dir.join("index.json");
        let mut v: Value = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
        for row in v["units"].as_array_mut().unwrap() {
            assert!(row["pid"].is_u64(), "{row}");
            row.as_object_mut().unwrap().remove("pid");
        }
        std::fs::write(&index, serde_json::to_vec(&v).unwrap()).unwrap();
    }
    let out = run(&mut trestle(&[
        &"replay", &units, &"--check", &"--json", &"--twin", &again,
    ]));
    let read: Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in ["twinned", "nondeterministic", "faithful"] {
        assert_eq!(read[k], twin[k], "{k}: {read:#} against {twin:#}");
    }
}

/// bc's scanner: a token's value goes into a union, a character over what may still
/// be the previous token's string pointer.
const UNION_VALUE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
union value { char *s; char c; long n; };
union value yylval;
static int lex(const char *arg) {
    if (strlen(arg) == 1) {
        yylval.c = arg[0];      /* leaves the other 7 bytes of the old pointer */
        return 'c';
    }
    yylval.s = strdup(arg);
    return 's';
}
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        int t = lex(argv[i]);
        if (t == 's') printf("string %s\n", yylval.s);
        else printf("char %c\n", yylval.c);
    }
    return 0;
}
"#;

#[test]
fn a_char_stored_over_a_stale_pointer_in_a_union_replays_faithfully() {
    let (summary, index, _dir) = carve_c(
        "union",
        UNION_VALUE,
        &[("tokens", json!({"args": ["word", "+", "other", "(", "x"]}))],
    );
    assert!(units_of(&index, "lex") >= 3, "{:#}", index["units"]);
    // main's own unit stays out: the pointer it overwrites was made during the call,
    // at an address of the recording's heap in one run and of the replay's in the
    // other, and nothing in its context says it was a pointer.
    let bad = unfaithful(&summary);
    assert!(bad.iter().all(|(f, _)| f == "main"), "{bad:#?}");
}

/// A regex-like automaton, as sed's DFA keeps one: a growing array of cross-linked
/// states, a 256-entry transition table per state, and per-class arrays that may be
/// empty (`malloc(0)`: a unique pointer the program keeps and later frees).
const AUTOMATON: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct state { struct state **next; int accepting; int nclass; unsigned char *classes; struct state *fail; };
struct dfa { struct state *states; size_t n, cap; char *pattern; struct dfa *superset; };
static struct state *add_state(struct dfa *d) {
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 2;
        d->states = realloc(d->states, d->cap * sizeof *d->states);
    }
    struct state *s = &d->states[d->n++];
    memset(s, 0, sizeof *s);
    s->next = calloc(256, sizeof *s->next);
    return s;
}
struct dfa *compile(const char *pat) {
    struct dfa *d = calloc(1, sizeof *d);
    d->pattern = strdup(pat);
    size_t len = strlen(pat);
    for (size_t i = 0; i <= len; i++) add_state(d);
    for (size_t i = 0; i < len; i++) {
        struct state *s = &d->states[i];
        /* A class per character: '.' has none (an empty array, still allocated). */
        s->nclass = pat[i] == '.' ? 0 : 1;
        s->classes = malloc(s->nclass);
        if (s->nclass) s->classes[0] = (unsigned char)pat[i];
    }
    /* Pointers into the states array only once it stops moving. */
    for (size_t i = 0; i < len; i++) {
        struct state *s = &d->states[i];
        for (int c = 0; c < 256; c++)
            if (s->nclass == 0 || c == s->classes[0]) s->next[c] = &d->states[i + 1];
        s->fail = &d->states[0];
    }
    d->states[len].accepting = 1;
    return d;
}
struct dfa *superset(const struct dfa *d) {
    struct dfa *sup = calloc(1, sizeof *sup);
    sup->pattern = malloc(0);
    return sup;
}
int matches(const struct dfa *d, const char *text) {
    for (const char *start = text;; start++) {
        const struct state *s = &d->states[0];
        for (const char *p = start; s && !s->accepting && *p; p++)
            s = s->next[(unsigned char)*p];
        if (s && s->accepting) return 1;
        if (!*start) return 0;
    }
}
void dfafree(struct dfa *d) {
    for (size_t i = 0; i < d->n; i++) {
        free(d->states[i].next);
        free(d->states[i].classes);
    }
    free(d->states);
    free(d->pattern);
    if (d->superset) dfafree(d->superset);
    free(d);
}
int main(int argc, char **argv) {
    if (argc < 2) return 2;
    struct dfa *d = compile(argv[1]);
    d->superset = superset(d);
    char line[256];
    while (fgets(line, sizeof line, stdin))
        if (matches(d, line)) fputs(line, stdout);
    dfafree(d);
    return 0;
}
"#;

#[test]
fn a_regex_like_graph_with_empty_blocks_is_restored_whole() {
    let (summary, index, _dir) = carve_c(
        "automaton",
        AUTOMATON,
        &[
            ("dots", json!({"args": ["a.c"], "stdin": "abc\nxyz\naxc\n"})),
            (
                "word",
                json!({"args": ["needle"], "stdin": "haystack\nneedles\n"}),
            ),
        ],
    );
    for f in ["compile", "superset", "matches", "dfafree"] {
        assert!(
            units_of(&index, f) > 0,
            "no unit of {f}: {:#}",
            index["units"]
        );
    }
    // dfafree frees every block the graph holds, the empty ones included: a block
    // missing from the restored graph makes it crash.
    let bad = unfaithful(&summary);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// C++ (tests/subjects/ledger): `std::string` temporaries (small strings point into
/// the object itself), a `std::map` and a `std::vector` in a class with a virtual
/// method, and an exception thrown through two frames and caught in a third.
#[test]
fn cxx_exceptions_and_string_temporaries_replay_faithfully() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("ledger");
    build_subject(&subject("ledger"), "-O2", &prog);
    let (summary, index) = pipeline(&prog, &subject("ledger").join("seeds"), dir.path());
    let bad = unfaithful(&summary);
    assert!(bad.is_empty(), "{bad:#?}");
    // The calls an exception left have an outcome too (it threw), and their replays
    // end the same way instead of unwinding into the runtime.
    assert_eq!(summary["no_oracle"], 0, "{summary:#}");
    let units = dir.path().join("units");
    let threw: Vec<String> = index["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| {
            u["function"]
                .as_str()
                .is_some_and(|f| f.starts_with("parse_qty") || f.starts_with("Ledger::add"))
        })
        .map(|u| {
            ok(&mut trestle(&[
                &"show",
                &units.join(u["file"].as_str().unwrap()),
            ]))
        })
        .filter(|shown| shown.contains("expected  threw an exception"))
        .collect();
    assert!(
        threw.len() >= 2,
        "the throwing calls of parse_qty and Ledger::add: {threw:#?}"
    );
    let not_carved = index["not_carved"].as_array().unwrap();
    assert!(
        not_carved.is_empty(),
        "called but not carved: {not_carved:?}"
    );
}

#[test]
fn contexts_over_the_size_bound_are_not_carved_and_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "automaton", AUTOMATON, "-O2");
    let seeds = dir.path().join("seeds");
    write_test(
        &seeds,
        "word",
        &json!({"args": ["needle"], "stdin": "haystack\nneedles\n"}),
    );
    let traces = dir.path().join("traces");
    let units = dir.path().join("units");
    // Each state's transition table is 2 KiB: with a 4 KiB bound, the whole automaton
    // (seven states) cannot be captured, one state's table can.
    ok(trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &seeds,
        &"--out",
        &traces,
    ])
    .env(trestle_abi::hooks::ENV_CONTEXT_LIMIT, "4096"));
    let out = run(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("not carved: context over the snapshot size bound"),
        "{err}"
    );
    let index: Value =
        serde_json::from_slice(&std::fs::read(units.join("index.json")).unwrap()).unwrap();
    assert!(index["over_bound"].as_u64().unwrap() > 0, "{index:#}");
    // matches and superset reach every state in every call: not carved, with the
    // reason (dfafree is carved for its call on the small superset only).
    let not_carved: Vec<&str> = index["not_carved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for f in ["matches", "superset"] {
        assert!(
            not_carved
                .iter()
                .any(|n| n.starts_with(&format!("{f}:")) && n.contains("snapshot size bound")),
            "{f}: {not_carved:#?}"
        );
        assert_eq!(units_of(&index, f), 0);
    }
    // What was carved is whole, and replays as recorded; a call whose memory after
    // it was over the bound (compile builds the automaton) has no oracle, with why.
    let summary = check_replay(&units);
    assert!(summary["faithful"].as_u64().unwrap() > 0);
    assert_eq!(
        summary["faithful"].as_u64().unwrap() + summary["no_oracle"].as_u64().unwrap(),
        summary["units"].as_u64().unwrap(),
        "{summary:#}"
    );
    let out = ok(&mut trestle(&[
        &"replay",
        &units.join("compile"),
        &"--check",
        &"-v",
    ]));
    assert!(out.contains("over the snapshot size bound"), "{out}");
}

/// Bytes of the largest trace file under `dir`, and of all of them.
fn trace_sizes(dir: &std::path::Path) -> (u64, u64) {
    let (mut max, mut total) = (0, 0);
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            let (m, t) = trace_sizes(&p);
            max = max.max(m);
            total += t;
        } else if p
            .extension()
            .is_some_and(|x| x == trestle_abi::trace::TRACE_EXT)
        {
            let n = std::fs::metadata(&p).unwrap().len();
            max = max.max(n);
            total += n;
        }
    }
    (max, total)
}

/// `record --max-trace` stops recording new calls once a process's trace reaches the
/// bound, and every call it did record keeps its outcome: fewer units, each with an
/// oracle, as faithful as without the bound.
#[test]
fn a_trace_bound_keeps_traces_small_and_every_recorded_call_whole() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("strproc");
    build_subject(&subject("strproc"), "-O2", &prog);
    let seeds = subject("strproc").join("seeds");
    let full = dir.path().join("full");
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &seeds,
        &"--out",
        &full,
    ]));
    let (full_max, full_total) = trace_sizes(&full);
    let bound = full_max / 4;
    assert!(
        bound > 4096,
        "the seeds' traces are too small to bound: {full_max} bytes"
    );
    let small = dir.path().join("small");
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &seeds,
        &"--out",
        &small,
        &"--max-trace",
        &bound.to_string(),
    ]));
    let (small_max, small_total) = trace_sizes(&small);
    // A call under way when the bound is reached still gets its end (and its context
    // went in whole): a trace may pass the bound by that much, no more.
    assert!(
        small_max < bound * 2,
        "largest trace {small_max} bytes with a bound of {bound}"
    );
    assert!(
        small_total < full_total,
        "{small_total} vs {full_total} bytes"
    );
    let (units_full, units_small) = (
        dir.path().join("units-full"),
        dir.path().join("units-small"),
    );
    ok(&mut trestle(&[&"carve", &full, &"--out", &units_full]));
    ok(&mut trestle(&[&"carve", &small, &"--out", &units_small]));
    let (a, b) = (check_replay(&units_full), check_replay(&units_small));
    assert!(
        b["units"].as_u64().unwrap() < a["units"].as_u64().unwrap(),
        "{a:#} {b:#}"
    );
    assert!(b["units"].as_u64().unwrap() > 0);
    assert_eq!(
        b["no_oracle"], 0,
        "a bounded recording left calls without their end: {b:#}"
    );
    assert!(b["fidelity"].as_f64().unwrap() >= 0.95, "{b:#}");
}

#[test]
fn recording_named_functions_carves_their_units_only_and_they_replay() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("strproc");
    build_subject(&subject("strproc"), "-O2", &prog);
    let seeds = subject("strproc").join("seeds");
    let (traces, units) = (dir.path().join("traces"), dir.path().join("units"));
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &seeds,
        &"--out",
        &traces,
        &"--function",
        &"split_line",
        &"--function",
        &"str_upper",
    ]));
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let index: Value =
        serde_json::from_slice(&std::fs::read(units.join("index.json")).unwrap()).unwrap();
    assert!(
        units_of(&index, "split_line") > 0 && units_of(&index, "str_upper") > 0,
        "{index:#}"
    );
    let others: Vec<&Value> = index["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["function"] != "split_line" && r["function"] != "str_upper")
        .collect();
    assert!(
        others.is_empty(),
        "units of functions not asked for: {others:?}"
    );
    // Unit files are compressed, and read back as any other.
    let file = units.join(index["units"][0]["file"].as_str().unwrap());
    assert_eq!(
        &std::fs::read(&file).unwrap()[..4],
        &[0x28, 0xb5, 0x2f, 0xfd],
        "{} is not zstd",
        file.display()
    );
    let summary = check_replay(&units);
    assert!(summary["fidelity"].as_f64().unwrap() >= 0.95, "{summary:#}");
    // A name the program does not have is an error that names it.
    let o = run(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &seeds,
        &"--out",
        &dir.path().join("t2"),
        &"--function",
        &"no_such_fn",
    ]));
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--function no_such_fn"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A function called 60 times whose branch at a marked line is evaluated only on its
/// calls with an item over 50: those come last.
const LATE_BRANCH: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long total;

__attribute__((noinline)) int weigh(const char *item) {
    int n = atoi(item);
    if (n > 50) {
        if (strlen(item) > 2 && item[2] == '!') { /* the branch */
            total += 1000;
            return 2;
        }
        total += n;
        return 1;
    }
    total += 1;
    return 0;
}

int main(int argc, char **argv) {
    char buf[32];
    for (int i = 1; i <= 60; i++) {
        snprintf(buf, sizeof buf, "%d%s", i, argc > 1 ? argv[1] : "");
        weigh(buf);
    }
    printf("%ld\n", total);
    return 0;
}
"#;

#[test]
fn recording_for_a_branch_carves_only_the_calls_that_reach_it() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "late", LATE_BRANCH, "-O1");
    let tests = dir.path().join("tests");
    write_test(&tests, "plain", &json!({"args": []}));
    let line = LATE_BRANCH
        .lines()
        .position(|l| l.contains("/* the branch */"))
        .unwrap()
        + 1;
    let loc = format!("late.c:{line}");
    let (traces, units) = (dir.path().join("traces"), dir.path().join("units"));
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &tests,
        &"--out",
        &traces,
        &"--function",
        &"weigh",
        &"--max-per-fn",
        &"3",
        &"--reach",
        &loc,
    ]));
    let o = run(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let out = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{out}");
    let index: Value =
        serde_json::from_slice(&std::fs::read(units.join("index.json")).unwrap()).unwrap();
    let rows = index["units"].as_array().unwrap();
    // Three calls that reach it (the first three over 50), none of the fifty before.
    assert_eq!(rows.len(), 3, "{index:#}\n{out}");
    for r in rows {
        assert_eq!(r["function"], "weigh");
        assert!(
            r["call_index"].as_u64().unwrap() >= 50,
            "a call that does not reach the branch was carved: {r}"
        );
    }
    assert!(
        out.contains("did not reach"),
        "carve says what it left out: {out}"
    );
    // Without --reach the first three calls are carved, which never reach it.
    let (t2, u2) = (dir.path().join("t2"), dir.path().join("u2"));
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &tests,
        &"--out",
        &t2,
        &"--function",
        &"weigh",
        &"--max-per-fn",
        &"3",
    ]));
    ok(&mut trestle(&[&"carve", &t2, &"--out", &u2]));
    let index: Value =
        serde_json::from_slice(&std::fs::read(u2.join("index.json")).unwrap()).unwrap();
    assert!(
        index["units"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["call_index"].as_u64().unwrap() < 3),
        "{index:#}"
    );
    // A line without a branch is an error that names it.
    let o = run(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &tests,
        &"--out",
        &dir.path().join("t3"),
        &"--reach",
        &"late.c:1",
    ]));
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--reach late.c:1"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A fatal error reported by the C library: `error_at_line` prints and exits inside
/// glibc, out of reach of the renamed `exit`, so the calls it leaves open end there.
const LIBRARY_EXIT: &str = r#"
#include <error.h>
#include <stdio.h>
#include <string.h>
static int check(const char *word, int line) {
    if (strcmp(word, "bad") == 0)
        error_at_line(3, 0, "input", line, "bad word: %s", word);
    return (int)strlen(word);
}
static int total(int argc, char **argv) {
    int n = 0;
    for (int i = 1; i < argc; i++)
        n += check(argv[i], i);
    return n;
}
int main(int argc, char **argv) {
    printf("%d\n", total(argc, argv));
    return 0;
}
"#;

#[test]
fn calls_left_open_by_a_library_error_report_replay_to_the_exit_they_recorded() {
    let (summary, index, _dir) = carve_c(
        "liberror",
        LIBRARY_EXIT,
        &[
            ("fine", json!({"args": ["good", "words"]})),
            ("fatal", json!({"args": ["good", "bad", "never"]})),
        ],
    );
    // check returned twice, then exited; total and main returned once and exited once.
    assert!(units_of(&index, "check") >= 3, "{:#}", index["units"]);
    assert!(units_of(&index, "total") >= 2, "{:#}", index["units"]);
    // Each call that ended in the report has its outcome (exit status 3) and replays
    // to it: no unit without an oracle, none an error.
    assert_eq!(summary["errors"].as_u64(), Some(0), "{summary:#}");
    assert_eq!(summary["no_oracle"].as_u64(), Some(0), "{summary:#}");
    let bad = unfaithful(&summary);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// A pointer one element before a heap block (mawk's regex run stack keeps its
/// "empty" mark at `base - 1`): it lies in the allocator's chunk header, in no
/// block, and means the block.
const ONE_BEFORE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
typedef struct { long a, b, c; } entry;
static entry *base, *empty, *top;
static __attribute__((noinline)) void init(int n) {
    base = malloc(n * sizeof *base);
    empty = top = base - 1;
}
static __attribute__((noinline)) void push(long v) {
    ++top;
    top->a = v;
    top->b = v * 2;
    top->c = v * 3;
}
static __attribute__((noinline)) long pop_all(void) {
    long s = 0;
    while (top != empty) {
        s = s * 7 + top->a + top->c;
        --top;
    }
    return s;
}
int main(int argc, char **argv) {
    init(64);
    for (int i = 1; i < argc; i++)
        push(atol(argv[i]));
    printf("%ld\n", pop_all());
    return 0;
}
"#;

#[test]
fn a_pointer_one_before_a_heap_block_is_the_blocks() {
    let (summary, index, _dir) = carve_c(
        "onebefore",
        ONE_BEFORE,
        &[("three", json!({"args": ["4", "5", "6"]}))],
    );
    assert!(units_of(&index, "push") >= 3, "{:#}", index["units"]);
    assert!(units_of(&index, "pop_all") >= 1, "{:#}", index["units"]);
    assert_eq!(summary["errors"].as_u64(), Some(0), "{summary:#}");
    let bad = unfaithful(&summary);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// Functions handed a `va_list` (m4's `xvasprintf`): what it points at, the register
/// save area of the function that started it and the stack arguments of its caller,
/// is part of their context.
const VA_LISTS: &str = r#"
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
static __attribute__((noinline)) int vformat(char *out, size_t n, const char *fmt, va_list ap) {
    return vsnprintf(out, n, fmt, ap);
}
static __attribute__((noinline)) int format(char *out, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vformat(out, n, fmt, ap);
    va_end(ap);
    return r;
}
static __attribute__((noinline)) long vsum(int count, va_list ap) {
    long s = 0;
    for (int i = 0; i < count; i++)
        s = s * 3 + va_arg(ap, long);
    return s;
}
static __attribute__((noinline)) long sum(int count, ...) {
    va_list ap;
    va_start(ap, count);
    long s = vsum(count, ap);
    va_end(ap);
    return s;
}
/* Strings the C library allocates for itself, returned. */
static __attribute__((noinline)) char *vdup(const char *fmt, va_list ap) {
    char *s;
    return vasprintf(&s, fmt, ap) < 0 ? NULL : s;
}
static __attribute__((noinline)) char *dup(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = vdup(fmt, ap);
    va_end(ap);
    return s;
}
static __attribute__((noinline)) char *twice(const char *w) {
    char *s;
    return asprintf(&s, "%s%s", w, w) < 0 ? NULL : s;
}
int main(int argc, char **argv) {
    char buf[128];
    for (int i = 1; i < argc; i++) {
        long n = strtol(argv[i], 0, 10);
        format(buf, sizeof buf, "%s=%ld/%d/%s", argv[i], n, i, "x");
        puts(buf);
        char *d = dup("<%s:%d>", argv[i], i), *t = twice(argv[i]);
        printf("%s %s\n", d, t);
        free(d);
        free(t);
        /* Nine: four of them past the registers, on the caller's stack. */
        printf("%ld\n", sum(9, n, n + 1, n + 2, 4L, 5L, 6L, 7L, 8L, 9L));
    }
    return 0;
}
"#;

#[test]
fn functions_given_a_va_list_replay_faithfully() {
    let (summary, index, _dir) = carve_c(
        "valists",
        VA_LISTS,
        &[
            ("two", json!({"args": ["12", "-7"]})),
            ("one", json!({"args": ["300"]})),
        ],
    );
    check_va_lists(summary, index);
    // Built as distributions build (m4's gnulib called __vasprintf_chk).
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(
        dir.path(),
        "valists",
        &format!("#define _FORTIFY_SOURCE 2\n{VA_LISTS}"),
        "-O2",
    );
    write_test(
        &dir.path().join("seeds"),
        "two",
        &json!({"args": ["12", "-7"]}),
    );
    let (summary, index) = pipeline(&prog, &dir.path().join("seeds"), dir.path());
    check_va_lists(summary, index);
}

fn check_va_lists(summary: Value, index: Value) {
    assert!(units_of(&index, "vformat") >= 2, "{:#}", index["units"]);
    assert!(units_of(&index, "vsum") >= 2, "{:#}", index["units"]);
    for f in ["vdup", "dup", "twice"] {
        assert!(units_of(&index, f) >= 2, "{f}: {:#}", index["units"]);
    }
    assert_eq!(summary["errors"].as_u64(), Some(0), "{summary:#}");
    assert_eq!(summary["no_oracle"].as_u64(), Some(0), "{summary:#}");
    let bad = unfaithful(&summary);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// Memory the program maps: a file, and an anonymous buffer it reads a file into
/// (as gnulib reads `/proc/self/maps` for m4) and unmaps, are contexts like heap
/// blocks; a mapping made behind the runtime's back (a raw system call, as a library
/// built without trestle-cc would) is memory a replay does not have.
const MAPPED_MEMORY: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
struct reader { char *buf; size_t len, pos; };
static __attribute__((noinline)) int count_lines(const char *data, size_t n) {
    int lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += data[i] == '\n';
    return lines;
}
static __attribute__((noinline)) int count_words(const char *data, size_t n) {
    int words = 0;
    for (size_t i = 0; i < n; i++)
        words += data[i] != ' ' && data[i] != '\n' && (i == 0 || data[i - 1] == ' ' || data[i - 1] == '\n');
    return words;
}
static __attribute__((noinline)) int reader_get(struct reader *r) {
    return r->pos < r->len ? (unsigned char)r->buf[r->pos++] : -1;
}
static __attribute__((noinline)) void reader_close(struct reader *r) {
    munmap(r->buf, 4096); /* r->buf stays behind, pointing at unmapped memory */
    r->len = 0;
}
static __attribute__((noinline)) int name_length(const char *name) {
    return (int)strlen(name);
}
int main(int argc, char **argv) {
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return 2;
    /* First, so that no mapping the runtime knows ends where it starts. */
    const char *raw = (const char *)syscall(SYS_mmap, 0, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    const char *data = mmap(0, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED || raw == MAP_FAILED)
        return 2;
    struct reader r = { mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), 0, 0 };
    r.len = pread(fd, r.buf, 4096, 0);
    int vowels = 0, c;
    while ((c = reader_get(&r)) >= 0)
        vowels += strchr("aeiou", c) != 0;
    reader_close(&r);
    printf("%d %d %d %d\n", count_lines(data, st.st_size), count_words(raw, st.st_size), vowels, name_length(argv[1]));
    return 0;
}
"#;

#[test]
fn mapped_memory_is_carved_and_replayed_and_a_mapping_made_unseen_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), "mapped", MAPPED_MEMORY, "-O1");
    let seeds = dir.path().join("seeds");
    write_test(
        &seeds,
        "lines",
        &json!({"args": ["in.txt"], "files": {"in.txt": "one two\nthree\nfour five six\n", "other": "x"}}),
    );
    let (traces, units) = (dir.path().join("traces"), dir.path().join("units"));
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &seeds,
        &"--out",
        &traces,
    ]));
    let out = run(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let index: Value =
        serde_json::from_slice(&std::fs::read(units.join("index.json")).unwrap()).unwrap();
    // The file and the buffer mapped through mmap are followed like heap blocks ...
    for f in ["count_lines", "reader_get", "reader_close", "name_length"] {
        assert!(units_of(&index, f) >= 1, "{f}: {:#}", index["units"]);
    }
    // ... the one mapped by a raw system call is nowhere in the recording.
    assert!(
        err.contains("not carved: gets a pointer (argument 0) into memory a replay does not have"),
        "{err}"
    );
    assert_eq!(units_of(&index, "count_words"), 0, "{:#}", index["units"]);
    let not_carved = index["not_carved"].as_array().unwrap();
    assert!(
        not_carved.iter().any(|n| n
            .as_str()
            .unwrap()
            .starts_with("count_words: every carvable call gets a pointer (argument 0)")),
        "{not_carved:#?}"
    );
    // Every unit replays to what was recorded: the mapped bytes are restored, and the
    // unit of reader_close unmaps the replay's copy without harm.
    let summary = check_replay(&units);
    assert_eq!(summary["errors"].as_u64(), Some(0), "{summary:#}");
    let bad = unfaithful(&summary);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// A program that notes every start of its own in a file (its constructor runs once a
/// process, before `main`): `@STARTS@` is replaced by the file's path.
const COUNTS_STARTS: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
__attribute__((constructor)) static void note_start(void) {
    FILE *f = fopen("@STARTS@", "a");
    if (f) { fputs("start\n", f); fclose(f); }
}
__attribute__((noinline)) static int weigh(const char *word) {
    int w = 0;
    for (const char *p = word; *p; p++) w = w * 31 + *p;
    return w & 1023;
}
__attribute__((noinline)) static char *shout(const char *word) {
    char *s = strdup(word);
    for (char *p = s; *p; p++) if (*p >= 'a' && *p <= 'z') *p -= 32;
    return s;
}
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        char *s = shout(argv[i]);
        printf("%s %d\n", s, weigh(argv[i]));
        free(s);
    }
    return 0;
}
"#;

/// Build `source` (whose constructor notes each start of the program in the file
/// `@STARTS@` stands for), record and carve it on `seeds`; returns the directory,
/// the units, the start log and how many units the constructor itself has (each
/// replay of it notes a start of its own).
fn carve_counting_starts(
    source: &str,
    seeds: &[(&str, Value)],
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
    usize,
) {
    let dir = tempfile::tempdir().unwrap();
    let starts = dir.path().join("starts.log");
    let prog = build_c(
        dir.path(),
        "starts",
        &source.replace("@STARTS@", starts.to_str().unwrap()),
        "-O2",
    );
    let seed_dir = dir.path().join("seeds");
    for (name, test) in seeds {
        write_test(&seed_dir, name, test);
    }
    let (traces, units) = (dir.path().join("traces"), dir.path().join("units"));
    ok(&mut trestle(&[
        &"record",
        &"--program",
        &prog,
        &"--tests",
        &seed_dir,
        &"--out",
        &traces,
    ]));
    ok(&mut trestle(&[&"carve", &traces, &"--out", &units]));
    let index: Value =
        serde_json::from_slice(&std::fs::read(units.join("index.json")).unwrap()).unwrap();
    let of_constructor = units_of(&index, "note_start");
    (dir, units, starts, of_constructor)
}

/// `replay UNITS --check --json --jobs 1` and `extra`, expecting exit status
/// `status`: the summary, and how often the program started meanwhile.
fn replay_counting_starts(
    units: &std::path::Path,
    starts: &std::path::Path,
    extra: &[&dyn AsRef<std::ffi::OsStr>],
    status: i32,
) -> (Value, usize) {
    std::fs::write(starts, "").unwrap();
    let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> =
        vec![&"replay", &units, &"--check", &"--json", &"--jobs", &"1"];
    args.extend_from_slice(extra);
    let o = run(&mut trestle(&args));
    assert_eq!(
        o.status.code(),
        Some(status),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let summary = serde_json::from_slice(&o.stdout).expect("replay --json prints JSON");
    (
        summary,
        std::fs::read_to_string(starts)
            .unwrap_or_default()
            .lines()
            .count(),
    )
}

#[test]
fn replays_fork_from_one_start_of_the_program_and_judge_as_a_start_each_does() {
    let (_dir, units, starts, of_constructor) = carve_counting_starts(
        COUNTS_STARTS,
        &[
            ("one", json!({"args": ["alpha", "beta"]})),
            ("two", json!({"args": ["gamma", "delta", "epsilon"]})),
        ],
    );
    let (served, started) = replay_counting_starts(&units, &starts, &[], 0);
    let n = served["units"].as_u64().unwrap() as usize;
    assert!(n >= 8, "{served:#}");
    assert_eq!(
        served["faithful"].as_u64().unwrap() as usize,
        n,
        "{served:#}"
    );
    // One thread, one start: every unit replayed in a fork of it.
    assert_eq!(
        started,
        1 + of_constructor,
        "starts of the program while replaying {n} units through the forkserver"
    );
    let (spawned, started) = replay_counting_starts(&units, &starts, &[&"--no-forkserver"], 0);
    assert_eq!(
        started,
        n + of_constructor,
        "starts of the program while replaying {n} units without the forkserver"
    );
    // The same verdicts either way.
    assert_eq!(served["faithful"], spawned["faithful"]);
    assert_eq!(served["functions"], spawned["functions"]);
}

/// The start-noting program whose `await_ready` waits for a file `main` made in
/// its working directory: replayed alone, in a directory without it, it spins.
const HANGS_IN_REPLAY: &str = r#"
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void note_start(void) {
    FILE *f = fopen("@STARTS@", "a");
    if (f) { fputs("start\n", f); fclose(f); }
}
__attribute__((noinline)) static int await_ready(int tries) {
    int spins = 0;
    while (access("ready", F_OK) != 0) spins++;
    return spins + tries;
}
int main(void) {
    FILE *f = fopen("ready", "w");
    if (f) fclose(f);
    printf("%d\n", await_ready(1));
    return 0;
}
"#;

#[test]
fn a_unit_that_hangs_in_a_forked_replay_is_not_started_again() {
    let (_dir, units, starts, of_constructor) =
        carve_counting_starts(HANGS_IN_REPLAY, &[("once", json!({}))]);
    let (served, started) = replay_counting_starts(&units, &starts, &[&"--timeout", &"1s"], 1);
    let hung: Vec<&Value> = served["failures"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["function"] == "await_ready")
        .collect();
    assert_eq!(hung.len(), 1, "{served:#}");
    assert!(
        hung[0]["verdict"]["Error"]
            .as_str()
            .is_some_and(|e| e.contains("timed out")),
        "{served:#}"
    );
    // Past the limit in the fork, the unit is not tried again in a fresh process:
    // the server's start is the only one but the constructor's own replays.
    assert_eq!(started, 1 + of_constructor, "{served:#}");
}

/// An archive reader in the shape of cpio's: it reads standard input with `read(2)`,
/// a header line at a time, and writes each member into a directory it creates,
/// setting the file's mode through the descriptor it still holds.
const RAW_EXTRACT: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
/* One header of 16 bytes: the member's name, NUL-padded. */
__attribute__((noinline)) static long read_header(int fd, char *name) {
    long n = read(fd, name, 16);
    name[15] = 0;
    return n;
}
__attribute__((noinline)) static int set_mode(int fd, int mode) {
    return fchmod(fd, mode);
}
__attribute__((noinline)) static int extract(const char *name) {
    char dir[16];
    strcpy(dir, name);
    char *slash = strchr(dir, '/');
    if (slash) {
        *slash = 0;
        mkdir(dir, 0755);
    }
    int fd = open(name, O_CREAT | O_WRONLY, 0600);
    if (fd < 0) return -1;
    write(fd, name, strlen(name));
    int r = set_mode(fd, 0644);
    close(fd);
    return r;
}
int main(void) {
    char name[16];
    int bad = 0;
    while (read_header(0, name) == 16) bad += extract(name) != 0;
    printf("%d\n", bad);
    return 0;
}
"#;

#[test]
fn a_raw_read_of_stdin_resumes_where_it_stood_and_a_file_in_a_made_directory_is_reopened() {
    let members: String = ["out/first.txt", "out/second.txt", "out/third.txt"]
        .iter()
        .map(|m| format!("{m:\0<16}"))
        .collect();
    let (summary, index, _dir) = carve_c(
        "rawextract",
        RAW_EXTRACT,
        &[("three", json!({"args": [], "stdin": members}))],
    );
    // Three headers read and a fourth read at the end: each from another offset.
    assert!(units_of(&index, "read_header") >= 3, "{index:#}");
    assert!(units_of(&index, "set_mode") >= 1, "{index:#}");
    // Without the position of descriptor 0, every replay of read_header read the
    // first header (and the last one found 16 bytes, not 0); without the directory,
    // set_mode's descriptor was not open and fchmod failed.
    let bad = unfaithful(&summary);
    assert!(bad.is_empty(), "{bad:#?}");
    assert_eq!(
        summary["faithful"].as_u64(),
        summary["units"].as_u64(),
        "{summary:#}"
    );
}

/// A pattern compiled by the C library's own `regcomp`, kept in a global and matched
/// by a function of the program: the automaton is memory the C library allocated for
/// itself (GNU diff's `-I` pattern). `regexec` grows it while it matches.
const LIBC_REGEX: &str = r#"
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static regex_t pattern;
static int matched, lines;
__attribute__((noinline)) int ignored(const char *line) {
    lines++;
    if (regexec(&pattern, line, 0, NULL, 0) == 0) {
        matched++;
        return 1;
    }
    return 0;
}
int main(int argc, char **argv) {
    if (argc < 2 || regcomp(&pattern, argv[1], REG_EXTENDED | REG_NOSUB) != 0)
        return 2;
    char buf[256];
    while (fgets(buf, sizeof buf, stdin)) {
        buf[strcspn(buf, "\n")] = 0;
        if (!ignored(buf))
            puts(buf);
    }
    printf("%d of %d ignored\n", matched, lines);
    regfree(&pattern);
    return 0;
}
"#;

/// The C library's own blocks reachable from a context (a compiled pattern's
/// automaton) are captured by their chunk header and restored from the C library's
/// allocator: without them `regexec` ran over the recording's heap addresses in the
/// replay and `ignored` hung or crashed.
#[test]
fn a_pattern_the_c_library_compiled_is_part_of_the_context_and_replays() {
    let (summary, index, dir) = carve_c(
        "libcregex",
        LIBC_REGEX,
        &[
            (
                "comments",
                json!({"args": ["^ *(#|//)[a-z]+"], "stdin": "# one\nkeep me\n  // two\nx # three\n#\n"}),
            ),
            (
                "digits",
                json!({"args": ["[0-9]{3,}$"], "stdin": "a1\nb22\nc333\nd4444\n"}),
            ),
        ],
    );
    assert!(units_of(&index, "ignored") >= 4, "{index:#}");
    let bad = unfaithful(&summary);
    assert!(bad.is_empty(), "{bad:#?}");
    assert_eq!(summary["errors"].as_u64(), Some(0), "{summary:#}");
    // The automaton is in the unit, as the C library's heap.
    let unit = index["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["function"] == "ignored")
        .unwrap();
    let file = dir
        .path()
        .join("units")
        .join(unit["file"].as_str().unwrap());
    let shown = ok(&mut trestle(&[&"show", &file]));
    assert!(shown.contains("heap of the C library's own"), "{shown}");
}

/// `replay --program` with a path relative to where trestle was started: every replay
/// outside the forkserver (here all of them) runs in a directory of its own, and
/// could not start the program by that path.
#[test]
fn a_relative_program_path_replays_outside_the_forkserver_too() {
    let (summary, _index, dir) = carve_c(
        "libcregex",
        LIBC_REGEX,
        &[(
            "digits",
            json!({"args": ["[0-9]{2,}"], "stdin": "a1\nb22\n"}),
        )],
    );
    assert_eq!(summary["errors"].as_u64(), Some(0), "{summary:#}");
    let out = ok(trestle(&[
        &"replay",
        &"units",
        &"--check",
        &"--json",
        &"--no-forkserver",
        &"--program",
        &"libcregex",
    ])
    .current_dir(dir.path()));
    let again: Value = serde_json::from_str(&out).expect("replay --json");
    assert_eq!(again["errors"].as_u64(), Some(0), "{again:#}");
    assert_eq!(again["faithful"], summary["faithful"], "{again:#}");
}
