// Starts a grandchild in a new session — out of the command's process group, the way a daemon
// leaves — prints the grandchild's pid and its own, then sleeps. A timeout must still kill both.
#include <stdio.h>
#include <unistd.h>

int main(void) {
  int report[2];
  if (pipe(report) != 0) return 1;
  pid_t child = fork();
  if (child == 0) {
    setsid();
    pid_t grandchild = fork();
    if (grandchild == 0) {
      close(report[0]);
      close(report[1]);
      for (;;) pause();
    }
    dprintf(report[1], "%d\n", grandchild);
    _exit(0);
  }
  close(report[1]);
  char text[32] = {0};
  ssize_t length = read(report[0], text, sizeof text - 1);
  if (length <= 0) return 1;
  printf("escaper=%.*s self=%d\n", (int)(length - 1), text, getpid());
  fflush(stdout);
  for (;;) pause();
}
