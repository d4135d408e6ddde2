/* See fault_fs.h. */
#define _GNU_SOURCE
// The shim defines open() and open64() both; with 64-bit file offsets on a 32-bit target (armhf)
// glibc would rename open to open64 and the two would clash.
#undef _FILE_OFFSET_BITS
#include "fault_fs.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

enum { call_count = 3, path_bytes_max = 4096 };

static char watched[call_count][path_bytes_max];
static atomic_int armed_err[call_count];
static atomic_long armed_left[call_count];
static atomic_long failed[call_count];

static int (*next_open)(const char*, int, ...);
static int (*next_fsync)(int);
static int (*next_unlink)(const char*);

static void find_real(const char* name, void* fn_out, size_t fn_bytes) {
    void* fn = dlsym(RTLD_NEXT, name);
    if (fn == NULL) {
        fprintf(stderr, "fault_fs: no next definition of %s\n", name);
        _exit(99);
    }
    memcpy(fn_out, &fn, fn_bytes);
}

__attribute__((constructor)) static void find_real_calls(void) {
    find_real("open", &next_open, sizeof(next_open));
    find_real("fsync", &next_fsync, sizeof(next_fsync));
    find_real("unlink", &next_unlink, sizeof(next_unlink));
}

/* The error to fail this call with, or 0. Consumes one armed failure. */
static int take_fault(enum tm_fs_call call, const char* path) {
    if (atomic_load(&armed_left[call]) <= 0) return 0;
    if (path == NULL || strstr(path, watched[call]) == NULL) return 0;
    if (atomic_fetch_sub(&armed_left[call], 1) <= 0) return 0;
    atomic_fetch_add(&failed[call], 1);
    return atomic_load(&armed_err[call]);
}

void tm_fs_arm(enum tm_fs_call call, const char* path_part, int err, long times) {
    atomic_store(&armed_left[call], 0);
    snprintf(watched[call], sizeof(watched[call]), "%s", path_part);
    atomic_store(&armed_err[call], err);
    atomic_store(&armed_left[call], times);
}

long tm_fs_failed(enum tm_fs_call call) {
    return atomic_load(&failed[call]);
}

void tm_fs_clear(void) {
    for (int i = 0; i < call_count; ++i) {
        atomic_store(&armed_left[i], 0);
        atomic_store(&failed[i], 0);
    }
}

static int open_with(const char* path, int flags, va_list args) {
    mode_t mode = 0;
    if ((flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE) mode = va_arg(args, mode_t);
    int err = take_fault(TM_FS_OPEN, path);
    if (err != 0) {
        errno = err;
        return -1;
    }
    return next_open(path, flags, mode);
}

int open(const char* path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    int fd = open_with(path, flags, args);
    va_end(args);
    return fd;
}

int open64(const char* path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    int fd = open_with(path, flags, args);
    va_end(args);
    return fd;
}

int fsync(int fd) {
    if (atomic_load(&armed_left[TM_FS_FSYNC]) > 0) {
        char link[64];
        char path[path_bytes_max];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, path, sizeof(path) - 1);
        if (n > 0) {
            path[n] = '\0';
            int err = take_fault(TM_FS_FSYNC, path);
            if (err != 0) {
                errno = err;
                return -1;
            }
        }
    }
    return next_fsync(fd);
}

int unlink(const char* path) {
    int err = take_fault(TM_FS_UNLINK, path);
    if (err != 0) {
        errno = err;
        return -1;
    }
    return next_unlink(path);
}
