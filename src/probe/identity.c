/* Who the guest is and what it may ask of the kernel: processes it can see, capabilities,
 * seccomp, the dangerous system calls, and whose kernel answers. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/capability.h>
#include <linux/if_ether.h>
#include <linux/io_uring.h>
#include <linux/perf_event.h>
#include <linux/sched.h>
#include <linux/userfaultfd.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe.h"

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef AF_ALG
#define AF_ALG 38
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

/* ---- processes ------------------------------------------------------------------------------ */

/* /proc/PID/cmdline with its NULs turned into spaces; length or -1. */
static long read_cmdline(const char *pid, char *buffer, size_t capacity) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%s/cmdline", pid);
  const long length = read_small_file(path, buffer, capacity);
  for (long i = 0; i < length; ++i) {
    if (buffer[i] == '\0') buffer[i] = ' ';
  }
  return length;
}

/* Field 22 of /proc/PID/stat (start time in clock ticks after boot), or -1. */
static long long start_ticks(const char *pid) {
  char path[64];
  char stat[4096];
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  if (read_small_file(path, stat, sizeof stat) < 0) return -1;
  const char *cursor = strrchr(stat, ')'); /* the comm may hold spaces and parentheses */
  if (!cursor) return -1;
  int field = 2;
  while (*cursor && field < 22) {
    if (*cursor == ' ') ++field;
    ++cursor;
  }
  return field == 22 ? atoll(cursor) : -1;
}

int probe_processes(void) {
  char host_marker[512];
  if (hex_decode(arg("host-marker-hex"), host_marker, sizeof host_marker) <= 0) {
    say("error", "arguments", "host-marker-hex= is missing or not hex");
    return 2;
  }
  const char *self_marker = arg("self-marker");
  char host_init[4096] = "";
  hex_decode(arg("host-init-hex"), host_init, sizeof host_init);
  const long long host_init_start = arg_number("host-init-start", -2);

  DIR *proc = opendir("/proc");
  if (!proc) {
    say_errno("error", "proc", errno, "opendir /proc");
    return 2;
  }
  int visible = 0;
  int saw_self = 0;
  int saw_host = 0;
  struct dirent *entry;
  char cmdline[65536];
  while ((entry = readdir(proc)) != NULL) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    ++visible;
    if (read_cmdline(entry->d_name, cmdline, sizeof cmdline) <= 0) continue;
    if (strstr(cmdline, host_marker)) {
      saw_host = 1;
      say("bad", "host-process-visible", "pid %s in the guest's /proc runs the host's marker: %.200s",
          entry->d_name, cmdline);
    }
    if (self_marker && strstr(cmdline, self_marker) && atoi(entry->d_name) != 0) saw_self = 1;
  }
  closedir(proc);
  say("info", "visible-processes", "%d", visible);
  if (!saw_self) {
    say("error", "positive-control",
        "the scan of /proc did not find this very probe (self-marker): it proves nothing here");
  } else {
    say("ok", "positive-control", "the scan found this probe's own cmdline");
  }
  if (!saw_host) say("ok", "host-marker-invisible", "no process in /proc runs the host's marker");

  char pid1[4096] = "";
  const long length = read_cmdline("1", pid1, sizeof pid1);
  while (length > 0 && strlen(pid1) > 0 && pid1[strlen(pid1) - 1] == ' ') pid1[strlen(pid1) - 1] = '\0';
  const long long pid1_start = start_ticks("1");
  say("info", "pid1", "%.200s (start %lld)", length >= 0 ? pid1 : "(unreadable)", pid1_start);
  if (length >= 0 && host_init[0] && strcmp(pid1, host_init) == 0 && pid1_start == host_init_start) {
    say("bad", "pid1-is-the-hosts-init", "PID 1 here has the host init's cmdline and start time: %.200s",
        pid1);
  } else {
    say("ok", "pid1-is-not-the-hosts-init", "PID 1 is %.200s", length >= 0 ? pid1 : "(unreadable)");
  }
  return 0;
}

/* ---- capabilities --------------------------------------------------------------------------- */

int probe_capabilities(void) {
  static const char *const kSets[] = {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"};
  char value[128];
  for (size_t i = 0; i < sizeof kSets / sizeof kSets[0]; ++i) {
    if (!status_field(kSets[i], value, sizeof value)) {
      if (strcmp(kSets[i], "CapAmb") == 0) {
        /* Some kernels (gVisor's) print no CapAmb: ask for each capability instead. */
        int ambient = 0;
        int answered = 0;
        for (int cap = 0; cap < 64; ++cap) {
          const int set = prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0);
          if (set >= 0) ++answered;
          if (set == 1) ++ambient;
        }
        char permitted[128] = "";
        char inheritable[128] = "";
        const int both_empty = status_field("CapPrm", permitted, sizeof permitted) &&
                               status_field("CapInh", inheritable, sizeof inheritable) &&
                               strtoull(permitted, NULL, 16) == 0 &&
                               strtoull(inheritable, NULL, 16) == 0;
        if (answered == 0 && both_empty) {
          say("ok", kSets[i], "no CapAmb line, no PR_CAP_AMBIENT; ambient is a subset of permitted "
              "and inheritable, both empty");
        } else if (answered == 0) {
          say("error", kSets[i], "/proc/self/status has no CapAmb line and PR_CAP_AMBIENT does not answer");
        } else {
          say(ambient ? "bad" : "ok", kSets[i], "no CapAmb line; PR_CAP_AMBIENT_IS_SET finds %d", ambient);
        }
        continue;
      }
      say("error", kSets[i], "/proc/self/status has no %s line", kSets[i]);
      continue;
    }
    const unsigned long long bits = strtoull(value, NULL, 16);
    if (bits != 0) {
      say("bad", kSets[i], "%s is %s", kSets[i], value);
    } else {
      say("ok", kSets[i], "%s is %s", kSets[i], value);
    }
  }
  /* The kernel's own answers, not only its text. */
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capget, &header, data) != 0) {
    say_errno("error", "capget", errno, "capget");
  } else if (data[0].effective | data[1].effective | data[0].permitted | data[1].permitted |
             data[0].inheritable | data[1].inheritable) {
    say("bad", "capget", "capget: effective %08x%08x permitted %08x%08x", data[1].effective,
        data[0].effective, data[1].permitted, data[0].permitted);
  } else {
    say("ok", "capget", "capget reports no effective, permitted or inheritable capability");
  }
  int bounding = 0;
  for (int cap = 0; cap < 64; ++cap) {
    const int in = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
    if (in == 1) {
      ++bounding;
      if (bounding == 1) say("bad", "bounding-set", "capability %d is in the bounding set", cap);
    }
  }
  if (bounding == 0) say("ok", "bounding-set", "PR_CAPBSET_READ finds no capability");
  char nnp_text[32];
  if (status_field("NoNewPrivs", nnp_text, sizeof nnp_text)) {
    say(atoi(nnp_text) == 1 ? "ok" : "bad", "NoNewPrivs", "NoNewPrivs is %s", nnp_text);
  }
  const int nnp = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
  if (nnp == 1) {
    say("ok", "no_new_privs", "PR_GET_NO_NEW_PRIVS is 1");
  } else if (nnp == 0) {
    say("bad", "no_new_privs", "PR_GET_NO_NEW_PRIVS is 0: an exec can gain privileges");
  } else {
    say_errno("error", "no_new_privs", errno, "PR_GET_NO_NEW_PRIVS");
  }

  /* An attacker does not read the sets, it uses them: each of these needs a capability. */
  const char *dir = arg_or("dir", "/tmp");
  char path[4096];
  snprintf(path, sizeof path, "%s/.probe-capability-%d", dir, (int)getpid());
  if (write_text_file(path, "x") == 0) {
    if (chown(path, 4242, 4242) == 0) {
      say("bad", "cap_chown", "chown of a file to uid 4242 succeeded");
    } else {
      say_errno("ok", "cap_chown", errno, "chown to 4242");
    }
    chmod(path, 0);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      /* Without CAP_DAC_OVERRIDE not even root reads its own mode-000 file. */
      say("bad", "cap_dac_override", "a mode-000 file opened for reading (uid %d)",
          (int)getuid());
      close(fd);
    } else {
      say_errno("ok", "cap_dac_override", errno, "open of a mode-000 file");
    }
    unlink(path);
  } else {
    say_errno("error", "cap_chown", errno, "could not create a scratch file");
  }
  char node[4096];
  snprintf(node, sizeof node, "%s/.probe-node-%d", dir, (int)getpid());
  if (mknod(node, S_IFCHR | 0600, makedev(1, 3)) == 0) {
    say("bad", "cap_mknod", "mknod of a character device (1:3) succeeded");
    unlink(node);
  } else {
    say_errno("ok", "cap_mknod", errno, "mknod of a character device");
  }
  const int raw = socket(AF_INET, SOCK_RAW, 1 /* ICMP */);
  if (raw >= 0) {
    say("bad", "cap_net_raw", "a raw IPv4 socket was created");
    close(raw);
  } else {
    say_errno("ok", "cap_net_raw", errno, "socket(AF_INET, SOCK_RAW)");
  }
  struct utsname names;
  uname(&names);
  if (sethostname(names.nodename, strlen(names.nodename)) == 0) {
    say("bad", "cap_sys_admin", "sethostname (to its own name) succeeded");
  } else {
    say_errno("ok", "cap_sys_admin", errno, "sethostname");
  }
  const pid_t child = fork();
  if (child == 0) _exit(setresuid(4242, 4242, 4242) == 0 ? 0 : 1);
  int status = 0;
  if (child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
      WEXITSTATUS(status) == 0) {
    say("bad", "cap_setuid", "setresuid(4242) succeeded");
  } else {
    say("ok", "cap_setuid", "setresuid(4242) was refused");
  }
  return 0;
}

/* ---- seccomp and the kernel ----------------------------------------------------------------- */

static void say_kernel(void) {
  struct utsname names;
  uname(&names);
  say("info", "kernel", "%s", names.release);
  char boot[128];
  if (read_small_file("/proc/sys/kernel/random/boot_id", boot, sizeof boot) > 0) {
    boot[strcspn(boot, "\n")] = '\0';
    say("info", "boot-id", "%s", boot);
  }
}

int probe_seccomp(void) {
  char value[64];
  if (status_field("Seccomp", value, sizeof value)) {
    say("info", "seccomp", "%s", value);
  } else {
    say("info", "seccomp", "absent");
  }
  if (status_field("Seccomp_filters", value, sizeof value)) say("info", "seccomp-filters", "%s", value);
  const long mode = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
  say("info", "seccomp-prctl", "%ld", mode);
  say_kernel();
  return 0;
}

int probe_kernel(void) {
  say_kernel();
  char version[512];
  if (read_small_file("/proc/version", version, sizeof version) > 0) {
    version[strcspn(version, "\n")] = '\0';
    say("info", "version", "%s", version);
  }
  return 0;
}

/* ---- dangerous system calls ----------------------------------------------------------------- */

/* Runs `attempt` in a child: returns 1 when it succeeded, 0 when refused (with `error` set to
 * its errno, or -signal when the child was killed, as a filter that kills does). */
static int attempt_in_child(int (*attempt)(void), int *error) {
  int channel[2];
  if (pipe(channel) != 0) {
    *error = errno;
    return -1;
  }
  const pid_t child = fork();
  if (child < 0) {
    *error = errno;
    close(channel[0]);
    close(channel[1]);
    return -1;
  }
  if (child == 0) {
    close(channel[0]);
    alarm(5);
    errno = 0;
    const int succeeded = attempt();
    const int saved = errno;
    char reply[32];
    const int length = snprintf(reply, sizeof reply, "%d %d", succeeded, saved);
    if (write(channel[1], reply, (size_t)length) < 0) _exit(3);
    _exit(0);
  }
  close(channel[1]);
  char reply[32] = "";
  ssize_t got;
  do {
    got = read(channel[0], reply, sizeof reply - 1);
  } while (got < 0 && errno == EINTR);
  close(channel[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (got <= 0) {
    *error = WIFSIGNALED(status) ? -WTERMSIG(status) : 0;
    return 0;
  }
  reply[got] = '\0';
  int succeeded = 0;
  int saved = 0;
  sscanf(reply, "%d %d", &succeeded, &saved);
  *error = saved;
  return succeeded;
}

static char g_scratch[4096];

static int try_mount(void) {
  char target[4200];
  snprintf(target, sizeof target, "%s/mnt", g_scratch);
  mkdir(target, 0755);
  if (mount("airlock-probe", target, "tmpfs", 0, "size=4k") == 0) {
    umount2(target, MNT_DETACH);
    return 1;
  }
  return 0;
}
static int try_unshare_user(void) { return unshare(CLONE_NEWUSER) == 0; }
static int try_clone_user(void) {
  const long child = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
  if (child == 0) _exit(0);
  if (child > 0) {
    waitpid((pid_t)child, NULL, 0);
    return 1;
  }
  return 0;
}
static int try_clone3_user(void) {
  struct clone_args args;
  memset(&args, 0, sizeof args);
  args.flags = CLONE_NEWUSER;
  args.exit_signal = SIGCHLD;
  const long child = syscall(SYS_clone3, &args, sizeof args);
  if (child == 0) _exit(0);
  if (child > 0) {
    waitpid((pid_t)child, NULL, 0);
    return 1;
  }
  return 0;
}
static int try_setns(void) {
  const int fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    /* Without the file, setns on a bad descriptor still reaches the filter or the kernel. */
    return syscall(SYS_setns, -1, CLONE_NEWNET) == 0;
  }
  const int result = setns(fd, CLONE_NEWNET);
  const int saved = errno;
  close(fd);
  errno = saved;
  return result == 0;
}
static int try_add_key(void) {
  return syscall(SYS_add_key, "user", "airlock-probe", "x", 1, -2 /* process keyring */) >= 0;
}
static int try_keyctl(void) {
  return syscall(SYS_keyctl, 1 /* KEYCTL_JOIN_SESSION_KEYRING */, "airlock-probe") >= 0;
}
static int try_bpf(void) {
  union bpf_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.map_type = BPF_MAP_TYPE_ARRAY;
  attr.key_size = 4;
  attr.value_size = 4;
  attr.max_entries = 1;
  return syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr) >= 0;
}
static int try_perf_event_open(void) {
  struct perf_event_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_TASK_CLOCK;
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  return syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0) >= 0;
}
static int try_io_uring_setup(void) {
  struct io_uring_params params;
  memset(&params, 0, sizeof params);
  return syscall(SYS_io_uring_setup, 4, &params) >= 0;
}
static int try_userfaultfd(void) {
  if (syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY) >= 0) return 1;
  return syscall(SYS_userfaultfd, O_CLOEXEC) >= 0;
}
static pid_t g_sibling = -1;
/* The attempt runs in its own child; the sibling is another child of the probe. */
static int try_ptrace_sibling(void) {
  const pid_t sibling = g_sibling;
  if (sibling <= 0) return 0;
  int succeeded = 0;
  if (ptrace(PTRACE_ATTACH, sibling, 0, 0) == 0) {
    succeeded = 1;
    waitpid(sibling, NULL, __WALL);
    ptrace(PTRACE_DETACH, sibling, 0, 0);
  } else if (ptrace(PTRACE_SEIZE, sibling, 0, 0) == 0) {
    succeeded = 1;
    ptrace(PTRACE_DETACH, sibling, 0, 0);
  }
  return succeeded;
}
static int try_open_by_handle_at(void) {
  /* The shocker move: a handle the guest made up (ext4's root inode, 2), against a mount it
   * holds open. A real handle from name_to_handle_at is tried first. */
  struct {
    unsigned int handle_bytes;
    int handle_type;
    unsigned char f_handle[128];
  } handle;
  memset(&handle, 0, sizeof handle);
  handle.handle_bytes = 128;
  int mount_id = 0;
  if (syscall(SYS_name_to_handle_at, AT_FDCWD, "/", &handle, &mount_id, 0) != 0) {
    memset(&handle, 0, sizeof handle);
    handle.handle_bytes = 8;
    handle.handle_type = 1;
    handle.f_handle[0] = 2;
  }
  const int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const long fd = syscall(SYS_open_by_handle_at, root, &handle, O_RDONLY);
  const int saved = errno;
  if (fd >= 0) close((int)fd);
  close(root);
  errno = saved;
  return fd >= 0;
}
static int try_socket(int family, int type, int protocol) {
  const int fd = socket(family, type, protocol);
  if (fd >= 0) {
    close(fd);
    return 1;
  }
  return 0;
}
static int try_af_vsock(void) { return try_socket(AF_VSOCK, SOCK_STREAM, 0); }
static int try_af_packet(void) {
  return try_socket(AF_PACKET, SOCK_RAW, __builtin_bswap16(ETH_P_ALL)) ||
         try_socket(AF_PACKET, SOCK_DGRAM, __builtin_bswap16(ETH_P_ALL));
}
static int try_af_alg(void) { return try_socket(AF_ALG, SOCK_SEQPACKET, 0); }

int probe_syscalls(void) {
  snprintf(g_scratch, sizeof g_scratch, "%s", arg_or("dir", "/tmp"));
  static const struct {
    const char *name;
    int (*attempt)(void);
  } kAttempts[] = {
      {"mount", try_mount},
      {"unshare-newuser", try_unshare_user},
      {"clone-newuser", try_clone_user},
      {"clone3-newuser", try_clone3_user},
      {"setns", try_setns},
      {"add_key", try_add_key},
      {"keyctl", try_keyctl},
      {"bpf", try_bpf},
      {"perf_event_open", try_perf_event_open},
      {"io_uring_setup", try_io_uring_setup},
      {"userfaultfd", try_userfaultfd},
      {"ptrace-sibling", try_ptrace_sibling},
      {"open_by_handle_at", try_open_by_handle_at},
      {"socket-af_vsock", try_af_vsock},
      {"socket-af_packet", try_af_packet},
      {"socket-af_alg", try_af_alg},
  };
  g_sibling = fork();
  if (g_sibling == 0) {
    alarm(30);
    for (;;) pause();
  }
  for (size_t i = 0; i < sizeof kAttempts / sizeof kAttempts[0]; ++i) {
    int error = 0;
    const int result = attempt_in_child(kAttempts[i].attempt, &error);
    if (result < 0) {
      say_errno("error", kAttempts[i].name, error, "could not fork the attempt");
    } else if (result == 1) {
      say("bad", kAttempts[i].name, "succeeded");
    } else if (error < 0) {
      say("ok", kAttempts[i].name, "refused: the attempt was killed by signal %d", -error);
    } else {
      say("ok", kAttempts[i].name, "refused: %s", errno_name(error));
    }
  }
  if (g_sibling > 0) {
    kill(g_sibling, SIGKILL);
    waitpid(g_sibling, NULL, 0);
  }
  return 0;
}
