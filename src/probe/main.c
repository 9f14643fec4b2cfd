/* The probe's entry point, its output and argument helpers, and the bounded filesystem walk. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

static int g_argc;
static char **g_argv;

void say(const char *kind, const char *check, const char *format, ...) {
  char detail[2048];
  va_list list;
  va_start(list, format);
  vsnprintf(detail, sizeof detail, format, list);
  va_end(list);
  for (char *p = detail; *p; ++p) {
    if (*p == '\n' || *p == '\r') *p = ' ';
  }
  printf("%s %s %s\n", kind, check, detail);
  fflush(stdout);
}

const char *errno_name(int error) {
  switch (error) {
    case 0: return "0";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case ESRCH: return "ESRCH";
    case EINTR: return "EINTR";
    case EIO: return "EIO";
    case E2BIG: return "E2BIG";
    case EBADF: return "EBADF";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EACCES: return "EACCES";
    case EFAULT: return "EFAULT";
    case EBUSY: return "EBUSY";
    case EEXIST: return "EEXIST";
    case EXDEV: return "EXDEV";
    case ENODEV: return "ENODEV";
    case ENOTDIR: return "ENOTDIR";
    case EISDIR: return "EISDIR";
    case EINVAL: return "EINVAL";
    case ENFILE: return "ENFILE";
    case EMFILE: return "EMFILE";
    case ENOTTY: return "ENOTTY";
    case EFBIG: return "EFBIG";
    case ENOSPC: return "ENOSPC";
    case EROFS: return "EROFS";
    case EMLINK: return "EMLINK";
    case EPIPE: return "EPIPE";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case ENOSYS: return "ENOSYS";
    case ELOOP: return "ELOOP";
    case ENOTSOCK: return "ENOTSOCK";
    case EPROTOTYPE: return "EPROTOTYPE";
    case ENOPROTOOPT: return "ENOPROTOOPT";
    case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
    case ESOCKTNOSUPPORT: return "ESOCKTNOSUPPORT";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case EAFNOSUPPORT: return "EAFNOSUPPORT";
    case EADDRINUSE: return "EADDRINUSE";
    case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
    case ENETDOWN: return "ENETDOWN";
    case ENETUNREACH: return "ENETUNREACH";
    case ECONNABORTED: return "ECONNABORTED";
    case ECONNRESET: return "ECONNRESET";
    case ETIMEDOUT: return "ETIMEDOUT";
    case ECONNREFUSED: return "ECONNREFUSED";
    case EHOSTUNREACH: return "EHOSTUNREACH";
    case EINPROGRESS: return "EINPROGRESS";
    case EDQUOT: return "EDQUOT";
    case EUSERS: return "EUSERS";
    case EDEADLK: return "EDEADLK";
    case EOVERFLOW: return "EOVERFLOW";
    case EKEYREVOKED: return "EKEYREVOKED";
    case ENOKEY: return "ENOKEY";
    default: {
      static char buffer[32];
      snprintf(buffer, sizeof buffer, "errno%d", error);
      return buffer;
    }
  }
}

void say_errno(const char *kind, const char *check, int error, const char *what) {
  say(kind, check, "%s: %s (%s)", what, errno_name(error), strerror(error));
}

/* ---- arguments ------------------------------------------------------------------------------ */

const char *arg(const char *key) {
  const size_t length = strlen(key);
  for (int i = 2; i < g_argc; ++i) {
    if (strncmp(g_argv[i], key, length) == 0 && g_argv[i][length] == '=') {
      return g_argv[i] + length + 1;
    }
  }
  return NULL;
}

const char *arg_or(const char *key, const char *fallback) {
  const char *value = arg(key);
  return value ? value : fallback;
}

long long arg_number(const char *key, long long fallback) {
  const char *value = arg(key);
  if (!value || !*value) return fallback;
  char *end = NULL;
  const long long number = strtoll(value, &end, 0);
  return end && *end == '\0' ? number : fallback;
}

int split_list(char *value, char **items, int max) {
  int count = 0;
  if (!value || !*value) return 0;
  char *cursor = value;
  while (count < max) {
    items[count++] = cursor;
    char *comma = strchr(cursor, ',');
    if (!comma) break;
    *comma = '\0';
    cursor = comma + 1;
  }
  return count;
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int hex_decode(const char *hex, char *out, size_t capacity) {
  if (!hex) return -1;
  const size_t length = strlen(hex);
  if (length % 2 != 0 || length / 2 + 1 > capacity) return -1;
  for (size_t i = 0; i < length / 2; ++i) {
    const int high = hex_value(hex[2 * i]);
    const int low = hex_value(hex[2 * i + 1]);
    if (high < 0 || low < 0) return -1;
    out[i] = (char)(high * 16 + low);
  }
  out[length / 2] = '\0';
  return (int)(length / 2);
}

/* ---- helpers -------------------------------------------------------------------------------- */

long long now_ms(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

void sleep_ms(long ms) {
  struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {
  }
}

long read_small_file(const char *path, char *buffer, size_t capacity) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return -1;
  size_t total = 0;
  while (total + 1 < capacity) {
    const ssize_t got = read(fd, buffer + total, capacity - 1 - total);
    if (got < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      close(fd);
      errno = saved;
      return -1;
    }
    if (got == 0) break;
    total += (size_t)got;
  }
  buffer[total] = '\0';
  close(fd);
  return (long)total;
}

const char *status_field(const char *key, char *buffer, size_t capacity) {
  static char status[16384];
  if (read_small_file("/proc/self/status", status, sizeof status) < 0) return NULL;
  const size_t length = strlen(key);
  for (char *line = status; line && *line;) {
    char *next = strchr(line, '\n');
    if (next) *next = '\0';
    if (strncmp(line, key, length) == 0 && line[length] == ':') {
      const char *value = line + length + 1;
      while (*value == ' ' || *value == '\t') ++value;
      snprintf(buffer, capacity, "%s", value);
      return buffer;
    }
    line = next ? next + 1 : NULL;
  }
  return NULL;
}

int write_text_file(const char *path, const char *text) {
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return -1;
  const size_t length = strlen(text);
  const ssize_t wrote = write(fd, text, length);
  const int saved = errno;
  close(fd);
  errno = saved;
  return wrote == (ssize_t)length ? 0 : -1;
}

int file_exists(const char *path) {
  struct stat info;
  return lstat(path, &info) == 0;
}

void raise_soft_limit(int resource) {
  struct rlimit limit;
  if (getrlimit(resource, &limit) == 0 && limit.rlim_cur != limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(resource, &limit);
  }
}

int make_directories(const char *path) {
  char buffer[PATH_MAX];
  snprintf(buffer, sizeof buffer, "%s", path);
  for (char *p = buffer + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buffer, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(buffer, 0755) != 0 && errno != EEXIST) return -1;
  return 0;
}

static void remove_below(int directory) {
  DIR *listing = fdopendir(directory);
  if (!listing) {
    close(directory);
    return;
  }
  struct dirent *entry;
  while ((entry = readdir(listing)) != NULL) {
    if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
    if (unlinkat(dirfd(listing), entry->d_name, 0) == 0) continue;
    const int child =
        openat(dirfd(listing), entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (child >= 0) {
      remove_below(child);
      unlinkat(dirfd(listing), entry->d_name, AT_REMOVEDIR);
    }
  }
  closedir(listing);
}

void remove_tree(const char *path) {
  if (unlink(path) == 0) return;
  const int directory = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (directory < 0) return;
  remove_below(directory);
  rmdir(path);
}

/* ---- the walk ------------------------------------------------------------------------------- */

static void walk_below(char *path, size_t length, walk_visit visit, void *context,
                       walk_state *state) {
  DIR *listing = opendir(path);
  if (!listing) return;
  struct dirent *entry;
  while ((entry = readdir(listing)) != NULL) {
    if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
    if (state->entries >= state->limit || now_ms() > state->deadline_ms) {
      state->truncated = 1;
      break;
    }
    const size_t name = strlen(entry->d_name);
    if (length + 1 + name + 1 >= PATH_MAX) continue;
    const size_t base = length == 1 ? 0 : length; /* "/" + name, not "//name" */
    path[base] = '/';
    memcpy(path + base + 1, entry->d_name, name + 1);
    const size_t child_length = base + 1 + name;
    if (strcmp(path, "/proc") == 0 || strcmp(path, "/sys") == 0) {
      path[length] = '\0';
      continue;
    }
    struct stat info;
    if (lstat(path, &info) == 0) {
      ++state->entries;
      visit(path, &info, context);
      if (S_ISDIR(info.st_mode)) walk_below(path, child_length, visit, context, state);
    }
    path[length] = '\0';
    if (length == 1) path[1] = '\0';
  }
  closedir(listing);
}

void walk_tree(const char *root, walk_visit visit, void *context, walk_state *state) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s", root);
  walk_below(path, strlen(path), visit, context, state);
}

/* ---- small probes --------------------------------------------------------------------------- */

/* The premise of every other probe: the binary runs here and can talk. */
int probe_hello(void) {
  say("ok", "hello", "pid %d uid %d", (int)getpid(), (int)getuid());
  return 0;
}

/* A process that only exists: the marker others must (not) see in /proc. */
int probe_idle(void) {
  const long long seconds = arg_number("seconds", 60);
  const long long deadline = now_ms() + seconds * 1000;
  const char *release = arg("release");
  while (now_ms() < deadline) {
    if (release && file_exists(release)) break;
    sleep_ms(50);
  }
  return 0;
}

/* The contents of a marker file, or "absent": a poll that needs nothing but exec. */
int probe_peek(void) {
  const char *path = arg("path");
  char buffer[4096];
  if (!path) {
    say("error", "peek", "no path=");
    return 2;
  }
  if (read_small_file(path, buffer, sizeof buffer) < 0) {
    say("info", "absent", "%s", path);
    return 0;
  }
  say("info", "content", "%s", buffer);
  return 0;
}

/* Writes `content` at `path` from inside the guest: a release the guest is sure to see. */
int probe_mark(void) {
  const char *path = arg("path");
  if (!path || write_text_file(path, arg_or("content", "mark\n")) != 0) {
    say_errno("error", "mark", errno, path ? path : "no path=");
    return 2;
  }
  return 0;
}

/* ---- entry ---------------------------------------------------------------------------------- */

static int drop_to(const char *spec) {
  unsigned uid = 0;
  unsigned gid = 0;
  if (sscanf(spec, "%u:%u", &uid, &gid) != 2) return -1;
  if (setgroups(0, NULL) != 0) return -1;
  if (setresgid(gid, gid, gid) != 0) return -1;
  if (setresuid(uid, uid, uid) != 0) return -1;
  return 0;
}

struct probe_entry {
  const char *name;
  int (*run)(void);
};

static const struct probe_entry kProbes[] = {
    {"hello", probe_hello},           {"idle", probe_idle},
    {"processes", probe_processes},   {"capabilities", probe_capabilities},
    {"seccomp", probe_seccomp},       {"syscalls", probe_syscalls},
    {"readonly", probe_readonly},     {"devices", probe_devices},
    {"sockets", probe_sockets},       {"net-view", probe_net_view},
    {"net-reach", probe_net_reach},   {"kernel", probe_kernel},
    {"pool", probe_pool},             {"pool-check", probe_pool_check},
    {"cross-plant", probe_cross_plant}, {"cross-check", probe_cross_check},
    {"peek", probe_peek},             {"mark", probe_mark},
};

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc >= 3 && strcmp(argv[1], "--drop-to") == 0) {
    if (drop_to(argv[2]) != 0) {
      say_errno("error", "drop-privileges", errno, argv[2]);
      printf("done\n");
      return 2;
    }
    argv += 2;
    argc -= 2;
  }
  g_argc = argc;
  g_argv = argv;
  if (argc < 2) {
    fprintf(stderr, "usage: %s [--drop-to UID:GID] PROBE [key=value]...\n", PROBE_NAME);
    return 2;
  }
  /* A watchdog: no probe outlives its box, whatever it meets. */
  alarm((unsigned)arg_number("watchdog", 120));
  for (size_t i = 0; i < sizeof kProbes / sizeof kProbes[0]; ++i) {
    if (strcmp(argv[1], kProbes[i].name) == 0) {
      const int code = kProbes[i].run();
      printf("done\n");
      fflush(stdout);
      return code;
    }
  }
  fprintf(stderr, "%s: unknown probe %s\n", PROBE_NAME, argv[1]);
  return 2;
}
