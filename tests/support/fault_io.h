/* Fault injection on real files for the storage tests: a shared library that interposes
 * pwritev, fdatasync and ftruncate, and pwritev64 and ftruncate64, which 32-bit targets call
 * with 64-bit file offsets (it is linked into the test executable, so its definitions come
 * before libc's; the real calls are found with dlsym(RTLD_NEXT)). A test arms one fault on
 * the files whose path contains a given string; every other call goes to libc untouched.
 *
 * Concurrency: arm, clear and the counters are for one test thread; the interposed calls may
 * run in any thread (the state they read is atomic).
 * Limits: one armed fault per call at a time; fds are matched by their /proc/self/fd path, so
 * a file renamed after it was opened is matched by its new name. */
#ifndef TIDEMARK_TESTS_SUPPORT_FAULT_IO_H
#define TIDEMARK_TESTS_SUPPORT_FAULT_IO_H

#ifdef __cplusplus
extern "C" {
#endif

enum tm_fault_call { TM_FAULT_PWRITEV = 0, TM_FAULT_FDATASYNC = 1, TM_FAULT_FTRUNCATE = 2 };

/* Calls on files whose path contains path_part are counted (tm_fault_calls) and may be failed.
 * Resets the counters and disarms every fault. */
void tm_fault_watch(const char* path_part);

/* The next pwritev on a watched file writes only its first partial_bytes bytes (none if 0) and
 * returns that count, then calls between(arg) if given; the pwritev after it fails with err.
 * With partial_bytes 0 the next pwritev fails at once. */
void tm_fault_arm_write(int err, long partial_bytes, void (*between)(void*), void* arg);

/* The next fdatasync (or ftruncate) on a watched file fails with err without doing anything:
 * what Linux reports when writeback failed (the dirty pages may already be dropped). */
void tm_fault_arm(enum tm_fault_call call, int err);

/* Calls of `call` on watched files since tm_fault_watch, failed ones included. */
long tm_fault_calls(enum tm_fault_call call);

/* Disarms every fault and stops watching. */
void tm_fault_clear(void);

#ifdef __cplusplus
}
#endif

#endif
