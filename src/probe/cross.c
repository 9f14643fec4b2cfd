/* Another sandbox is unreachable: sandbox A plants (a secret file in /tmp, a SysV shared memory
 * segment and a message queue with known keys, an abstract and a filesystem unix socket) and
 * runs as the marker process while it holds; sandbox B looks for each. The checker only reports
 * what it saw (`seen WHAT yes|no`): run in A it is the positive control (everything seen), run in
 * B it must see nothing. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <unistd.h>

#include "probe.h"

struct probe_message {
  long type;
  char text[128];
};

int probe_cross_plant(void) {
  const char *token = arg("token");
  char secrets[8192];
  snprintf(secrets, sizeof secrets, "%s", arg_or("secrets", ""));
  char *secret_paths[8];
  const int secret_count = split_list(secrets, secret_paths, 8);
  const char *socket_path = arg("sock");
  char abstract[256];
  if (!token || secret_count == 0 || !socket_path || hex_decode(arg("abstract-hex"), abstract, sizeof abstract) <= 0) {
    say("error", "arguments", "token=, secrets=, sock= and abstract-hex= are needed");
    return 2;
  }
  const key_t shm_key = (key_t)arg_number("shm-key", 0);
  const key_t msg_key = (key_t)arg_number("msg-key", 0);
  const long long hold_ms = arg_number("hold-ms", 30000);
  alarm((unsigned)(hold_ms / 1000 + 30));
  int failed = 0;
  for (int i = 0; i < secret_count; ++i) {
    if (write_text_file(secret_paths[i], token) != 0) {
      say_errno("error", "file", errno, secret_paths[i]);
      failed = 1;
    }
  }
  const int shm = shmget(shm_key, 4096, IPC_CREAT | IPC_EXCL | 0666);
  if (shm < 0) {
    say_errno("error", "shm", errno, "shmget(IPC_CREAT)");
    failed = 1;
  } else {
    char *memory = shmat(shm, NULL, 0);
    if (memory != (void *)-1) {
      snprintf(memory, 4096, "%s", token);
      shmdt(memory);
    }
  }
  const int queue = msgget(msg_key, IPC_CREAT | IPC_EXCL | 0666);
  if (queue < 0) {
    say_errno("error", "msg", errno, "msgget(IPC_CREAT)");
    failed = 1;
  } else {
    struct probe_message message = {1, ""};
    snprintf(message.text, sizeof message.text, "%s", token);
    msgsnd(queue, &message, strlen(message.text) + 1, IPC_NOWAIT);
  }
  const int abstract_listener = probe_listen_unix(abstract, 1);
  if (abstract_listener < 0) {
    say_errno("error", "abstract", errno, "listen on the abstract socket");
    failed = 1;
  }
  unlink(socket_path);
  const int listener = probe_listen_unix(socket_path, 0);
  if (listener < 0) {
    say_errno("error", "sock", errno, "listen on the unix socket");
    failed = 1;
  } else {
    chmod(socket_path, 0777);
  }
  const char *marker = arg("marker");
  const char *release = arg("release");
  if (marker) {
    char temporary[PATH_MAX + 8];
    snprintf(temporary, sizeof temporary, "%s.tmp", marker);
    if (write_text_file(temporary, failed ? "failed\n" : "planted\n") != 0 ||
        rename(temporary, marker) != 0) {
      say_errno("error", "marker", errno, marker);
    }
  }
  const long long until = now_ms() + hold_ms;
  while (now_ms() < until && !(release && file_exists(release))) sleep_ms(20);
  if (shm >= 0) shmctl(shm, IPC_RMID, NULL);
  if (queue >= 0) msgctl(queue, IPC_RMID, NULL);
  if (listener >= 0) close(listener);
  if (abstract_listener >= 0) close(abstract_listener);
  unlink(socket_path);
  for (int i = 0; i < secret_count; ++i) unlink(secret_paths[i]);
  say("info", "planted", "%s", failed ? "with errors" : "everything");
  return 0;
}

static void seen(const char *what, int yes, const char *detail) {
  say("seen", what, "%s %s", yes ? "yes" : "no", detail);
}

int probe_cross_check(void) {
  char token[256];
  if (hex_decode(arg("token-hex"), token, sizeof token) <= 0) {
    say("error", "arguments", "token-hex= is needed");
    return 2;
  }
  char files[8192];
  snprintf(files, sizeof files, "%s", arg_or("files", ""));
  char *paths[16];
  const int count = split_list(files, paths, 16);
  for (int i = 0; i < count; ++i) {
    char content[1024];
    char what[64];
    snprintf(what, sizeof what, "file-%d", i);
    if (read_small_file(paths[i], content, sizeof content) < 0) {
      seen(what, 0, paths[i]);
    } else {
      seen(what, strstr(content, token) != NULL, paths[i]);
    }
  }
  const key_t shm_key = (key_t)arg_number("shm-key", 0);
  const int shm = shmget(shm_key, 0, 0);
  if (shm < 0) {
    seen("shm", 0, errno_name(errno));
  } else {
    char *memory = shmat(shm, NULL, SHM_RDONLY);
    const int has = memory != (void *)-1 && strstr(memory, token) != NULL;
    if (memory != (void *)-1) shmdt(memory);
    seen("shm", 1, has ? "attached, and it holds the token" : "the key exists");
  }
  const key_t msg_key = (key_t)arg_number("msg-key", 0);
  const int queue = msgget(msg_key, 0);
  seen("msg", queue >= 0, queue >= 0 ? "the queue opened" : errno_name(errno));
  char abstract[256];
  int error = 0;
  if (hex_decode(arg("abstract-hex"), abstract, sizeof abstract) > 0) {
    const int reached = probe_connect_unix(abstract, 1, &error);
    seen("abstract", reached, reached ? "connected" : errno_name(error));
  }
  const char *socket_path = arg("sock");
  if (socket_path) {
    const int reached = probe_connect_unix(socket_path, 0, &error);
    seen("sock", reached, reached ? "connected" : errno_name(error));
  }
  /* The marker process: A's planting probe, whose argv holds the token. */
  DIR *proc = opendir("/proc");
  int found = 0;
  char where[64] = "";
  if (proc) {
    struct dirent *entry;
    char cmdline[16384];
    char path[64];
    while ((entry = readdir(proc)) != NULL) {
      if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
      if (atoi(entry->d_name) == (int)getpid()) continue;
      snprintf(path, sizeof path, "/proc/%s/cmdline", entry->d_name);
      const long length = read_small_file(path, cmdline, sizeof cmdline);
      for (long i = 0; i < length; ++i) {
        if (cmdline[i] == '\0') cmdline[i] = ' ';
      }
      if (length > 0 && strstr(cmdline, token) && strstr(cmdline, "cross-plant")) {
        found = 1;
        snprintf(where, sizeof where, "pid %s", entry->d_name);
        break;
      }
    }
    closedir(proc);
  }
  seen("process", found, found ? where : "no process runs the planting probe");
  return 0;
}
