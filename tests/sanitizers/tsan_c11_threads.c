/* C11 threads (<threads.h>) on top of POSIX threads, for the ThreadSanitizer build only
 * (CMakeLists.txt links it into every executable when WALRELAY_SANITIZE=thread).
 *
 * Debian 12's librdkafka creates its threads and locks its mutexes through glibc's C11
 * functions (thrd_create, mtx_lock, cnd_wait, ...). glibc implements them by calling its
 * internal pthread functions directly, past the pthread symbols ThreadSanitizer intercepts, and
 * clang 14's TSan runtime intercepts no C11 function. So TSan never learns of librdkafka's
 * threads (the first intercepted call on one, e.g. its calloc, fails TSan's internal check
 * "thr->slot != 0" and crashes the process) nor of its locking (every hand-over through its
 * queues would look like a race). Defined in the executable, these definitions take the place
 * of glibc's for librdkafka, and forward to the pthread functions that TSan does intercept.
 * Same semantics as glibc's own implementation (glibc's C11 types are its pthread types). */
#define _XOPEN_SOURCE 700 /* PTHREAD_MUTEX_RECURSIVE, pthread_mutex_timedlock */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

static int c11_result(int err) {
  switch (err) {
    case 0: return thrd_success;
    case ENOMEM: return thrd_nomem;
    case ETIMEDOUT: return thrd_timedout;
    case EBUSY: return thrd_busy;
    default: return thrd_error;
  }
}

struct c11_start {
  thrd_start_t func;
  void* arg;
};

static void* c11_trampoline(void* p) {
  struct c11_start start = *(struct c11_start*)p;
  free(p);
  /* As glibc's start_thread does for a C11 thread: the int result travels as a pointer. */
  return (void*)(intptr_t)start.func(start.arg);
}

int thrd_create(thrd_t* thr, thrd_start_t func, void* arg) {
  struct c11_start* start = malloc(sizeof *start);
  if (start == NULL) return thrd_nomem;
  start->func = func;
  start->arg = arg;
  int err = pthread_create(thr, NULL, c11_trampoline, start);
  if (err != 0) free(start);
  return err == EAGAIN ? thrd_nomem : c11_result(err);
}

int thrd_join(thrd_t thr, int* res) {
  void* result;
  int err = pthread_join(thr, &result);
  if (err == 0 && res != NULL) *res = (int)(intptr_t)result;
  return c11_result(err);
}

int mtx_init(mtx_t* m, int type) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  if (type & mtx_recursive) pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  int err = pthread_mutex_init((pthread_mutex_t*)m, &attr);
  pthread_mutexattr_destroy(&attr);
  return c11_result(err);
}

int mtx_lock(mtx_t* m) { return c11_result(pthread_mutex_lock((pthread_mutex_t*)m)); }

int mtx_trylock(mtx_t* m) { return c11_result(pthread_mutex_trylock((pthread_mutex_t*)m)); }

int mtx_timedlock(mtx_t* restrict m, const struct timespec* restrict until) {
  return c11_result(pthread_mutex_timedlock((pthread_mutex_t*)m, until));
}

int mtx_unlock(mtx_t* m) { return c11_result(pthread_mutex_unlock((pthread_mutex_t*)m)); }

void mtx_destroy(mtx_t* m) { pthread_mutex_destroy((pthread_mutex_t*)m); }

int cnd_init(cnd_t* c) { return c11_result(pthread_cond_init((pthread_cond_t*)c, NULL)); }

int cnd_signal(cnd_t* c) { return c11_result(pthread_cond_signal((pthread_cond_t*)c)); }

int cnd_broadcast(cnd_t* c) { return c11_result(pthread_cond_broadcast((pthread_cond_t*)c)); }

int cnd_wait(cnd_t* c, mtx_t* m) {
  return c11_result(pthread_cond_wait((pthread_cond_t*)c, (pthread_mutex_t*)m));
}

int cnd_timedwait(cnd_t* restrict c, mtx_t* restrict m, const struct timespec* restrict until) {
  /* TIME_UTC deadlines, as pthread_cond_timedwait's default CLOCK_REALTIME. */
  return c11_result(pthread_cond_timedwait((pthread_cond_t*)c, (pthread_mutex_t*)m, until));
}

void cnd_destroy(cnd_t* c) { pthread_cond_destroy((pthread_cond_t*)c); }

void call_once(once_flag* flag, void (*func)(void)) {
  pthread_once((pthread_once_t*)flag, func); /* glibc: a struct holding one int */
}
