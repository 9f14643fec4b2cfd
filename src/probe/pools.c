/* Pools the guest tries to exhaust and HOLDS while the host and a second sandbox try to
 * allocate one: each attempt count- and time-boxed, the guest's reach reported.
 *
 *   pool resource=R marker=PATH release=PATH cap=N box-ms=MS hold-ms=MS [dir= dirs= size= nr=]
 *     fills R with workers (more processes when a per-process bound such as RLIMIT_NOFILE or
 *     vm.max_map_count stops one, as an attacker would), then writes "held N" to `marker`,
 *     holds until `release` exists or hold-ms passed, frees everything and reports:
 *       info reached N / info unit U / info stopped REASON / info workers W
 *     REASON: refused:ERRNO (the pool or a policy said no), cap (the count box), box (the time
 *     box), killed:SIGNAL (a worker was killed, e.g. by the memory limit), fork:ERRNO (no more
 *     workers: the tasks limit), workers (the worker box).
 *   pool-check resource=R [dir=]   allocates one unit: ok alloc … or bad alloc ERRNO. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/aio_abi.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe.h"

#define MAX_WORKERS 1024

enum { W_RUNNING = 0, W_NEED_MORE, W_REFUSED, W_CAP, W_PREMISE };

struct shared {
  long count[MAX_WORKERS];
  int state[MAX_WORKERS];
  int error[MAX_WORKERS];
  long budget;
  int stop;
};

static struct shared *g_shared;
static char g_dir[PATH_MAX];      /* where scratch files live */
static char g_mapped[PATH_MAX];   /* the file the files pool maps */
static long g_nofile_soft = 1024; /* per-process descriptor bound, after raising */
static long g_map_limit = 65530;  /* vm.max_map_count */
static long g_pipe_size = 1 << 20;
static long g_aio_nr = 4096;
static long g_mlock_chunk = 1 << 20;
static long g_mlock_soft = -1; /* -1: unlimited */

/* Per-worker state. */
static int g_slot;
static long g_held_fds;
static long g_held_maps;
static long g_locked;
static long g_made;
static int g_inotify = -1;
static sem_t g_release_threads;

static long worker_fd_room(void) { return g_nofile_soft - 32 - g_held_fds; }

/* Each returns 0 with *units set, an errno when refused, or -1 when a per-process bound was
 * met (another worker should carry on). */
typedef int (*one_fn)(long *units);

static int one_inotify_instance(long *units) {
  if (worker_fd_room() <= 0) return -1;
  const int fd = inotify_init1(IN_CLOEXEC);
  if (fd < 0) return errno;
  ++g_held_fds;
  *units = 1;
  return 0;
}

static int one_inotify_watch(long *units) {
  if (g_inotify < 0) {
    g_inotify = inotify_init1(IN_CLOEXEC);
    if (g_inotify < 0) return errno;
  }
  char path[PATH_MAX + 64];
  if (g_made == 0) {
    snprintf(path, sizeof path, "%s/w%d", g_dir, g_slot);
    if (mkdir(path, 0700) != 0 && errno != EEXIST) return errno;
  }
  snprintf(path, sizeof path, "%s/w%d/%ld", g_dir, g_slot, g_made);
  const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  close(fd);
  ++g_made;
  if (inotify_add_watch(g_inotify, path, IN_MODIFY) < 0) return errno;
  *units = 1;
  return 0;
}

static int one_aio(long *units) {
  aio_context_t context = 0;
  if (syscall(SYS_io_setup, g_aio_nr, &context) != 0) return errno;
  *units = 1;
  return 0;
}

static int one_pty(long *units) {
  if (worker_fd_room() <= 0) return -1;
  const int fd = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return errno;
  ++g_held_fds;
  *units = 1;
  return 0;
}

static int one_file(long *units) {
  if (g_held_maps >= g_map_limit - 128) return -1;
  const int fd = open(g_mapped, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  void *mapping = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
  const int saved = errno;
  close(fd);
  if (mapping == MAP_FAILED) return saved == ENOMEM ? -1 : saved;
  ++g_held_maps;
  *units = 1;
  return 0;
}

/* Pipes grown to the largest size until the user's budget refuses, then default pipes until a
 * fresh one comes out reduced: what is left of the budget is taken too. Units: pages. */
static int g_pipes_reduced_mode;
static int one_pipe(long *units) {
  if (worker_fd_room() <= 1) return -1;
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) != 0) return errno;
  g_held_fds += 2;
  const int initial = fcntl(ends[0], F_GETPIPE_SZ);
  if (initial < 65536) {
    *units = initial / 4096;
    return EPERM; /* a fresh pipe came out reduced: the budget is gone (this one is held) */
  }
  if (!g_pipes_reduced_mode && fcntl(ends[0], F_SETPIPE_SZ, (int)g_pipe_size) < 0) {
    if (errno != EPERM) return errno;
    g_pipes_reduced_mode = 1; /* keep this one at its default and go on with default pipes */
  }
  *units = fcntl(ends[0], F_GETPIPE_SZ) / 4096;
  return 0;
}

static int one_mlock(long *units) {
  if (g_mlock_soft >= 0 && g_locked + g_mlock_chunk > g_mlock_soft) return -1;
  void *memory = mmap(NULL, (size_t)g_mlock_chunk, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return errno;
  if (mlock(memory, (size_t)g_mlock_chunk) != 0) {
    const int saved = errno;
    munmap(memory, (size_t)g_mlock_chunk);
    return saved;
  }
  /* Touched, so that a kernel that only accounts a lock (gVisor's) commits the memory too. */
  for (long offset = 0; offset < g_mlock_chunk; offset += 4096) ((volatile char *)memory)[offset] = 1;
  g_locked += g_mlock_chunk;
  *units = g_mlock_chunk / 1024;
  return 0;
}

/* A child nests user namespaces as deep as the kernel lets it (32 levels), the worker holds the
 * deepest through a descriptor — which keeps every ancestor alive — and the child goes. */
static int one_userns(long *units) {
  if (worker_fd_room() <= 2) return -1;
  int channel[2];
  if (pipe2(channel, O_CLOEXEC) != 0) return errno;
  const pid_t child = fork();
  if (child < 0) {
    const int saved = errno;
    close(channel[0]);
    close(channel[1]);
    return saved;
  }
  if (child == 0) {
    close(channel[0]);
    int made = 0;
    int error = 0;
    while (made < 32) {
      if (unshare(CLONE_NEWUSER) != 0) {
        error = errno;
        break;
      }
      ++made;
    }
    const int reply[2] = {made, error};
    if (write(channel[1], reply, sizeof reply) < 0) _exit(1);
    for (;;) pause();
  }
  close(channel[1]);
  int reply[2] = {0, EIO};
  if (read(channel[0], reply, sizeof reply) != sizeof reply) reply[1] = EIO;
  close(channel[0]);
  /* Refused only when not even one was made: a bound on nesting (EUSERS, or EPERM inside a
   * child namespace) is not the pool — another child starts again at the top. */
  int error = reply[0] > 0 ? 0 : reply[1];
  if (reply[0] > 0) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/user", (int)child);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      error = errno;
      reply[0] = 0;
    } else {
      ++g_held_fds;
    }
  }
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  *units = reply[0];
  return error;
}

static void *held_thread(void *unused) {
  (void)unused;
  while (sem_wait(&g_release_threads) != 0 && errno == EINTR) {
  }
  return NULL;
}

static int one_task(long *units) {
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, 64 * 1024);
  pthread_t thread;
  const int error = pthread_create(&thread, &attributes, held_thread, NULL);
  pthread_attr_destroy(&attributes);
  if (error) return error;
  pthread_detach(thread);
  *units = 1;
  return 0;
}

struct resource {
  const char *name;
  const char *unit;
  int parallel;
  one_fn one;
  /* After a refusal, keep taking what others free while holding: a unit another process lets
   * go of during the hold must not become the host's or a neighbour's (a shared pool). */
  int greedy;
};

static const struct resource kResources[] = {
    {"inotify-instances", "instances", 1, one_inotify_instance, 1},
    {"inotify-watches", "watches", 2, one_inotify_watch, 1},
    {"aio", "contexts", 1, one_aio, 1},
    {"ptys", "ptys", 1, one_pty, 1},
    {"files", "open files", 2, one_file, 1},
    {"pipes", "pipe pages", 1, one_pipe, 0},
    {"mlock", "KiB locked", 2, one_mlock, 0},
    {"userns", "user namespaces", 2, one_userns, 0},
    {"tasks", "tasks", 1, one_task, 0},
};

static const struct resource *find_resource(const char *name) {
  for (size_t i = 0; i < sizeof kResources / sizeof kResources[0]; ++i) {
    if (name && strcmp(kResources[i].name, name) == 0) return &kResources[i];
  }
  return NULL;
}

static long read_number_file(const char *path, long fallback) {
  char text[64];
  if (read_small_file(path, text, sizeof text) <= 0) return fallback;
  return atol(text);
}

static void prepare_limits(void) {
  raise_soft_limit(RLIMIT_NOFILE);
  raise_soft_limit(RLIMIT_MEMLOCK);
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    g_nofile_soft = limit.rlim_cur == RLIM_INFINITY ? 1 << 20 : (long)limit.rlim_cur;
  }
  if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0) {
    g_mlock_soft = limit.rlim_cur == RLIM_INFINITY ? -1 : (long)limit.rlim_cur;
  }
  const long page = sysconf(_SC_PAGESIZE);
  if (g_mlock_soft >= 0 && g_mlock_soft < g_mlock_chunk) {
    g_mlock_chunk = g_mlock_soft / page * page;
    if (g_mlock_chunk == 0) g_mlock_chunk = page; /* mlock will say no: that is the answer */
  }
  g_map_limit = read_number_file("/proc/sys/vm/max_map_count", 65530);
}

/* The first writable directory of `dirs` (comma-separated), made private to this probe. */
static int choose_scratch(const char *dirs, const char *tag) {
  char buffer[8192];
  snprintf(buffer, sizeof buffer, "%s", dirs);
  char *items[16];
  const int count = split_list(buffer, items, 16);
  for (int i = 0; i < count; ++i) {
    snprintf(g_dir, sizeof g_dir, "%s/.airlock-probe-%s-%d", items[i], tag, (int)getpid());
    if (mkdir(g_dir, 0700) == 0) return 0;
  }
  return -1;
}

static void worker_main(const struct resource *resource, int slot, pid_t parent,
                        long long failsafe_ms) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(0);
  alarm((unsigned)(failsafe_ms / 1000 + 1));
  g_slot = slot;
  g_held_fds = 16;
  while (!__atomic_load_n(&g_shared->stop, __ATOMIC_SEQ_CST)) {
    if (__atomic_load_n(&g_shared->budget, __ATOMIC_SEQ_CST) <= 0) {
      g_shared->state[slot] = W_CAP;
      break;
    }
    long units = 0;
    const int result = resource->one(&units);
    if (result == 0) {
      __atomic_add_fetch(&g_shared->count[slot], units, __ATOMIC_SEQ_CST);
      __atomic_sub_fetch(&g_shared->budget, units, __ATOMIC_SEQ_CST);
      continue;
    }
    if (units > 0) __atomic_add_fetch(&g_shared->count[slot], units, __ATOMIC_SEQ_CST);
    g_shared->error[slot] = result > 0 ? result : 0;
    g_shared->state[slot] = result < 0 ? W_NEED_MORE : W_REFUSED;
    break;
  }
  if (resource->greedy && g_shared->state[slot] == W_REFUSED) {
    for (;;) {
      sleep_ms(2);
      long units = 0;
      if (worker_fd_room() > 2 && resource->one(&units) == 0 && units > 0) {
        __atomic_add_fetch(&g_shared->count[slot], units, __ATOMIC_SEQ_CST);
      }
    }
  }
  if (resource->one == one_task && g_shared->state[slot] == W_REFUSED) {
    /* Leave a few tasks free: every exec into this sandbox (and, on some backends, every file
     * operation) needs one, and the host must still be able to poll and release the hold. */
    for (int i = 0; i < 8; ++i) sem_post(&g_release_threads);
  }
  for (;;) pause();
}

static int g_holding_workers;
static pid_t g_workers[MAX_WORKERS];

static void kill_workers(void) {
  for (int i = 0; i < g_holding_workers; ++i) {
    if (g_workers[i] > 0) kill(g_workers[i], SIGKILL);
  }
  for (int i = 0; i < g_holding_workers; ++i) {
    if (g_workers[i] > 0) waitpid(g_workers[i], NULL, 0);
  }
}

/* The marker is opened (and its room written) before the pool is filled: once the host's file
 * table or the disk is exhausted, a new file could not be made to say so. */
struct marker {
  int fd;
  char path[PATH_MAX];
  char temporary[PATH_MAX + 16];
};

static int marker_prepare(struct marker *marker, const char *path) {
  marker->fd = -1;
  if (!path) return 0;
  snprintf(marker->path, sizeof marker->path, "%s", path);
  snprintf(marker->temporary, sizeof marker->temporary, "%s.tmp", path);
  marker->fd = open(marker->temporary, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (marker->fd < 0) return -1;
  char room[4096];
  memset(room, ' ', sizeof room);
  if (write(marker->fd, room, sizeof room) != (ssize_t)sizeof room) return -1;
  return 0;
}

static int marker_publish(struct marker *marker, const char *text) {
  if (marker->fd < 0) return 0;
  const size_t length = strlen(text) < 4096 ? strlen(text) : 4096;
  if (pwrite(marker->fd, text, length, 0) != (ssize_t)length || ftruncate(marker->fd, (off_t)length) != 0) {
    return -1;
  }
  close(marker->fd);
  marker->fd = -1;
  return rename(marker->temporary, marker->path);
}

static void hold(struct marker *marker, const char *release, long long hold_ms, const char *summary) {
  if (marker_publish(marker, summary) != 0) {
    say_errno("error", "marker", errno, "could not publish the hold marker");
    return;
  }
  const long long until = now_ms() + hold_ms;
  while (now_ms() < until) {
    if (release && file_exists(release)) {
      say("info", "released", "by the host");
      return;
    }
    sleep_ms(20);
  }
  say("info", "released", "the hold timed out");
}

static int probe_disk(void);

int probe_pool(void) {
  const char *name = arg("resource");
  if (name && strcmp(name, "disk") == 0) return probe_disk();
  const struct resource *resource = find_resource(name);
  if (!resource) {
    say("error", "arguments", "unknown resource=%s", name ? name : "");
    return 2;
  }
  const long long box_ms = arg_number("box-ms", 20000);
  const long long hold_ms = arg_number("hold-ms", 30000);
  const long cap = (long)arg_number("cap", 100000);
  int max_workers = (int)arg_number("max-workers", 96);
  if (max_workers > MAX_WORKERS) max_workers = MAX_WORKERS;
  struct marker marker;
  if (marker_prepare(&marker, arg("marker")) != 0) {
    say_errno("error", "marker", errno, "could not prepare the hold marker");
    return 2;
  }
  const char *release = arg("release");
  g_pipe_size = (long)arg_number("size", 1 << 20);
  g_aio_nr = (long)arg_number("nr", 4096);
  alarm((unsigned)((box_ms + hold_ms) / 1000 + 30));
  prepare_limits();
  sem_init(&g_release_threads, 0, 0);

  if (resource->one == one_inotify_watch || resource->one == one_file) {
    if (choose_scratch(arg_or("dirs", arg_or("dir", "/tmp")), resource->name) != 0) {
      say_errno("error", "scratch", errno, "no writable scratch directory");
      return 2;
    }
    if (resource->one == one_file) {
      snprintf(g_mapped, sizeof g_mapped, "%s/mapped", g_dir);
      char page[4096];
      memset(page, 'a', sizeof page);
      const int fd = open(g_mapped, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0 || write(fd, page, sizeof page) != (ssize_t)sizeof page) {
        say_errno("error", "scratch", errno, "could not write the file to map");
        return 2;
      }
      close(fd);
    }
  }

  g_shared = mmap(NULL, sizeof *g_shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_shared == MAP_FAILED) {
    say_errno("error", "shared", errno, "mmap");
    return 2;
  }
  memset(g_shared, 0, sizeof *g_shared);
  g_shared->budget = cap;

  const pid_t self = getpid();
  const long long started = now_ms();
  const long long deadline = started + box_ms;
  int accounted[MAX_WORKERS] = {0};
  int active = 0;
  char reason[128] = "";
  for (;;) {
    for (int i = 0; i < g_holding_workers; ++i) {
      const int state = __atomic_load_n(&g_shared->state[i], __ATOMIC_SEQ_CST);
      if (state == W_RUNNING || accounted[i]) continue;
      accounted[i] = 1;
      --active;
      if (state == W_REFUSED && !reason[0]) {
        snprintf(reason, sizeof reason, "refused:%s", errno_name(g_shared->error[i]));
      }
      if (state == W_CAP && !reason[0]) snprintf(reason, sizeof reason, "cap");
    }
    int status = 0;
    const pid_t dead = waitpid(-1, &status, WNOHANG);
    if (dead > 0) {
      for (int i = 0; i < g_holding_workers; ++i) {
        if (g_workers[i] != dead) continue;
        g_workers[i] = 0;
        if (!accounted[i]) {
          accounted[i] = 1;
          --active;
        }
        if (!reason[0]) {
          snprintf(reason, sizeof reason, "killed:%d",
                   WIFSIGNALED(status) ? WTERMSIG(status) : -WEXITSTATUS(status));
        }
      }
    }
    if (reason[0]) break;
    if (now_ms() > deadline) {
      snprintf(reason, sizeof reason, "box");
      break;
    }
    if (active < resource->parallel && g_shared->budget > 0) {
      if (g_holding_workers >= max_workers) {
        if (active == 0) {
          snprintf(reason, sizeof reason, "workers");
          break;
        }
      } else {
        const int slot = g_holding_workers;
        const pid_t worker = fork();
        if (worker == 0) worker_main(resource, slot, self, box_ms + hold_ms + 20000);
        if (worker < 0) {
          if (active == 0) {
            snprintf(reason, sizeof reason, "fork:%s", errno_name(errno));
            break;
          }
        } else {
          g_workers[g_holding_workers++] = worker;
          ++active;
          continue;
        }
      }
    }
    if (g_shared->budget <= 0 && active == 0) {
      snprintf(reason, sizeof reason, "cap");
      break;
    }
    sleep_ms(2);
  }
  /* Stop the others where they are; they keep what they hold. */
  __atomic_store_n(&g_shared->stop, 1, __ATOMIC_SEQ_CST);
  const long long settle = now_ms() + 2000;
  while (now_ms() < settle) {
    int running = 0;
    for (int i = 0; i < g_holding_workers; ++i) {
      if (g_workers[i] > 0 && g_shared->state[i] == W_RUNNING) ++running;
    }
    if (!running) break;
    sleep_ms(5);
  }
  long total = 0;
  for (int i = 0; i < g_holding_workers; ++i) total += g_shared->count[i];
  if (strncmp(reason, "fork:", 5) == 0) {
    /* The tasks limit stopped the workers: free a few (the last ones), or nothing could run in
     * this sandbox any more to poll and release the hold. The reach is what was held. */
    for (int i = g_holding_workers - 1, freed = 0; i >= 0 && freed < 4; --i) {
      if (g_workers[i] <= 0) continue;
      kill(g_workers[i], SIGKILL);
      waitpid(g_workers[i], NULL, 0);
      g_workers[i] = 0;
      ++freed;
    }
  }
  const long long filled_ms = now_ms() - started;
  char summary[256];
  snprintf(summary, sizeof summary, "held %ld %s; stopped %s\n", total, resource->unit, reason);
  hold(&marker, release, hold_ms, summary);
  long held_at_the_end = 0;
  for (int i = 0; i < g_holding_workers; ++i) held_at_the_end += g_shared->count[i];
  kill_workers();
  say("info", "reached", "%ld", total);
  say("info", "held-at-release", "%ld", held_at_the_end);
  say("info", "unit", "%s", resource->unit);
  say("info", "stopped", "%s", reason);
  say("info", "workers", "%d", g_holding_workers);
  say("info", "fill-ms", "%lld", filled_ms);
  if (g_dir[0]) remove_tree(g_dir);
  return 0;
}

/* ---- disk and inodes ------------------------------------------------------------------------ */

/* Each target in turn: bytes in 1 MiB writes, then empty files, until refused or the cap; then
 * it publishes marker-I ("target I ...") and holds until release-I exists, keeping what every
 * earlier target holds too, so the host can tell which target's writes cost it what. */
static int probe_disk(void) {
  const long long bytes_cap = arg_number("cap", 256LL << 20);
  const long inode_cap = (long)arg_number("inodes", 20000);
  const long long box_ms = arg_number("box-ms", 20000);
  const long long hold_ms = arg_number("hold-ms", 30000);
  const char *marker_base = arg("marker");
  const char *release_base = arg_or("release", "");
  char list[8192];
  snprintf(list, sizeof list, "%s", arg_or("targets", "/tmp"));
  char *targets[8];
  const int count = split_list(list, targets, 8);
  alarm((unsigned)((box_ms + hold_ms * count) / 1000 + 30));
  struct marker markers[8];
  for (int i = 0; i < count; ++i) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s-%d", marker_base ? marker_base : "/tmp/.airlock-disk", i);
    if (marker_prepare(&markers[i], marker_base ? path : NULL) != 0) {
      say_errno("error", "marker", errno, "could not prepare a hold marker");
      return 2;
    }
  }
  char made[8][PATH_MAX];
  static char chunk[1 << 20];
  memset(chunk, 'x', sizeof chunk);
  const long long deadline = now_ms() + box_ms;
  for (int i = 0; i < count; ++i) {
    char summary[PATH_MAX + 256];
    snprintf(made[i], sizeof made[i], "%s/.airlock-probe-disk-%d", targets[i], (int)getpid());
    if (mkdir(made[i], 0700) != 0) {
      say("info", "target", "%s bytes=0 stopped=mkdir:%s inodes=0 inode-stopped=mkdir:%s",
          targets[i], errno_name(errno), errno_name(errno));
      made[i][0] = '\0';
      snprintf(summary, sizeof summary, "target %d %s skipped\n", i, targets[i]);
    } else {
      char path[PATH_MAX + 32];
      snprintf(path, sizeof path, "%s/fill", made[i]);
      long long written = 0;
      char stopped[64] = "cap";
      const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd < 0) {
        snprintf(stopped, sizeof stopped, "open:%s", errno_name(errno));
      } else {
        while (written < bytes_cap) {
          if (now_ms() > deadline) {
            snprintf(stopped, sizeof stopped, "box");
            break;
          }
          const ssize_t wrote = write(fd, chunk, sizeof chunk);
          if (wrote <= 0) {
            snprintf(stopped, sizeof stopped, "refused:%s", errno_name(wrote < 0 ? errno : ENOSPC));
            break;
          }
          written += wrote;
        }
        close(fd);
      }
      long inodes = 0;
      char inode_stopped[64] = "cap";
      while (inodes < inode_cap) {
        if (now_ms() > deadline) {
          snprintf(inode_stopped, sizeof inode_stopped, "box");
          break;
        }
        snprintf(path, sizeof path, "%s/i%ld", made[i], inodes);
        const int file = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (file < 0) {
          snprintf(inode_stopped, sizeof inode_stopped, "refused:%s", errno_name(errno));
          break;
        }
        close(file);
        ++inodes;
      }
      say("info", "target", "%s bytes=%lld stopped=%s inodes=%ld inode-stopped=%s", targets[i],
          written, stopped, inodes, inode_stopped);
      snprintf(summary, sizeof summary, "target %d %s %lld %ld\n", i, targets[i], written, inodes);
    }
    char release[PATH_MAX];
    snprintf(release, sizeof release, "%s-%d", release_base, i);
    hold(&markers[i], release_base[0] ? release : NULL, hold_ms, summary);
  }
  for (int i = 0; i < count; ++i) {
    if (made[i][0]) remove_tree(made[i]);
  }
  return 0;
}

/* ---- one allocation ------------------------------------------------------------------------- */

static void alloc_result(int error, const char *what) {
  if (error == 0) {
    say("ok", "alloc", "%s", what);
  } else {
    say("bad", "alloc", "%s: %s", what, errno_name(error));
  }
}

int probe_pool_check(void) {
  const char *name = arg_or("resource", "");
  const char *dir = arg_or("dir", "/tmp");
  if (strcmp(name, "inotify-instances") == 0) {
    const int fd = inotify_init1(IN_CLOEXEC);
    alloc_result(fd < 0 ? errno : 0, "inotify_init1");
  } else if (strcmp(name, "inotify-watches") == 0) {
    const int fd = inotify_init1(IN_CLOEXEC);
    if (fd < 0) {
      alloc_result(errno, "inotify_init1 (for a watch)");
    } else {
      alloc_result(inotify_add_watch(fd, dir, IN_MODIFY) < 0 ? errno : 0, "inotify_add_watch");
    }
  } else if (strcmp(name, "aio") == 0) {
    aio_context_t context = 0;
    const long result = syscall(SYS_io_setup, 1, &context);
    const int error = result == 0 ? 0 : errno;
    if (error == ENOSYS || error == EPERM) {
      say("ok", "alloc", "io_setup is refused here by policy (%s), not by a drained pool",
          errno_name(error));
    } else {
      alloc_result(error, "io_setup(1)");
    }
  } else if (strcmp(name, "ptys") == 0) {
    const int fd = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    alloc_result(fd < 0 ? errno : 0, "open /dev/ptmx");
  } else if (strcmp(name, "files") == 0) {
    const int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    alloc_result(fd < 0 ? errno : 0, "open /");
  } else if (strcmp(name, "pipes") == 0) {
    int ends[2];
    if (pipe2(ends, O_CLOEXEC) != 0) {
      alloc_result(errno, "pipe2");
    } else {
      const int size = fcntl(ends[0], F_GETPIPE_SZ);
      if (size < 65536) {
        say("bad", "alloc", "a fresh pipe holds %d bytes, not the default 65536: the user's pipe "
            "budget is drained", size);
      } else {
        say("ok", "alloc", "a fresh pipe holds %d bytes", size);
      }
    }
  } else if (strcmp(name, "mlock") == 0) {
    void *memory = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    alloc_result(memory == MAP_FAILED ? errno : mlock(memory, 4096) != 0 ? errno : 0,
                 "mlock of one page");
  } else if (strcmp(name, "userns") == 0) {
    const pid_t child = fork();
    if (child == 0) _exit(unshare(CLONE_NEWUSER) == 0 ? 0 : errno & 0x7f);
    int status = 0;
    if (child < 0) {
      alloc_result(errno, "fork for unshare(CLONE_NEWUSER)");
    } else {
      waitpid(child, &status, 0);
      const int error = WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
      if (error == EPERM || error == ENOSYS) {
        say("ok", "alloc", "user namespaces are refused here by policy (%s), not by a drained "
            "pool", errno_name(error));
      } else {
        alloc_result(error, "unshare(CLONE_NEWUSER)");
      }
    }
  } else if (strcmp(name, "tasks") == 0) {
    const pid_t child = fork();
    if (child == 0) _exit(0);
    if (child < 0) {
      alloc_result(errno, "fork");
    } else {
      waitpid(child, NULL, 0);
      alloc_result(0, "fork");
    }
  } else if (strcmp(name, "disk") == 0) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/.airlock-probe-disk-check-%d", dir, (int)getpid());
    static char chunk[1 << 20];
    memset(chunk, 'y', sizeof chunk);
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      alloc_result(errno, "create a file");
    } else {
      const ssize_t wrote = write(fd, chunk, sizeof chunk);
      const int error = wrote == (ssize_t)sizeof chunk ? 0 : wrote < 0 ? errno : ENOSPC;
      const int synced = fsync(fd) == 0 ? 0 : errno;
      close(fd);
      unlink(path);
      alloc_result(error ? error : synced, "write 1 MiB and fsync it");
    }
  } else {
    say("error", "arguments", "unknown resource=%s", name);
    return 2;
  }
  return 0;
}
