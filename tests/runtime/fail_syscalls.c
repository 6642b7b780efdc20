/* Fault injection for the tests of checked system calls (LD_PRELOAD): with
 * SLOWPIPE_FAIL_SETAFFINITY set, sched_setaffinity fails with EINVAL; with SLOWPIPE_FAIL_PRCTL set,
 * prctl(PR_SET_PDEATHSIG) fails with EINVAL. Everything else goes to the C library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/prctl.h>

int sched_setaffinity(pid_t pid, size_t size, const cpu_set_t* set) {
  if (getenv("SLOWPIPE_FAIL_SETAFFINITY")) {
    errno = EINVAL;
    return -1;
  }
  int (*real)(pid_t, size_t, const cpu_set_t*) =
      (int (*)(pid_t, size_t, const cpu_set_t*))dlsym(RTLD_NEXT, "sched_setaffinity");
  return real(pid, size, set);
}

int prctl(int option, ...) {
  va_list ap;
  va_start(ap, option);
  unsigned long a = va_arg(ap, unsigned long), b = va_arg(ap, unsigned long),
                c = va_arg(ap, unsigned long), d = va_arg(ap, unsigned long);
  va_end(ap);
  if (option == PR_SET_PDEATHSIG && getenv("SLOWPIPE_FAIL_PRCTL")) {
    errno = EINVAL;
    return -1;
  }
  int (*real)(int, ...) = (int (*)(int, ...))dlsym(RTLD_NEXT, "prctl");
  return real(option, a, b, c, d);
}
