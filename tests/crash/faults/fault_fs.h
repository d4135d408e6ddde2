/* Fault injection on file-system calls the storage tests cannot reach with tests/support/fault_io:
 * open (creating the next log segment), fsync (of the log directory after that) and unlink
 * (retention). A shared library linked into the test executable, so its definitions come before
 * libc's (the real calls are found with dlsym(RTLD_NEXT)); every call not armed goes to libc.
 *
 * Concurrency: arm and clear from the test thread; the interposed calls may run in any thread.
 * Limits: matches open and unlink by the path given, fsync by its fd's /proc/self/fd path; only
 * the libc entry points open/open64, fsync and unlink (not openat, unlinkat, the syscall). */
#ifndef TIDEMARK_TESTS_FAULTS_FAULT_FS_H
#define TIDEMARK_TESTS_FAULTS_FAULT_FS_H

#ifdef __cplusplus
extern "C" {
#endif

enum tm_fs_call { TM_FS_OPEN = 0, TM_FS_FSYNC = 1, TM_FS_UNLINK = 2 };

/* The next `times` calls of `call` on a path containing path_part fail with err, doing nothing. */
void tm_fs_arm(enum tm_fs_call call, const char* path_part, int err, long times);

/* Calls of `call` failed since the last tm_fs_clear. */
long tm_fs_failed(enum tm_fs_call call);

/* Disarms every fault and resets the counts. */
void tm_fs_clear(void);

#ifdef __cplusplus
}
#endif

#endif
