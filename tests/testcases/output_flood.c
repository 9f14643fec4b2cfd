// Writes to stdout (argument "stderr": to stderr) forever, in 64 KiB chunks.
#include <string.h>
#include <unistd.h>

int main(int argc, char** argv) {
  int fd = (argc > 1 && strcmp(argv[1], "stderr") == 0) ? 2 : 1;
  static char chunk[65536];
  memset(chunk, 'x', sizeof chunk);
  for (;;) {
    if (write(fd, chunk, sizeof chunk) < 0) return 1;
  }
}
