/* What the guest's filesystem exposes: read-only kernel interfaces, device nodes, and unix
 * sockets that lead out of the sandbox. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include "probe.h"

/* ---- /proc/sys and /sys --------------------------------------------------------------------- */

static void check_read_only_mount(const char *path) {
  struct statvfs info;
  struct stat entry;
  if (lstat(path, &entry) != 0) {
    say("ok", path, "absent (%s): nothing there to write", errno_name(errno));
    return;
  }
  if (statvfs(path, &info) != 0) {
    say_errno("error", path, errno, "statvfs");
    return;
  }
  if (info.f_flag & ST_RDONLY) {
    say("ok", path, "mounted read-only (ST_RDONLY)");
  } else {
    say("bad", path, "not mounted read-only: statvfs flags %#lx", (unsigned long)info.f_flag);
  }
}

/* Opening for writing is the attacker's move; only files whose own value is written back
 * (harmless, and namespaced) are ever written. */
static void check_write(const char *path, int write_back) {
  char value[4096];
  const long length = read_small_file(path, value, sizeof value);
  const int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) {
      say("info", "absent", "%s", path);
    } else {
      say("ok", path, "open for writing refused: %s", errno_name(errno));
    }
    return;
  }
  if (write_back && length > 0) {
    const ssize_t wrote = write(fd, value, (size_t)length);
    if (wrote == length) {
      say("bad", path, "opened for writing and its own value was written back");
    } else {
      say("bad", path, "opened for writing (the write itself: %s)",
          wrote < 0 ? errno_name(errno) : "short");
    }
  } else {
    say("bad", path, "opened for writing");
  }
  close(fd);
}

int probe_readonly(void) {
  check_read_only_mount("/proc/sys");
  check_read_only_mount("/sys");
  if (file_exists("/sys/fs/cgroup")) check_read_only_mount("/sys/fs/cgroup");
  check_write("/proc/sys/kernel/hostname", 1);
  check_write("/proc/sys/kernel/domainname", 1);
  check_write("/proc/sys/net/ipv4/ping_group_range", 1);
  check_write("/proc/sys/net/core/somaxconn", 1);
  check_write("/proc/sys/kernel/msgmax", 1);
  check_write("/proc/sys/fs/file-max", 0);
  check_write("/proc/sys/kernel/core_pattern", 0);
  check_write("/proc/sys/vm/drop_caches", 0);
  check_write("/proc/sysrq-trigger", 0);
  check_write("/sys/kernel/uevent_helper", 0);
  check_write("/sys/kernel/mm/transparent_hugepage/enabled", 0);
  check_write("/sys/power/state", 0);
  check_write("/sys/class/net/lo/mtu", 0);
  if (mkdir("/sys/airlock-probe", 0755) == 0) {
    say("bad", "/sys/airlock-probe", "a directory was created in /sys");
    rmdir("/sys/airlock-probe");
  } else {
    say("ok", "/sys/airlock-probe", "mkdir in /sys refused: %s", errno_name(errno));
  }
  return 0;
}

/* ---- device nodes --------------------------------------------------------------------------- */

struct device_walk {
  int found;
  int ignored_nodev;
  int allowed;
  dev_t nodev_cache[64];
  int nodev_cached;
  dev_t dev_cache[64];
  int dev_cached;
};

static int allowed_device(unsigned major_number, unsigned minor_number) {
  static const unsigned kAllowed[][2] = {
      {1, 3}, {1, 5}, {1, 7}, {1, 8}, {1, 9}, /* null zero full random urandom */
      {5, 0}, {5, 1}, {5, 2},                 /* tty console ptmx */
  };
  for (size_t i = 0; i < sizeof kAllowed / sizeof kAllowed[0]; ++i) {
    if (kAllowed[i][0] == major_number && kAllowed[i][1] == minor_number) return 1;
  }
  return major_number >= 136 && major_number <= 143; /* pts/N */
}

/* Whether the filesystem holding `path` is mounted nodev (a node there cannot be opened). */
static int on_nodev_mount(struct device_walk *walk, const char *path, dev_t device) {
  for (int i = 0; i < walk->nodev_cached; ++i) {
    if (walk->nodev_cache[i] == device) return 1;
  }
  for (int i = 0; i < walk->dev_cached; ++i) {
    if (walk->dev_cache[i] == device) return 0;
  }
  struct statvfs info;
  char parent[PATH_MAX];
  snprintf(parent, sizeof parent, "%s", path);
  char *slash = strrchr(parent, '/');
  if (slash && slash != parent) *slash = '\0';
  const int nodev = statvfs(parent, &info) == 0 && (info.f_flag & ST_NODEV);
  if (nodev && walk->nodev_cached < 64) walk->nodev_cache[walk->nodev_cached++] = device;
  if (!nodev && walk->dev_cached < 64) walk->dev_cache[walk->dev_cached++] = device;
  return nodev;
}

static int visit_device(const char *path, const void *stat_buffer, void *context) {
  const struct stat *info = stat_buffer;
  struct device_walk *walk = context;
  if (!S_ISCHR(info->st_mode) && !S_ISBLK(info->st_mode)) return 0;
  const unsigned major_number = major(info->st_rdev);
  const unsigned minor_number = minor(info->st_rdev);
  const int in_dev = strncmp(path, "/dev/", 5) == 0;
  if (!in_dev && on_nodev_mount(walk, path, info->st_dev)) {
    ++walk->ignored_nodev;
    return 0;
  }
  if (S_ISBLK(info->st_mode)) {
    ++walk->found;
    say("bad", "block-device", "%s is a block device %u:%u", path, major_number, minor_number);
    return 0;
  }
  if (in_dev && allowed_device(major_number, minor_number)) {
    ++walk->allowed;
    return 0;
  }
  ++walk->found;
  say("bad", "character-device", "%s is a character device %u:%u beyond the minimal set%s", path,
      major_number, minor_number, in_dev ? "" : " (outside /dev, on a mount that allows devices)");
  return 0;
}

int probe_devices(void) {
  struct device_walk walk;
  memset(&walk, 0, sizeof walk);
  walk_state state = {0, arg_number("limit", 2000000), now_ms() + arg_number("box-ms", 20000), 0};
  walk_tree("/", visit_device, &walk, &state);
  say("info", "walked", "%ld entries", state.entries);
  say("info", "allowed-devices", "%d", walk.allowed);
  say("info", "nodes-on-nodev-mounts", "%d", walk.ignored_nodev);
  if (state.truncated) {
    say("error", "walk", "the walk stopped at its bound after %ld entries: unseen nodes prove nothing",
        state.entries);
  }
  if (walk.allowed == 0) {
    say("error", "positive-control", "not even /dev/null was found: the walk proves nothing here");
  }
  if (walk.found == 0) say("ok", "devices", "only the minimal set (%d nodes)", walk.allowed);
  return 0;
}

/* ---- unix sockets --------------------------------------------------------------------------- */

/* 1 connected (or reachable with a full backlog), 0 refused (errno in *error). */
static int connect_unix(const char *path, int abstract, int *error) {
  static const int kTypes[] = {SOCK_STREAM, SOCK_SEQPACKET, SOCK_DGRAM};
  struct sockaddr_un address;
  memset(&address, 0, sizeof address);
  address.sun_family = AF_UNIX;
  size_t length = strlen(path);
  socklen_t size;
  if (abstract) {
    if (length + 1 > sizeof address.sun_path) length = sizeof address.sun_path - 1;
    memcpy(address.sun_path + 1, path, length);
    size = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + length);
  } else {
    if (length >= sizeof address.sun_path) {
      *error = ENAMETOOLONG;
      return 0;
    }
    memcpy(address.sun_path, path, length);
    size = (socklen_t)sizeof address;
  }
  *error = 0;
  for (size_t i = 0; i < sizeof kTypes / sizeof kTypes[0]; ++i) {
    const int fd = socket(AF_UNIX, kTypes[i] | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      *error = errno;
      return 0;
    }
    const int result = connect(fd, (struct sockaddr *)&address, size);
    const int saved = errno;
    close(fd);
    if (result == 0 || saved == EAGAIN || saved == EINPROGRESS) return 1;
    *error = saved;
    if (saved != EPROTOTYPE) return 0;
  }
  return 0;
}

static int listen_unix(const char *path, int abstract) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_un address;
  memset(&address, 0, sizeof address);
  address.sun_family = AF_UNIX;
  socklen_t size;
  if (abstract) {
    snprintf(address.sun_path + 1, sizeof address.sun_path - 1, "%s", path);
    size = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(path));
  } else {
    snprintf(address.sun_path, sizeof address.sun_path, "%s", path);
    size = (socklen_t)sizeof address;
  }
  if (bind(fd, (struct sockaddr *)&address, size) != 0 || listen(fd, 16) != 0) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

struct socket_walk {
  char *allowed[32];
  int allowed_count;
  const char *own;
  int sockets;
  int reached;
  int own_seen;
};

static int under(const char *path, const char *directory) {
  const size_t length = strlen(directory);
  return strncmp(path, directory, length) == 0 &&
         (path[length] == '/' || path[length] == '\0' || (length > 0 && directory[length - 1] == '/'));
}

static int visit_socket(const char *path, const void *stat_buffer, void *context) {
  const struct stat *info = stat_buffer;
  struct socket_walk *walk = context;
  if (!S_ISSOCK(info->st_mode)) return 0;
  ++walk->sockets;
  if (walk->own && strcmp(path, walk->own) == 0) {
    walk->own_seen = 1;
    return 0;
  }
  for (int i = 0; i < walk->allowed_count; ++i) {
    if (under(path, walk->allowed[i])) {
      say("info", "declared-channel", "%s (under %s)", path, walk->allowed[i]);
      return 0;
    }
  }
  int error = 0;
  if (connect_unix(path, 0, &error)) {
    ++walk->reached;
    say("bad", "reachable-socket", "connected to %s, a socket no declared channel owns", path);
  } else {
    say("info", "socket-refused", "%s: %s", path, errno_name(error));
  }
  return 0;
}

int probe_sockets(void) {
  const char *dir = arg_or("dir", "/tmp");
  /* The positive control: sockets of our own, which the checks below must be able to reach. */
  char own[PATH_MAX];
  snprintf(own, sizeof own, "%s/.probe-control-%d.sock", dir, (int)getpid());
  char own_abstract[64];
  snprintf(own_abstract, sizeof own_abstract, "airlock-probe-control-%d", (int)getpid());
  unlink(own);
  const int control = listen_unix(own, 0);
  const int control_abstract = listen_unix(own_abstract, 1);
  int error = 0;
  if (control < 0) {
    say_errno("error", "positive-control", errno, "could not listen on a socket of its own");
  } else if (!connect_unix(own, 0, &error)) {
    say("error", "positive-control", "could not connect to its own socket: %s", errno_name(error));
  } else {
    say("ok", "positive-control", "connected to its own socket %s", own);
  }
  if (control_abstract >= 0 && !connect_unix(own_abstract, 1, &error)) {
    say("error", "positive-control-abstract", "could not connect to its own abstract socket: %s",
        errno_name(error));
  }

  struct socket_walk walk;
  memset(&walk, 0, sizeof walk);
  walk.own = own;
  char allow[8192];
  snprintf(allow, sizeof allow, "%s", arg_or("allow", ""));
  walk.allowed_count = split_list(allow, walk.allowed, 32);

  char planted[16384];
  snprintf(planted, sizeof planted, "%s", arg_or("planted", ""));
  char *paths[64];
  const int count = split_list(planted, paths, 64);
  for (int i = 0; i < count; ++i) {
    struct stat info;
    if (lstat(paths[i], &info) != 0) {
      say("ok", "planted", "%s is not visible (%s)", paths[i], errno_name(errno));
      continue;
    }
    if (connect_unix(paths[i], 0, &error)) {
      say("bad", "planted", "connected to the host's socket %s", paths[i]);
    } else {
      say("ok", "planted", "%s is visible but refuses: %s", paths[i], errno_name(error));
    }
  }
  char abstract[512];
  if (hex_decode(arg("abstract-hex"), abstract, sizeof abstract) > 0) {
    if (connect_unix(abstract, 1, &error)) {
      say("bad", "abstract", "connected to the host's abstract socket @%s", abstract);
    } else {
      say("ok", "abstract", "the host's abstract socket refuses: %s", errno_name(error));
    }
  }
  if (arg_number("walk", 1)) {
    walk_state state = {0, arg_number("limit", 2000000), now_ms() + arg_number("box-ms", 20000), 0};
    walk_tree("/", visit_socket, &walk, &state);
    say("info", "walked", "%ld entries, %d sockets", state.entries, walk.sockets);
    if (state.truncated) {
      say("error", "walk", "the walk stopped at its bound after %ld entries", state.entries);
    }
    if (control >= 0 && !walk.own_seen) {
      say("error", "positive-control-walk", "the walk did not find this probe's own socket %s", own);
    }
    if (walk.reached == 0) say("ok", "walk", "no socket found by the walk connects");
  }
  if (control >= 0) close(control);
  if (control_abstract >= 0) close(control_abstract);
  unlink(own);
  return 0;
}

/* Shared with the cross-sandbox probes. */
int probe_connect_unix(const char *path, int abstract, int *error) {
  return connect_unix(path, abstract, error);
}
int probe_listen_unix(const char *path, int abstract) { return listen_unix(path, abstract); }
