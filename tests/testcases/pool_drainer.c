// Drains one kernel resource that the host and other sandboxes share, and holds what it got.
//
//   pool_drainer hold RESOURCE MARKER HOLD SECONDS [LIMIT]
//       creates the file HOLD, takes units of RESOURCE until the kernel refuses one (or LIMIT
//       units), writes "RESOURCE COUNT ERRNO-NAME" to MARKER, holds everything until HOLD is
//       removed or SECONDS pass, prints the same line and exits 0 (a removal needs no space,
//       so even a drainer that filled the disk can be told to stop)
//   pool_drainer one RESOURCE
//       takes a single unit; prints "ok" and exits 0, or "refused ERRNO-NAME" and exits 1
//
// RESOURCE: inotify, aio, pty, mapped-file, pipe-pages, epoll-watch, mlock, userns, disk,
// inodes, thread, mqueue, keyring. Every attempt is a raw system call where libc would hide the
// kernel's answer.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <linux/keyctl.h>
#include <mqueue.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const char* error_name(int error) {
  switch (error) {
    case 0: return "none";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EACCES: return "EACCES";
    case EINVAL: return "EINVAL";
    case ENFILE: return "ENFILE";
    case EMFILE: return "EMFILE";
    case ENOSPC: return "ENOSPC";
    case ENOSYS: return "ENOSYS";
    case EDQUOT: return "EDQUOT";
    case EUSERS: return "EUSERS";
    default: return "other";
  }
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void* idle(void* unused) {
  (void)unused;
  for (;;) pause();
  return NULL;
}

static int one_only = 0;  // `one`: take a single unit and leave nothing durable behind

// Takes one unit of `resource`; 0 on success, else an errno. `index` numbers the units.
static int take(const char* resource, long index) {
  if (strcmp(resource, "inotify") == 0) {
    return syscall(SYS_inotify_init1, IN_CLOEXEC) >= 0 ? 0 : errno;
  }
  if (strcmp(resource, "aio") == 0) {
    aio_context_t context = 0;
    return syscall(SYS_io_setup, 1024, &context) == 0 ? 0 : errno;
  }
  if (strcmp(resource, "pty") == 0) {
    return open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC) >= 0 ? 0 : errno;
  }
  if (strcmp(resource, "mapped-file") == 0) {
    // Open, map, close: the mapping keeps the file open without a descriptor.
    const int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    void* mapped = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    const int error = mapped == MAP_FAILED ? errno : 0;
    close(fd);
    return error;
  }
  if (strcmp(resource, "pipe-pages") == 0) {
    int ends[2];
    if (pipe2(ends, O_CLOEXEC) != 0) return errno;
    if (fcntl(ends[1], F_SETPIPE_SZ, 1 << 20) < 0) {
      const int error = errno;
      close(ends[0]);
      close(ends[1]);
      return error;
    }
    return 0;
  }
  if (strcmp(resource, "epoll-watch") == 0) {
    // Each unit is one watch: epoll instances, each watching the same set of descriptors.
    enum { kTargets = 2000 };
    static int targets[kTargets];
    static int made = 0;
    static int instance = -1;
    static int next = kTargets;
    while (made < kTargets) {
      targets[made] = eventfd(0, EFD_CLOEXEC);
      if (targets[made] < 0) return errno;
      ++made;
    }
    if (next == kTargets) {
      instance = epoll_create1(EPOLL_CLOEXEC);
      if (instance < 0) return errno;
      next = 0;
    }
    struct epoll_event event = {.events = EPOLLIN};
    return epoll_ctl(instance, EPOLL_CTL_ADD, targets[next++], &event) == 0 ? 0 : errno;
  }
  if (strcmp(resource, "mlock") == 0) {
    void* page = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return errno;
    return mlock(page, 1 << 20) == 0 ? 0 : errno;
  }
  if (strcmp(resource, "userns") == 0) {
    return unshare(CLONE_NEWUSER) == 0 ? 0 : errno;
  }
  if (strcmp(resource, "disk") == 0) {
    static int fd = -1;
    if (fd < 0) fd = open("/tmp/pool-drainer.fill", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    static char block[1 << 20];
    memset(block, 'x', sizeof block);
    const ssize_t written = write(fd, block, sizeof block);
    return written == (ssize_t)sizeof block ? 0 : (written < 0 ? errno : ENOSPC);
  }
  if (strcmp(resource, "inodes") == 0) {
    if (index == 0) mkdir("/tmp/pool-drainer.inodes", 0700);
    char path[96];
    snprintf(path, sizeof path, "/tmp/pool-drainer.inodes/%ld", index);
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    close(fd);
    return 0;
  }
  if (strcmp(resource, "thread") == 0) {
    pthread_t thread;
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setstacksize(&attributes, 64 * 1024);
    const int error = pthread_create(&thread, &attributes, idle, NULL);
    pthread_attr_destroy(&attributes);
    return error;
  }
  if (strcmp(resource, "mqueue") == 0) {
    char name[64];
    snprintf(name, sizeof name, "/pool-drainer-%d-%ld", getpid(), index);
    struct mq_attr attributes = {.mq_maxmsg = 10, .mq_msgsize = 8192};
    const int queue = syscall(SYS_mq_open, name + 1, O_RDWR | O_CREAT | O_CLOEXEC, 0600, &attributes);
    if (queue < 0) return errno;
    if (one_only) syscall(SYS_mq_unlink, name + 1);  // a host's check leaves nothing behind
    return 0;
  }
  if (strcmp(resource, "keyring") == 0) {
    char description[64];
    snprintf(description, sizeof description, "pool-drainer-%ld", index);
    return syscall(SYS_add_key, "user", description, "x", 1, KEY_SPEC_PROCESS_KEYRING) >= 0
               ? 0
               : errno;
  }
  return EINVAL;
}

// Files held by mappings, in as many processes as the sandbox allows: one process stops at
// vm.max_map_count mappings, so children carry on, each reporting what it holds through a pipe
// and then holding it until the drainer exits. Ends when a child could add none (the kernel's
// real bound), a fork fails, `limit` is reached or time is up.
static long drain_mapped_files(long limit, double until, int* error) {
  long total = 0;
  *error = 0;
  while (total < limit && now() < until) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) {
      *error = errno;
      break;
    }
    const pid_t child = fork();
    if (child < 0) {
      *error = errno;
      close(report[0]);
      close(report[1]);
      break;
    }
    if (child == 0) {
      close(report[0]);
      long held = 0;
      int why = 0;
      while (total + held < limit && (why = take("mapped-file", held)) == 0) ++held;
      long message[2] = {held, why};
      if (write(report[1], message, sizeof message) < 0) _exit(1);
      close(report[1]);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      for (;;) pause();
    }
    close(report[1]);
    long message[2] = {0, 0};
    const ssize_t got = read(report[0], message, sizeof message);
    close(report[0]);
    if (got != (ssize_t)sizeof message) {
      *error = ENOMEM;  // the child died on the way (the memory cgroup's OOM killer)
      break;
    }
    total += message[0];
    *error = (int)message[1];
    // A child that stopped at the per-process mapping count is no bound on the sandbox.
    if (message[0] == 0 || *error != ENOMEM || message[0] < 65000) break;
  }
  return total;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "one") == 0) {
    one_only = 1;
    const int error = take(argv[2], 0);
    if (error == 0) {
      printf("ok\n");
      return 0;
    }
    printf("refused %s\n", error_name(error));
    return 1;
  }
  if ((argc != 6 && argc != 7) || strcmp(argv[1], "hold") != 0) {
    fprintf(stderr, "usage: pool_drainer hold RESOURCE MARKER HOLD SECONDS [LIMIT] | one RESOURCE\n");
    return 2;
  }
  const char* resource = argv[2];
  const double until = now() + atof(argv[5]);
  const long limit = argc == 7 ? atol(argv[6]) : 100000000L;
  // The marker's bytes are reserved before draining: filling the disk must not keep us from
  // saying so. It is made under a temporary name and renamed into place once written.
  char pending[4096];
  snprintf(pending, sizeof pending, "%s.pending", argv[3]);
  const int marker = open(pending, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  char line[128];
  memset(line, ' ', sizeof line);
  if (marker < 0 || write(marker, line, sizeof line) != (ssize_t)sizeof line) return 3;
  const int hold = open(argv[4], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (hold < 0) return 3;
  close(hold);
  long count = 0;
  int error = 0;
  if (strcmp(resource, "mapped-file") == 0) {
    count = drain_mapped_files(limit, until, &error);
  } else {
    while (count < limit && now() < until) {
      error = take(resource, count);
      if (error != 0) break;
      ++count;
    }
  }
  snprintf(line, sizeof line, "%s %ld %s\n", resource, count,
           count >= limit ? "LIMIT" : error_name(error));
  if (pwrite(marker, line, sizeof line, 0) != (ssize_t)sizeof line) return 3;
  close(marker);
  if (rename(pending, argv[3]) != 0) return 3;
  while (now() < until && access(argv[4], F_OK) == 0) usleep(10000);
  fputs(line, stdout);
  return 0;
}
