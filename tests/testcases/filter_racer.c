// Races every new process of the sandbox between clone and execve, trying to open its memory for
// writing (/proc/PID/mem, O_RDWR) the whole time. An open that succeeds while the process still
// has no seccomp filter (Seccomp: 0) is a breach: through that descriptor a hostile guest can
// rewrite the command's code so that its filter is never loaded.
//
//   filter_racer MARKER STOP SECONDS
//
// Creates MARKER once it is racing (so the host knows when to start commands), races until the
// file STOP exists or SECONDS have passed, then prints "watched N attempts M breaches B" and exits
// 0 ("caught" counts the commands it saw alive before their filter: the window it raced). Every
// breach is also printed as "BREACH pid P" the moment it happens.
//
// Pids in a fresh pid namespace are handed out in order, so the racer spins on the next few pids
// before they exist, and is waiting at /proc/PID/mem when a command is cloned.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define kMaxPid (1 << 16)
#define kAhead 6

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

// Seccomp mode from /proc/PID/status; -1 when the process is gone.
static int seccomp_mode(int pid) {
  char path[64];
  char text[4096];
  snprintf(path, sizeof path, "/proc/%d/status", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t length = read(fd, text, sizeof text - 1);
  close(fd);
  if (length <= 0) return -1;
  text[length] = '\0';
  const char* line = strstr(text, "\nSeccomp:");
  return line != NULL ? atoi(line + 9) : -1;
}

static char existed[kMaxPid];
static char done[kMaxPid];

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: filter_racer MARKER STOP SECONDS\n");
    return 2;
  }
  const double until = now() + atof(argv[3]);
  const int self = getpid();
  int next = self + 1;
  int highest = self;  // the highest pid seen alive: every lower one was allocated before it
  long watched = 0, attempts = 0, breaches = 0, caught = 0;
  static char seen_unfiltered[kMaxPid];
  int marker = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (marker >= 0) close(marker);
  for (long round = 0;; ++round) {
    if ((round & 1023) == 0 && (now() >= until || access(argv[2], F_OK) == 0)) break;
    if ((round & 4095) == 0) {
      // Descheduled for long enough, the racer may have fallen behind its window: catch up.
      DIR* proc = opendir("/proc");
      struct dirent* entry;
      while (proc != NULL && (entry = readdir(proc)) != NULL) {
        const int pid = atoi(entry->d_name);
        if (pid > highest && pid < kMaxPid) highest = pid;
      }
      if (proc != NULL) closedir(proc);
    }
    for (int pid = next; pid < next + kAhead && pid < kMaxPid; ++pid) {
      if (done[pid]) continue;
      char path[64];
      snprintf(path, sizeof path, "/proc/%d/mem", pid);
      ++attempts;
      const int mem = open(path, O_RDWR | O_CLOEXEC);
      const int error = errno;
      if (mem >= 0 || (error != ENOENT && error != ESRCH)) {
        if (pid > highest) highest = pid;
      }
      if (mem >= 0) {
        if (!existed[pid]) ++watched;
        existed[pid] = 1;
        const int mode = seccomp_mode(pid);
        close(mem);
        if (mode == 0 && !seen_unfiltered[pid]) {
          seen_unfiltered[pid] = 1;
          ++caught;
        }
        if (mode == 0) {
          ++breaches;
          printf("BREACH pid %d\n", pid);
          fflush(stdout);
        }
        if (mode != 0) done[pid] = 1;  // filtered (a command after execve), or gone
        continue;
      }
      if (error == ENOENT || error == ESRCH) {
        // It came and went (seen, or a later pid exists): nothing left to race.
        if (existed[pid] || pid < highest) done[pid] = 1;
        continue;
      }
      // It exists and its memory is closed to us: watch it until it has its filter.
      if (!existed[pid]) ++watched;
      existed[pid] = 1;
      const int mode = seccomp_mode(pid);
      if (mode == 0 && !seen_unfiltered[pid]) {
        seen_unfiltered[pid] = 1;
        ++caught;
      }
      if (mode != 0) done[pid] = 1;
    }
    while (next < kMaxPid && done[next]) ++next;
  }
  printf("watched %ld attempts %ld breaches %ld caught %ld\n", watched, attempts, breaches,
         caught);
  return 0;
}
