/* trestle's lean runtime: what a trestle-cc build needs to be fuzzed at system level,
 * and nothing else.
 *
 * trestle-cc links every program twice from the same objects: with the recording
 * runtime (the Rust staticlib: recording, replay, unit harnesses, capture), and, as a
 * hidden sibling, with this file. The objects are the same, so both builds number
 * their edge guards alike and log a branch's comparison under the same CmpLog id:
 * coverage, roadblocks and CmpLog operands the system fuzzer sees on the lean build
 * mean what they mean on the recording build. The difference is what a forkserver
 * child drags along: a few kilobytes here, no allocator of its own, no exit
 * handlers, no Rust standard library; the recording hooks are empty and the renamed
 * library calls go straight to the C library.
 *
 * It provides, as the recording runtime does:
 * - the edge map the inlined counters write to (__afl_area_ptr), the guards'
 *   numbering, attached to the host's shared memory at the start of main;
 * - the trace-cmp hooks and the branch and comparison-routine hooks, writing
 *   LibAFL's CmpLog map (libafl_targets' cmplog.h layout) while the host attaches
 *   one;
 * - the system-test forkserver (trestle_abi::sysserver);
 * - the guard number dump (trestle_abi::branches), which lets the host check that
 *   both builds number their guards alike before it uses this one.
 * Constants shared with Rust come from trestle_abi.h, generated from trestle-abi. */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trestle_abi.h"

#define EXPORT __attribute__((visibility("default"), used))
#define STR2(x) #x
#define STR(x) STR2(x)

/* ---------------------------------------------------------------- edge coverage */

/* The guards are numbered as libafl_targets numbers them (from 0, modulo its
 * allocated map of 2 MiB); counters go to this private map until main attaches the
 * host's. Untouched, it costs no memory. */
#define ALLOCATED_EDGES (2u << 20)
static uint8_t private_map[ALLOCATED_EDGES];
EXPORT uint8_t *__afl_area_ptr = private_map;
static uint32_t edges_found;

EXPORT void __sanitizer_cov_trace_pc_guard_init(uint32_t *start, uint32_t *stop) {
  if (start == stop || *start != 0) return;
  for (; start < stop; start++) {
    *start = edges_found;
    edges_found = (edges_found + 1) % ALLOCATED_EDGES;
  }
}

/* trestle-cc inlines these calls; a module compiled otherwise still counts. */
EXPORT void __sanitizer_cov_trace_pc_guard(uint32_t *guard) { __afl_area_ptr[*guard]++; }

EXPORT void __sanitizer_cov_trace_pc_indir(uintptr_t callee) { (void)callee; }

static uint32_t edges(void) { return edges_found ? edges_found : 1; }

/* ---------------------------------------------------------------------- CmpLog */

/* LibAFL's CmpLogMap (libafl_targets/src/cmplog.h): CMPLOG_W headers of 4 bytes, then
 * per header CMPLOG_H operand pairs of 24 bytes, or CMPLOG_RTN_H routine pairs of
 * 2 x CMPLOG_RTN_LEN bytes over the same space. */
#define CMPLOG_W 65536
#define CMPLOG_H 32
#define CMPLOG_RTN_LEN 32
#define KIND_INS 0
#define KIND_RTN 1

struct cmp_header {
  uint16_t hits;
  uint8_t shape;
  uint8_t kind;
};
struct cmp_operands {
  uint64_t v0, v1;
  uint8_t v0_is_const;
};
struct cmp_routine {
  uint8_t v0[CMPLOG_RTN_LEN], v1[CMPLOG_RTN_LEN];
};
#define CMPLOG_RTN_H ((CMPLOG_H * sizeof(struct cmp_operands)) / sizeof(struct cmp_routine))
struct cmp_map {
  struct cmp_header headers[CMPLOG_W];
  union {
    struct cmp_operands operands[CMPLOG_W][CMPLOG_H];
    struct cmp_routine routines[CMPLOG_W][CMPLOG_RTN_H];
  } vals;
};
_Static_assert(sizeof(struct cmp_header) == 4 && sizeof(struct cmp_operands) == 24, "LibAFL's CmpLog layout");

static struct cmp_map *cmp_map;
/* Cleared while a hook writes, as LibAFL's hooks do (a hook must not recurse). */
static int cmplog_on;

/* Past LibAFL's map, when the host's segment has room (it makes one of AFL++'s
 * size): per comparison, a 256-bit set of every operand pair it saw in the run. The
 * map keeps a hot comparison's last 32 only; with the set the host can tell whether
 * a changed input changed anything it saw (trestle_abi::lean::CMPLOG_SEEN_WORDS). */
#define SEEN_WORDS TRESTLE_CMPLOG_SEEN_WORDS
static uint64_t (*cmp_seen)[SEEN_WORDS];

static uint64_t mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dull;
  return x ^ (x >> 33);
}

static void note_seen(uintptr_t k, uint64_t h) {
  if (!cmp_seen) return;
  unsigned bit = (unsigned)(mix(h) & (SEEN_WORDS * 64 - 1));
  cmp_seen[k & (CMPLOG_W - 1)][bit / 64] |= 1ull << (bit % 64);
}

static void log_operands(uintptr_t k, uint8_t size, uint64_t a, uint64_t b, uint8_t a_is_const) {
  if (!cmplog_on || size == 0) return;
  cmplog_on = 0;
  k &= CMPLOG_W - 1;
  struct cmp_header *h = &cmp_map->headers[k];
  uint8_t shape = size - 1;
  uint16_t hit;
  if (h->kind != KIND_INS) {
    h->kind = KIND_INS;
    h->hits = 1;
    h->shape = shape;
    hit = 0;
  } else {
    hit = h->hits++;
    if (h->shape < shape) h->shape = shape;
  }
  struct cmp_operands *o = &cmp_map->vals.operands[k][hit & (CMPLOG_H - 1)];
  o->v0 = a;
  o->v1 = b;
  o->v0_is_const = a_is_const;
  note_seen(k, mix(a) ^ b);
  cmplog_on = 1;
}

/* SanitizerCoverage's trace-cmp hooks, keyed by the call's return address as LibAFL
 * keys them (the key only has to be stable within this build). */
#define RETADDR ((uintptr_t)__builtin_return_address(0))
#define KEY(r) (((r) >> 4) ^ ((r) << 8))
#define TRACE_CMP(name, type, size, is_const)                                    \
  EXPORT void name(type a, type b) {                                            \
    uintptr_t r = RETADDR;                                                      \
    log_operands(KEY(r), size, (uint64_t)a, (uint64_t)b, is_const);             \
  }
TRACE_CMP(__sanitizer_cov_trace_cmp1, uint8_t, 1, 0)
TRACE_CMP(__sanitizer_cov_trace_cmp2, uint16_t, 2, 0)
TRACE_CMP(__sanitizer_cov_trace_cmp4, uint32_t, 4, 0)
TRACE_CMP(__sanitizer_cov_trace_cmp8, uint64_t, 8, 0)
TRACE_CMP(__sanitizer_cov_trace_const_cmp1, uint8_t, 1, 1)
TRACE_CMP(__sanitizer_cov_trace_const_cmp2, uint16_t, 2, 1)
TRACE_CMP(__sanitizer_cov_trace_const_cmp4, uint32_t, 4, 1)
TRACE_CMP(__sanitizer_cov_trace_const_cmp8, uint64_t, 8, 1)

EXPORT void __sanitizer_cov_trace_switch(uint64_t val, uint64_t *cases) {
  /* Every case would be logged and dropped one by one: a program's hottest switch
   * (sed's lexer, its DFA) ran through all its cases on every call without CmpLog. */
  if (!cmplog_on) return;
  uintptr_t r = RETADDR;
  for (uint64_t i = 0; i < cases[0]; i++) {
    log_operands(KEY(r + i), (uint8_t)(cases[1] / 8), cases[i + 2], val, 1);
  }
}

/* A branch's comparison under its fixed id (trestle_abi::branches::CMP_HOOK). */
EXPORT void __trestle_cmp(uint64_t id, uint8_t size, uint64_t a, uint64_t b, uint8_t a_is_const) {
  log_operands((uintptr_t)id, size, a, b, a_is_const);
}

/* A comparison routine's operands (trestle_abi::branches::CMP_ROUTINE_HOOK): the
 * first n bytes of each, or with TRESTLE_CMP_ROUTINE_STRING each C string up to its
 * NUL or the bound, read no further than the routine itself reads. */
EXPORT void __trestle_cmp_routine(uint64_t id, const uint8_t *a, const uint8_t *b, uint64_t n) {
  if (!cmplog_on || !a || !b) return;
  cmplog_on = 0;
  int string = (n & TRESTLE_CMP_ROUTINE_STRING) != 0;
  uint64_t bound = n & ~TRESTLE_CMP_ROUTINE_STRING;
  size_t limit = string ? (bound < CMPLOG_RTN_LEN - 1 ? bound : CMPLOG_RTN_LEN - 1) : (n < CMPLOG_RTN_LEN ? n : CMPLOG_RTN_LEN);
  uint8_t va[CMPLOG_RTN_LEN] = {0}, vb[CMPLOG_RTN_LEN] = {0};
  for (size_t i = 0; i < limit && !(string && a[i] == 0); i++) va[i] = a[i];
  for (size_t i = 0; i < limit && !(string && b[i] == 0); i++) vb[i] = b[i];
  size_t k = id & (CMPLOG_W - 1);
  struct cmp_header *h = &cmp_map->headers[k];
  size_t hit;
  if (h->kind != KIND_RTN) {
    h->kind = KIND_RTN;
    h->hits = 1;
    h->shape = CMPLOG_RTN_LEN - 1;
    hit = 0;
  } else {
    hit = h->hits++ % CMPLOG_RTN_H;
  }
  memcpy(cmp_map->vals.routines[k][hit].v0, va, CMPLOG_RTN_LEN);
  memcpy(cmp_map->vals.routines[k][hit].v1, vb, CMPLOG_RTN_LEN);
  if (cmp_seen) {
    /* Both operands as words: a few rounds a call, not one a byte. */
    uint64_t wa[CMPLOG_RTN_LEN / 8], wb[CMPLOG_RTN_LEN / 8], hv = 0;
    memcpy(wa, va, sizeof wa);
    memcpy(wb, vb, sizeof wb);
    for (size_t i = 0; i < CMPLOG_RTN_LEN / 8; i++) hv = mix(hv ^ wa[i]) ^ wb[i];
    note_seen(k, hv);
  }
  cmplog_on = 1;
}

/* ------------------------------------------------------------ shared memory */

/* The segment named by `var`, and its size. */
static void *attach_sized(const char *var, size_t *size) {
  const char *id = getenv(var);
  if (!id) return NULL;
  struct shmid_ds ds;
  *size = shmctl(atoi(id), IPC_STAT, &ds) == 0 ? ds.shm_segsz : 0;
  void *p = shmat(atoi(id), NULL, 0);
  if (p == (void *)-1) {
    fprintf(stderr, "trestle lean runtime: cannot attach %s=%s: %s\n", var, id, strerror(errno));
    return NULL;
  }
  return p;
}

static void *attach(const char *var) {
  size_t size;
  return attach_sized(var, &size);
}

/* The host's edge map (if it is large enough for every edge) and CmpLog map. */
static void attach_maps(void) {
  if (!getenv(TRESTLE_ENV_AFL_SHM_ID)) return;
  const char *size = getenv(TRESTLE_ENV_AFL_MAP_SIZE);
  unsigned long host = size ? strtoul(size, NULL, 10) : TRESTLE_EDGE_MAP_SIZE;
  if (edges() > host) {
    fprintf(stderr, "trestle lean runtime: the program has %u edges, the fuzzer's map %lu; coverage not reported\n", edges(), host);
    return;
  }
  uint8_t *map = attach(TRESTLE_ENV_AFL_SHM_ID);
  if (map) __afl_area_ptr = map;
  size_t cmp_size = 0;
  struct cmp_map *cmp = attach_sized(TRESTLE_ENV_AFL_CMPLOG_SHM_ID, &cmp_size);
  if (cmp) {
    cmp_map = cmp;
    if (cmp_size >= sizeof(struct cmp_map) + sizeof(uint64_t[CMPLOG_W][SEEN_WORDS])) cmp_seen = (void *)(cmp + 1);
    cmplog_on = 1;
  }
}

/* ------------------------------------------------------------ guard number dump */

struct guard_row {
  uint64_t module, slot;
  const uint32_t *guard;
};
/* One padding row, so that the section and its bounds exist in every program. */
__attribute__((used, section(STR(TRESTLE_SECTION_BRANCH_GUARDS)))) static struct guard_row guards_pad;
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define GUARDS_START CAT(__start_, TRESTLE_SECTION_BRANCH_GUARDS)
#define GUARDS_STOP CAT(__stop_, TRESTLE_SECTION_BRANCH_GUARDS)
extern const struct guard_row GUARDS_START[], GUARDS_STOP[];

static int put(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n; }

/* With TRESTLE_BRANCH_DUMP set: every guard row's edge number there, then exit. */
static void maybe_dump(void) {
  const char *path = getenv(TRESTLE_ENV_BRANCH_DUMP);
  if (!path) return;
  uint32_t rows = 0;
  for (const struct guard_row *r = GUARDS_START; r < GUARDS_STOP; r++)
    rows += r->module != 0 && r->guard != NULL;
  FILE *f = fopen(path, "wb");
  uint32_t magic = TRESTLE_BRANCHES_MAGIC;
  int ok = f && put(f, &magic, 4) && put(f, &rows, 4);
  for (const struct guard_row *r = GUARDS_START; ok && r < GUARDS_STOP; r++) {
    if (r->module == 0 || r->guard == NULL) continue;
    ok = put(f, &r->module, 8) && put(f, &r->slot, 8) && put(f, r->guard, 4);
  }
  if (f && fclose(f) != 0) ok = 0;
  if (!ok) fprintf(stderr, "trestle lean runtime: cannot write the branch guards to %s\n", path);
  _exit(ok ? 0 : 2);
}

/* --------------------------------------------------------- system forkserver */

extern int main(int, char **, char **);
extern char **environ;

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return 0;
    c += w;
    n -= (size_t)w;
  }
  return 1;
}

/* One frame: its length, then the payload. */
static int write_frame(const void *p, uint32_t n) {
  char buf[4 + 16];
  if (n > 16) return 0;
  memcpy(buf, &n, 4);
  memcpy(buf + 4, p, n);
  return write_all(TRESTLE_SYS_STATUS_FD, buf, 4 + n);
}

static int write_word(uint32_t v) { return write_frame(&v, 4); }

/* Bytes read before the pipe ended (or -1 on an error). */
static ssize_t read_full(int fd, void *p, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = read(fd, (char *)p + done, n - done);
    if (r > 0) done += (size_t)r;
    else if (r == 0) break;
    else if (errno != EINTR) return -1;
  }
  return (ssize_t)done;
}

/* A bincode (1.x, fixed-width little-endian) reader over one request. */
struct reader {
  const uint8_t *p, *end;
  int bad;
};

static uint64_t u64(struct reader *r) {
  uint64_t v = 0;
  if (r->end - r->p < 8) {
    r->bad = 1;
    return 0;
  }
  memcpy(&v, r->p, 8);
  r->p += 8;
  return v;
}

/* A byte string, copied into `out` as a C string without its NUL bytes. */
static char *bytes(struct reader *r, char **out) {
  uint64_t n = u64(r);
  if (r->bad || (uint64_t)(r->end - r->p) < n) {
    r->bad = 1;
    return NULL;
  }
  char *s = *out, *start = s;
  for (uint64_t i = 0; i < n; i++)
    if (r->p[i]) *s++ = (char)r->p[i];
  *s++ = 0;
  *out = s;
  r->p += n;
  return start;
}

struct request {
  char **argv;   /* null-terminated */
  char **env;    /* name, value, name, value, ..., NULL */
  char *cwd, *stdin_path, *stdout_path, *stderr_path;
  uint64_t cpu_secs, address_space, open_files;
};

/* Decode `body` into `req`; strings and pointer arrays go to `store` (as large as
 * the body, plus room for the terminators and pointers). */
static const char *decode(const uint8_t *body, size_t len, struct request *req, char *store, size_t store_len) {
  struct reader r = {body, body + len, 0};
  char *s = store;
  uint64_t argc = u64(&r);
  if (r.bad || argc > len / 8) return "a request's arguments do not decode";
  char **ptrs = (char **)(((uintptr_t)store + store_len - (argc + 1) * sizeof(char *)) & ~(uintptr_t)7);
  req->argv = ptrs;
  for (uint64_t i = 0; i < argc; i++) req->argv[i] = bytes(&r, &s);
  req->argv[argc] = NULL;
  uint64_t envc = u64(&r);
  if (r.bad || envc > len / 16) return "a request's environment does not decode";
  ptrs -= 2 * envc + 1;
  req->env = ptrs;
  for (uint64_t i = 0; i < envc; i++) {
    req->env[2 * i] = bytes(&r, &s);
    req->env[2 * i + 1] = bytes(&r, &s);
  }
  req->env[2 * envc] = NULL;
  req->cwd = bytes(&r, &s);
  req->stdin_path = bytes(&r, &s);
  req->cpu_secs = u64(&r);
  req->address_space = u64(&r);
  req->open_files = u64(&r);
  req->stdout_path = bytes(&r, &s);
  req->stderr_path = bytes(&r, &s);
  if (r.bad) return "a request that does not decode (host and program built from different trestle versions?)";
  if ((char *)ptrs < s) return "a request too large to decode";
  return NULL;
}

/* The child: the request's limits, directory, input, outputs and environment, then
 * main with its arguments; it allocates nothing of its own. */
static void child(const struct request *q) {
  close(TRESTLE_SYS_CONTROL_FD);
  close(TRESTLE_SYS_STATUS_FD);
  struct {
    int resource;
    uint64_t value;
  } limits[] = {{RLIMIT_CPU, q->cpu_secs}, {RLIMIT_AS, q->address_space}, {RLIMIT_NOFILE, q->open_files}};
  for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
    if (limits[i].value > 0) {
      struct rlimit l = {limits[i].value, limits[i].value};
      setrlimit(limits[i].resource, &l);
    }
  }
  /* Its own process group: the host ends a hang with everything it started. */
  setpgid(0, 0);
  if (chdir(q->cwd) != 0) _exit(126);
  int fd = open(q->stdin_path, O_RDONLY);
  if (fd >= 0 && fd != 0) {
    dup2(fd, 0);
    close(fd);
  }
  const char *outputs[2] = {q->stdout_path, q->stderr_path};
  for (int target = 1; target <= 2; target++) {
    const char *path = outputs[target - 1];
    if (!*path) continue;
    int o = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (o < 0) _exit(126);
    if (o != target) {
      dup2(o, target);
      close(o);
    }
  }
  for (char **e = q->env; *e; e += 2) setenv(e[0], e[1], 1);
  int argc = 0;
  while (q->argv[argc]) argc++;
  exit(main(argc, q->argv, environ));
}

static int serving;

/* Serve system tests if the host asked for it; returns at once otherwise, and in
 * every child (which then goes on into main). */
static void maybe_serve(void) {
  if (serving || !getenv(TRESTLE_ENV_SYS_FORKSERVER)) return;
  serving = 1;
  if (!write_word(TRESTLE_SYS_HELLO)) return; /* nobody listens: a plain run */
  if (!write_word(edges())) _exit(1);
  uint8_t *body = NULL;
  char *store = NULL;
  size_t cap = 0;
  for (;;) {
    uint32_t len;
    ssize_t got = read_full(TRESTLE_SYS_CONTROL_FD, &len, 4);
    if (got == 0) _exit(0); /* the host closed the pipe: done */
    if (got != 4 || len > TRESTLE_SYS_MAX_REQUEST) {
      fprintf(stderr, "trestle lean runtime: system forkserver: a request's length does not read\n");
      _exit(0);
    }
    if (len + 64 > cap) {
      cap = (size_t)len + 4096;
      free(body);
      free(store);
      body = malloc(cap);
      /* Strings (each at most as long as its bytes, plus a NUL per 8-byte length)
       * and the pointer arrays (a pointer per length at most). */
      store = malloc(3 * cap);
      if (!body || !store) _exit(1);
    }
    if (read_full(TRESTLE_SYS_CONTROL_FD, body, len) != (ssize_t)len) {
      fprintf(stderr, "trestle lean runtime: system forkserver: a request ends early\n");
      _exit(0);
    }
    struct request q;
    const char *err = decode(body, len, &q, store, 3 * cap);
    if (err) {
      fprintf(stderr, "trestle lean runtime: system forkserver: %s\n", err);
      _exit(0);
    }
    pid_t pid = fork();
    if (pid == 0) {
      serving = 1;
      child(&q);
    }
    if (pid < 0 || !write_word((uint32_t)pid)) _exit(1);
    int status = 0;
    struct rusage usage;
    memset(&usage, 0, sizeof usage);
    while (wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
    }
    uint64_t ms = (uint64_t)usage.ru_utime.tv_sec * 1000 + usage.ru_utime.tv_usec / 1000 +
                  (uint64_t)usage.ru_stime.tv_sec * 1000 + usage.ru_stime.tv_usec / 1000;
    uint32_t ended[3] = {(uint32_t)status, ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms,
                         usage.ru_maxrss < 0 ? 0 : (uint32_t)usage.ru_maxrss};
    if (!write_frame(ended, sizeof ended)) _exit(1);
  }
}

/* ------------------------------------------------------------------- hooks */

/* Called at the start of main (trestle_abi::hooks::MAIN). */
EXPORT void __trestle_main(int argc, char **argv, char **envp) {
  (void)argc, (void)argv, (void)envp;
  static int once;
  if (once) return;
  once = 1;
  maybe_dump();
  if (getenv(TRESTLE_ENV_TRACE_DIR) || getenv(TRESTLE_ENV_REPLAY)) {
    fprintf(stderr, "trestle lean runtime: this build only runs, it does not record or replay (use the program trestle-cc built, not its .trestle-lean sibling)\n");
  }
  attach_maps();
  maybe_serve();
}

/* The recording hooks: nothing to record here. */
EXPORT void __trestle_enter(uint64_t id, uint32_t *state, const uint64_t *slots, uint32_t n, const void *sp) {
  (void)id, (void)state, (void)slots, (void)n, (void)sp;
}
EXPORT void __trestle_exit(uint64_t id, uint32_t *state, uint64_t ret, const uint64_t *slots, const void *sp, const void *top) {
  (void)id, (void)state, (void)ret, (void)slots, (void)sp, (void)top;
}
EXPORT void __trestle_alloca(void *addr, uint64_t size) { (void)addr, (void)size; }
EXPORT void __trestle_va_list(void *ap, uint64_t id) { (void)ap, (void)id; }
EXPORT void __trestle_exits_with(int status, int always) { (void)status, (void)always; }
EXPORT void __trestle_unit_threw(void) {}

/* The renamed library calls, straight through. */
EXPORT void *__trestle_malloc(size_t n) { return malloc(n); }
EXPORT void *__trestle_calloc(size_t n, size_t size) { return calloc(n, size); }
EXPORT void *__trestle_realloc(void *p, size_t n) { return realloc(p, n); }
EXPORT void *__trestle_reallocarray(void *p, size_t n, size_t size) { return reallocarray(p, n, size); }
EXPORT void __trestle_free(void *p) { free(p); }
EXPORT void __trestle_free_sized(void *p, size_t size) { (void)size, free(p); }
EXPORT char *__trestle_strdup(const char *s) { return strdup(s); }
EXPORT char *__trestle_strndup(const char *s, size_t n) { return strndup(s, n); }
EXPORT ssize_t __trestle_getline(char **line, size_t *n, FILE *f) { return getline(line, n, f); }
EXPORT ssize_t __trestle_getdelim(char **line, size_t *n, int delim, FILE *f) { return getdelim(line, n, delim, f); }
EXPORT int __trestle_vasprintf(char **out, const char *format, va_list args) { return vasprintf(out, format, args); }
int __vasprintf_chk(char **out, int flag, const char *format, va_list args);
EXPORT int __trestle_vasprintf_chk(char **out, int flag, const char *format, va_list args) { return __vasprintf_chk(out, flag, format, args); }
EXPORT int __trestle_asprintf_chk(char **out, int flag, const char *format, ...) {
  va_list args;
  va_start(args, format);
  int n = __vasprintf_chk(out, flag, format, args);
  va_end(args);
  return n;
}
EXPORT int __trestle_asprintf(char **out, const char *format, ...) {
  va_list args;
  va_start(args, format);
  int n = vasprintf(out, format, args);
  va_end(args);
  return n;
}
EXPORT void *__trestle_aligned_alloc(size_t align, size_t n) { return aligned_alloc(align, n); }
EXPORT int __trestle_posix_memalign(void **out, size_t align, size_t n) { return posix_memalign(out, align, n); }
EXPORT void *__trestle_memalign(size_t align, size_t n) { return memalign(align, n); }
EXPORT __attribute__((noreturn)) void __trestle_exit_call(int status) { exit(status); }
EXPORT FILE *__trestle_fopen(const char *path, const char *mode) { return fopen(path, mode); }
EXPORT FILE *__trestle_fdopen(int fd, const char *mode) { return fdopen(fd, mode); }
EXPORT FILE *__trestle_freopen(const char *path, const char *mode, FILE *f) { return freopen(path, mode, f); }
EXPORT int __trestle_fclose(FILE *f) { return fclose(f); }
EXPORT char *__trestle_setlocale(int category, const char *locale) { return setlocale(category, locale); }
EXPORT int __trestle_setvbuf(FILE *f, char *buf, int how, size_t n) { return setvbuf(f, buf, how, n); }
EXPORT char *__trestle_getenv(const char *name) { return getenv(name); }
EXPORT int __trestle_open(const char *path, int flags, unsigned mode) { return open(path, flags, mode); }
EXPORT int __trestle_openat(int dir, const char *path, int flags, unsigned mode) { return openat(dir, path, flags, mode); }
EXPORT int __trestle_close(int fd) { return close(fd); }
EXPORT void *__trestle_mmap(void *addr, size_t n, int prot, int flags, int fd, off_t off) { return mmap(addr, n, prot, flags, fd, off); }
EXPORT int __trestle_munmap(void *addr, size_t n) { return munmap(addr, n); }
EXPORT void *__trestle_mremap(void *old, size_t n, size_t m, int flags, void *to) { return mremap(old, n, m, flags, to); }
EXPORT int __trestle_mprotect(void *addr, size_t n, int prot) { return mprotect(addr, n, prot); }
EXPORT time_t __trestle_time(time_t *t) { return time(t); }
EXPORT int __trestle_gettimeofday(struct timeval *tv, void *tz) { return gettimeofday(tv, tz); }
EXPORT int __trestle_clock_gettime(clockid_t c, struct timespec *ts) { return clock_gettime(c, ts); }
EXPORT pid_t __trestle_fork(void) { return fork(); }
/* A wrapper cannot return into a child sharing its parent's stack: fork is a valid vfork. */
EXPORT pid_t __trestle_vfork(void) { return fork(); }
EXPORT int __trestle_posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *attr,
                                 char *const argv[], char *const envp[]) {
  return posix_spawn(pid, path, fa, attr, argv, envp);
}
EXPORT int __trestle_posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *attr,
                                  char *const argv[], char *const envp[]) {
  return posix_spawnp(pid, file, fa, attr, argv, envp);
}
EXPORT FILE *__trestle_popen(const char *command, const char *mode) { return popen(command, mode); }
EXPORT int __trestle_pclose(FILE *f) { return pclose(f); }
EXPORT pid_t __trestle_wait(int *status) { return wait(status); }
EXPORT pid_t __trestle_waitpid(pid_t pid, int *status, int options) { return waitpid(pid, status, options); }
EXPORT pid_t __trestle_wait3(int *status, int options, struct rusage *usage) { return wait3(status, options, usage); }
EXPORT pid_t __trestle_wait4(pid_t pid, int *status, int options, struct rusage *usage) { return wait4(pid, status, options, usage); }
EXPORT int __trestle_waitid(idtype_t type, id_t id, siginfo_t *info, int options) { return waitid(type, id, info, options); }

/* A C++ throw: the C++ runtime's, present whenever a program throws. */
extern void __cxa_throw(void *, void *, void (*)(void *)) __attribute__((weak, noreturn));
EXPORT __attribute__((noreturn)) void __trestle_cxa_throw(void *obj, void *type, void (*dtor)(void *)) { __cxa_throw(obj, type, dtor); }
