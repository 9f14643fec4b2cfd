// Writes two files, a.dat then b.dat, over and over, each with one pwrite of a 2 MiB block
// stamped with a counter n: at every instant a.dat holds n and b.dat holds n or n-1, and each
// file is one whole block. A snapshot taken while this runs must show exactly such an instant.
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define BLOCK (2 * 1024 * 1024)

static void put(const char* name, const char* block) {
  int fd = open(name, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) _exit(1);
  if (pwrite(fd, block, BLOCK, 0) != BLOCK) _exit(2);
  close(fd);
}

int main(void) {
  static char block[BLOCK];
  for (uint32_t n = 1;; ++n) {
    memset(block, 'a' + (int)(n % 26), sizeof block);
    memcpy(block, &n, sizeof n);
    put("a.dat", block);
    put("b.dat", block);
  }
}
