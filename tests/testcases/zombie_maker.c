// Leaves N (default 20) orphans behind: a middle process forks children that exit at once and
// then exits itself without waiting for them, so they are reparented to the sandbox's init.
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char** argv) {
  int count = argc > 1 ? atoi(argv[1]) : 20;
  pid_t middle = fork();
  if (middle == 0) {
    for (int i = 0; i < count; ++i) {
      if (fork() == 0) {
        usleep(20000);
        _exit(0);
      }
    }
    _exit(0);
  }
  return 0;
}
