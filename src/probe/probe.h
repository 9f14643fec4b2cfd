/* airlock-isolation-probe: what the isolation conformance suite runs INSIDE a guest (and, for
 * its host-side checks, on the host) to prove from there what a backend declares.
 *
 *   airlock-isolation-probe [--drop-to UID:GID] PROBE [key=value]...
 *
 * Each probe does one thing and prints machine-readable lines on stdout, one fact a line:
 *
 *   ok    CHECK DETAIL     an attacker's move that was refused, or a property that held
 *   bad   CHECK DETAIL     an attacker's move that got through: the probe fails
 *   error CHECK DETAIL     a premise could not be set up: the probe proves nothing (never a pass)
 *   info  KEY VALUE        a fact the host side judges itself (a count, a kernel release)
 *   seen  WHAT yes|no DETAIL   (cross-sandbox checks: the host judges which answer is right)
 *   done                   the last line: a probe that did not print it did not finish
 *
 * CHECK and KEY never contain spaces; DETAIL is one line. Static, no dependencies beyond libc:
 * it runs in images with no C library. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define PROBE_NAME "airlock-isolation-probe"

/* Output. */
void say(const char *kind, const char *check, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
void say_errno(const char *kind, const char *check, int error, const char *what);
const char *errno_name(int error);

/* Arguments: key=value pairs after the probe name. */
const char *arg(const char *key);
const char *arg_or(const char *key, const char *fallback);
long long arg_number(const char *key, long long fallback);
/* Splits a comma-separated value in place; returns how many items (at most `max`). */
int split_list(char *value, char **items, int max);
/* Hex-decodes `hex` into `out` (NUL-terminated); returns the length or -1. */
int hex_decode(const char *hex, char *out, size_t capacity);

/* Small helpers. */
long long now_ms(void);
void sleep_ms(long ms);
/* Reads a whole small file into `buffer` (NUL-terminated); returns bytes read or -1 (errno set). */
long read_small_file(const char *path, char *buffer, size_t capacity);
/* The value of "Key:" in /proc/self/status, or NULL. */
const char *status_field(const char *key, char *buffer, size_t capacity);
int write_text_file(const char *path, const char *text);
int file_exists(const char *path);
/* Raises the soft limit of `resource` to its hard limit. */
void raise_soft_limit(int resource);
/* Creates `path` and its parents (mode 0755); 0 or -1. */
int make_directories(const char *path);
/* Removes a tree without following links; best effort. */
void remove_tree(const char *path);

/* A filesystem walk that never follows links, never enters /proc or /sys, and is bounded. */
typedef int (*walk_visit)(const char *path, const void *stat_buffer, void *context);
typedef struct {
  long entries;
  long limit;
  long long deadline_ms;
  int truncated; /* 1 when the walk stopped at its limit or deadline */
} walk_state;
void walk_tree(const char *root, walk_visit visit, void *context, walk_state *state);

/* Unix sockets (filesystem or abstract): 1 when a connection was made or the listener is
 * reachable with a full backlog, 0 when refused (errno in *error). */
int probe_connect_unix(const char *path, int abstract, int *error);
int probe_listen_unix(const char *path, int abstract);

/* Probes. */
int probe_hello(void);
int probe_idle(void);
int probe_processes(void);
int probe_capabilities(void);
int probe_seccomp(void);
int probe_syscalls(void);
int probe_readonly(void);
int probe_devices(void);
int probe_sockets(void);
int probe_net_view(void);
int probe_net_reach(void);
int probe_kernel(void);
int probe_pool(void);
int probe_pool_check(void);
int probe_cross_plant(void);
int probe_cross_check(void);
int probe_peek(void);
int probe_mark(void);
