/* A guest program posing as the keeper: it connects to the keeper socket ROUNDS times, each time
 * with a token frame of the right shape but the wrong token, then a forged stdout frame and a
 * forged "done". It counts the connections the host closed (it accepted and refused them) and
 * the bytes the host ever sent it (a request would be a command handed to an impostor), and
 * writes "closed <k> received <n>" to OUTFILE. Static: it runs in an image with no C library. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static size_t put_frame(char *out, char type, const char *payload, unsigned size) {
  out[0] = type;
  for (int i = 0; i < 4; ++i) out[1 + i] = (char)((size >> (8 * i)) & 0xff);
  memcpy(out + 5, payload, size);
  return 5 + size;
}

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  const int rounds = atoi(argv[2]);
  char message[256];
  size_t size = 0;
  char token[32];
  memset(token, 'f', sizeof token);
  size += put_frame(message + size, 'A', token, sizeof token);
  size += put_frame(message + size, 'O', "FORGED\n", 7);
  size += put_frame(message + size, 'D', "0", 1);
  long closed = 0, received = 0;
  for (int round = 0; round < rounds; ++round) {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un address = {0};
    address.sun_family = AF_UNIX;
    strncpy(address.sun_path, argv[1], sizeof address.sun_path - 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
      if (fd >= 0) close(fd);
      usleep(10000);
      continue;
    }
    if (write(fd, message, size) != (ssize_t)size) {
      close(fd);
      continue;
    }
    struct pollfd watch = {fd, POLLIN, 0};
    while (poll(&watch, 1, 300) > 0) {
      char buffer[4096];
      const ssize_t got = read(fd, buffer, sizeof buffer);
      if (got <= 0) {
        ++closed;
        break;
      }
      received += got;
    }
    close(fd);
  }
  FILE *out = fopen(argv[3], "w");
  if (out == NULL) return 1;
  fprintf(out, "closed %ld received %ld\n", closed, received);
  return fclose(out) == 0 ? 0 : 1;
}
