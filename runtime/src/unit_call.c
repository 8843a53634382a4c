/* A unit call that exit() or a crash ends without ending the process.
 *
 * In-process fuzzing runs the unit in the fuzzer's own process, where `exit()` or a
 * crash inside the unit must end the execution, not the campaign. The pass renames
 * `exit` to the runtime's hook, and the runtime's crash signal handler runs on a
 * crash; while a catching call is running, both jump back here, to the call that
 * started the unit, skipping the unit's frames as exit or the crash would have.
 * Everything the unit touched is put back afterwards (context reset, unit heap
 * emptied). That needs sigsetjmp, which Rust cannot call soundly (it returns
 * twice), hence this file.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>

/* Generated from trestle-abi by runtime/build.rs: the result codes below. */
#include "trestle_abi.h"

typedef uint64_t (*trestle_thunk)(const uint64_t *slots);

/* The innermost catching call on this thread, or NULL. */
static _Thread_local sigjmp_buf *catching;

/* Call `thunk(slots)`. Returns TRESTLE_EXEC_RETURNED if the unit returned,
 * TRESTLE_EXEC_EXITED if it called exit(), and TRESTLE_EXEC_CRASHED + the signal
 * number if it crashed. */
int __trestle_call_catching(trestle_thunk thunk, const uint64_t *slots)
{
    sigjmp_buf here;
    sigjmp_buf *outer = catching;
    /* No signal mask saved (it would cost a system call per execution): exit() is
     * not called from a signal handler we would have to leave, and the crash handler
     * is installed with SA_NODEFER, so the mask it jumps from is the unit's own. */
    int how = sigsetjmp(here, 0);
    if (how) {
        catching = outer;
        return how;
    }
    catching = &here;
    thunk(slots);
    catching = outer;
    return TRESTLE_EXEC_RETURNED;
}

/* From the exit hook: end the catching call. Returns 0, doing nothing, when no call
 * on this thread is catching (the hook then ends the process). */
int __trestle_exit_to_caller(void)
{
    if (!catching)
        return 0;
    siglongjmp(*catching, TRESTLE_EXEC_EXITED);
}

/* From the crash signal handler: end the catching call. Returns 0, doing nothing,
 * when no call on this thread is catching (the crash is not the unit's). */
int __trestle_crash_to_caller(int sig)
{
    if (!catching)
        return 0;
    siglongjmp(*catching, TRESTLE_EXEC_CRASHED + sig);
}
