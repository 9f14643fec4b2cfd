// Byte-exact command output over a text-only exec.
//
// The service's executeShellCommand answers stdout and stderr as JSON strings, so bytes that are
// not UTF-8 do not survive it. A command therefore runs under a guest script that sends its
// output into two FIFOs read by `head -c` into scratch files of a directory only the guest's
// user can enter, and prints one manifest line: "<token> <exit code> <stdout bytes> <stderr
// bytes>". The files then come back in base64 chunks, each framed by the token, and the scratch
// is removed. Every answer is checked against the token and the sizes the manifest promised: a
// command that prints a forged manifest or frame cannot make airlock accept it, because its own
// output never reaches the service's stdout.
//
// Pure functions only: the scripts as text, the answers' parsers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace airlock::acas::capture {

// What the service's text exec answered.
struct TextReply {
  int exit_code = 0;
  std::string stdout_text;
  std::string stderr_text;
};

// A capture that cannot be trusted: the instance is to be invalidated.
struct Incomplete {
  std::string why;
};

// The programs the capture and the guest file roads need: the seed's list, plus mv (writes
// rename into place) and ls (a file's link count, which the file API never gives). Host tools
// also need nohup.
inline constexpr const char* kCaptureTools[] = {"sh", "mkdir", "mkfifo", "head",  "cat", "wc", "dd",
                                                "base64", "rm", "rmdir", "mv", "ls"};

// 32 hex characters of fresh randomness: the frame token and the scratch directory's name.
std::string fresh_token();

struct RunPlan {
  std::string token;
  std::string scratch;  // "/tmp/airlock-exec-<token>"
  std::string command;  // the shell line the caller asked for
  std::vector<std::pair<std::string, std::string>> environment;
  // Each stream keeps at most this many bytes; the capture reads limit + 1 so that passing it is
  // visible.
  std::uint64_t limit = 0;
  // Stop reading a stream once it passes the limit: the FIFO loses its reader, and the
  // command's next write to it fails (SIGPIPE) — a flood ends itself. Off (truncation), the
  // rest is drained so that the command runs to its own end.
  bool close_on_overflow = true;
  std::optional<std::string> stdin_path;  // a guest file fed to the command's stdin
  std::string working_directory = "/";    // the command's; see kNoWorkingDirectory
};

// The run script's exit when the working directory cannot be entered (with nothing printed).
// Not 124: that is what timeout(1) — and a service's own exec timeout — exits with.
inline constexpr int kNoWorkingDirectory = 113;

// The script that runs the command and prints the manifest.
std::string run_script(const RunPlan& plan);

struct Manifest {
  int exit_code = 0;
  std::uint64_t stdout_size = 0;
  std::uint64_t stderr_size = 0;
};

// Accepts only: exit 0, nothing on stderr, one line of at most 200 bytes ending in '\n', four
// fields, the token first, decimal counts, an exit code of at most 255, both sizes at most
// limit + 1. Anything else is Incomplete (returned, not thrown).
std::pair<std::optional<Manifest>, Incomplete> parse_manifest(const TextReply& reply,
                                                              std::string_view token,
                                                              std::uint64_t limit);

// The script that prints chunk `index` (of `chunk_bytes`) of scratch file `name` ("o" or "e")
// between two token lines, refusing a linked directory or file.
std::string chunk_script(std::string_view token, std::string_view scratch, std::string_view name,
                         std::uint64_t index, std::uint32_t chunk_bytes);

// The chunk's bytes when the answer is exactly a framed base64 body of `expected` bytes.
std::pair<std::optional<std::string>, Incomplete> parse_chunk(const TextReply& reply,
                                                              std::string_view token,
                                                              std::uint64_t expected,
                                                              std::uint32_t chunk_bytes);

// Removes the scratch directory's files and the directory.
std::string cleanup_script(std::string_view scratch);

// Whether `name` may be exported to a guest shell (a POSIX name: [A-Za-z_][A-Za-z0-9_]*).
bool exportable_name(std::string_view name);

}  // namespace airlock::acas::capture
