// Forks without end. Each child sleeps so it stays counted; the parent keeps forking until the
// first failure, prints how many forks succeeded and the errno, then waits to be killed.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void) {
  long forks = 0;
  for (;;) {
    pid_t child = fork();
    if (child == 0) {
      for (;;) pause();
    }
    if (child < 0) {
      printf("forks=%ld error=%s\n", forks, strerror(errno));
      fflush(stdout);
      for (;;) pause();
    }
    ++forks;
  }
}
