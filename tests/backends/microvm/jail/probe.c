/* The jailed program of the jail's attacks: it runs a chain of commands given as arguments and
 * writes one line per command on stdout, so a test reads what the jail let it see and do.
 *   status             the Uid, Gid, Groups, Cap* and NoNewPrivs lines of /proc/self/status
 *   exists PATH        "exists PATH yes" or "exists PATH no ERRNO" (lstat)
 *   write PATH         creates PATH: "write PATH ok" or "write PATH errno ERRNO"
 *   mknod PATH         a character device (1,3): "mknod PATH ok" or "... errno ERRNO"
 *   exec PATH          execv(PATH, {PATH, "status"}); on failure "exec PATH errno ERRNO"
 *   list DIR           "list DIR a,b,c" (sorted, without . and ..) or "list DIR errno ERRNO"
 *   pids               "pids self=N seen=a,b" (the numeric entries of /proc)
 *   kill PID           kill(PID, SIGKILL): "kill PID ok" or "kill PID errno ERRNO"
 *   netdevs            "netdevs a,b" (the interfaces of /proc/self/net/dev)
 *   ifnames            "ifnames a,b" (if_nameindex, through netlink)
 *   cgroup             "cgroup <the cgroup v2 line (0::) of /proc/self/cgroup>"
 *   fds                "fds 0,1,2" (the open descriptors, without the one listing them)
 *   mounts             "mount ID PARENT MOUNTPOINT TYPE" for each line of /proc/self/mountinfo
 *   spawn              forks a child that sleeps forever: "spawn PID"
 *   sleep              sleeps forever
 *   exit N | raise SIG ends so
 * Static, so it needs nothing of the jail's root but itself. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static int compare(const void* left, const void* right) {
  const char* const* a = left;
  const char* const* b = right;
  const long x = strtol(*a, NULL, 10), y = strtol(*b, NULL, 10);
  if (x != y) return x < y ? -1 : 1;
  return strcmp(*a, *b);
}

/* Prints the entries of DIR sorted, comma-separated; only numeric ones when `numeric`. */
static void print_entries(const char* dir, int numeric, int skip_fd) {
  DIR* stream = opendir(dir);
  if (stream == NULL) {
    printf("errno %d", errno);
    return;
  }
  char* names[4096];
  int count = 0;
  struct dirent* entry;
  while ((entry = readdir(stream)) != NULL && count < 4096) {
    if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
    if (numeric && (entry->d_name[0] < '0' || entry->d_name[0] > '9')) continue;
    if (skip_fd && atoi(entry->d_name) == dirfd(stream)) continue;
    names[count++] = strdup(entry->d_name);
  }
  closedir(stream);
  qsort(names, (size_t)count, sizeof names[0], compare);
  for (int index = 0; index < count; ++index) {
    printf("%s%s", index == 0 ? "" : ",", names[index]);
    free(names[index]);
  }
}

static void status(void) {
  FILE* file = fopen("/proc/self/status", "r");
  if (file == NULL) {
    printf("status errno %d\n", errno);
    return;
  }
  char line[512];
  while (fgets(line, sizeof line, file) != NULL) {
    if (strncmp(line, "Uid:", 4) == 0 || strncmp(line, "Gid:", 4) == 0 ||
        strncmp(line, "Groups:", 7) == 0 || strncmp(line, "Cap", 3) == 0 ||
        strncmp(line, "NoNewPrivs:", 11) == 0) {
      printf("status %s", line);
    }
  }
  fclose(file);
}

static void netdevs(void) {
  FILE* file = fopen("/proc/self/net/dev", "r");
  printf("netdevs ");
  if (file == NULL) {
    printf("errno %d\n", errno);
    return;
  }
  char line[512];
  int first = 1;
  for (int number = 0; fgets(line, sizeof line, file) != NULL; ++number) {
    if (number < 2) continue; /* the two header lines */
    char* colon = strchr(line, ':');
    if (colon == NULL) continue;
    *colon = '\0';
    char* name = line;
    while (*name == ' ') ++name;
    printf("%s%s", first ? "" : ",", name);
    first = 0;
  }
  fclose(file);
  printf("\n");
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int index = 1; index < argc; ++index) {
    const char* command = argv[index];
    const char* argument = index + 1 < argc ? argv[index + 1] : "";
    if (strcmp(command, "status") == 0) {
      status();
    } else if (strcmp(command, "exists") == 0) {
      struct stat info;
      if (lstat(argument, &info) == 0) {
        printf("exists %s yes\n", argument);
      } else {
        printf("exists %s no %d\n", argument, errno);
      }
      ++index;
    } else if (strcmp(command, "write") == 0) {
      const int fd = open(argument, O_WRONLY | O_CREAT | O_TRUNC, 0755);
      if (fd >= 0 && write(fd, "x", 1) == 1) {
        printf("write %s ok\n", argument);
      } else {
        printf("write %s errno %d\n", argument, errno);
      }
      if (fd >= 0) close(fd);
      ++index;
    } else if (strcmp(command, "mknod") == 0) {
      if (mknod(argument, S_IFCHR | 0666, makedev(1, 3)) == 0) {
        printf("mknod %s ok\n", argument);
      } else {
        printf("mknod %s errno %d\n", argument, errno);
      }
      ++index;
    } else if (strcmp(command, "exec") == 0) {
      char* child[] = {(char*)argument, "status", NULL};
      execv(argument, child);
      printf("exec %s errno %d\n", argument, errno);
      ++index;
    } else if (strcmp(command, "list") == 0) {
      printf("list %s ", argument);
      print_entries(argument, 0, 0);
      printf("\n");
      ++index;
    } else if (strcmp(command, "pids") == 0) {
      printf("pids self=%d seen=", (int)getpid());
      print_entries("/proc", 1, 0);
      printf("\n");
    } else if (strcmp(command, "kill") == 0) {
      if (kill((pid_t)atol(argument), SIGKILL) == 0) {
        printf("kill %s ok\n", argument);
      } else {
        printf("kill %s errno %d\n", argument, errno);
      }
      ++index;
    } else if (strcmp(command, "netdevs") == 0) {
      netdevs();
    } else if (strcmp(command, "ifnames") == 0) {
      struct if_nameindex* names = if_nameindex();
      printf("ifnames ");
      if (names == NULL) {
        printf("errno %d\n", errno);
      } else {
        for (struct if_nameindex* name = names; name->if_index != 0; ++name) {
          printf("%s%s", name == names ? "" : ",", name->if_name);
        }
        printf("\n");
        if_freenameindex(names);
      }
    } else if (strcmp(command, "cgroup") == 0) {
      /* On a hybrid host the v1 hierarchies' lines come first. */
      char line[512] = "";
      FILE* file = fopen("/proc/self/cgroup", "r");
      int found = 0;
      while (file != NULL && !found && fgets(line, sizeof line, file) != NULL) {
        found = strncmp(line, "0::", 3) == 0;
      }
      if (found) {
        line[strcspn(line, "\n")] = '\0';
        printf("cgroup %s\n", line);
      } else {
        printf("cgroup errno %d\n", file == NULL ? errno : ENOENT);
      }
      if (file != NULL) fclose(file);
    } else if (strcmp(command, "fds") == 0) {
      printf("fds ");
      print_entries("/proc/self/fd", 0, 1);
      printf("\n");
    } else if (strcmp(command, "mounts") == 0) {
      FILE* file = fopen("/proc/self/mountinfo", "r");
      char line[4096];
      while (file != NULL && fgets(line, sizeof line, file) != NULL) {
        int id = 0, parent = 0;
        char point[2048] = "", type[64] = "";
        const char* dash = strstr(line, " - ");
        if (sscanf(line, "%d %d %*s %*s %2047s", &id, &parent, point) == 3 && dash != NULL &&
            sscanf(dash, " - %63s", type) == 1) {
          printf("mount %d %d %s %s\n", id, parent, point, type);
        }
      }
      if (file == NULL) printf("mount errno %d\n", errno);
      if (file != NULL) fclose(file);
    } else if (strcmp(command, "spawn") == 0) {
      const pid_t child = fork();
      if (child == 0) {
        for (;;) pause();
      }
      printf("spawn %d\n", (int)child);
    } else if (strcmp(command, "sleep") == 0) {
      printf("sleeping\n");
      for (;;) pause();
    } else if (strcmp(command, "exit") == 0) {
      return atoi(argument);
    } else if (strcmp(command, "raise") == 0) {
      signal(atoi(argument), SIG_DFL);
      raise(atoi(argument));
      return 99;
    } else {
      printf("unknown %s\n", command);
      return 98;
    }
  }
  return 0;
}
