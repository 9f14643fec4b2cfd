// Allocates and touches memory 16 MiB at a time until it is killed (or allocation fails).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  long limit_mib = argc > 1 ? atol(argv[1]) : 1L << 20;
  long total = 0;
  while (total < limit_mib) {
    char* block = malloc(16 << 20);
    if (block == NULL) {
      printf("allocation failed after %ld MiB\n", total);
      return 3;
    }
    memset(block, 0x5a, 16 << 20);
    total += 16;
  }
  printf("allocated %ld MiB without being stopped\n", total);
  return 0;
}
