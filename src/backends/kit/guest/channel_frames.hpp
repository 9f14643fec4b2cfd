// The frames of a command channel: between a host and the agent inside a guest that starts its
// commands (the gvisor keeper, the microvm's init). The transport is the backend's (a unix
// socket for gvisor, a stream of the virtio-serial multiplexer for microvm); what travels on it
// is the same.
//
// One connection carries one command. Every frame is a type byte, a 32-bit little-endian payload
// length and the payload. Both ends treat the other as untrusted: a length over kMaxFramePayload
// or an unknown type ends the connection.
//
//   host → guest
//     kRequest   first and once: the command (encode_request)
//     kStdin     bytes for the command's stdin
//     kStdinEnd  the command's stdin ends
//     kSignal    one byte, a signal for the command's process group (forwardable signals only)
//     kKill      kill the command's whole tree
//   guest → host
//     kToken     (gvisor) first and once, before the host says anything: the sandbox's token
//     kStdout, kStderr   the command's output
//     kStdinTaken        decimal count of stdin bytes the command has taken (flow control: the
//                        host keeps at most kStdinWindow bytes unacknowledged)
//     kStatus    the command's status line (file_protocol.hpp), as the wrapper wrote it
//     kDone      decimal exit code of what the agent started (128+n for a signal), once reaped
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace airlock::guest_kit {

enum FrameType : char {
  kRequest = 'R',
  kStdin = 'I',
  kStdinEnd = 'E',
  kSignal = 'S',
  kKill = 'K',
  kToken = 'A',
  kStdout = 'O',
  kStderr = 'X',
  kStdinTaken = 'T',
  kStatus = 'Z',
  kDone = 'D',
};

inline constexpr std::size_t kFrameHeader = 5;
inline constexpr std::uint32_t kMaxFramePayload = 1u << 20;
inline constexpr std::uint64_t kStdinWindow = 256u << 10;
inline constexpr std::size_t kTokenLength = 32;  // hex characters

inline std::string frame(char type, std::string_view payload) {
  std::string out(kFrameHeader, '\0');
  out[0] = type;
  const auto size = static_cast<std::uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out[1 + i] = static_cast<char>((size >> (8 * i)) & 0xff);
  out.append(payload);
  return out;
}

// Collects bytes and hands out whole frames. `failed` once the peer sent something malformed.
class FrameReader {
 public:
  void feed(const char* data, std::size_t size) { buffer_.append(data, size); }

  // The next whole frame, if one is buffered.
  bool next(char& type, std::string& payload) {
    if (failed_ || buffer_.size() - start_ < kFrameHeader) return false;
    std::uint32_t size = 0;
    for (int i = 0; i < 4; ++i) {
      size |= static_cast<std::uint32_t>(static_cast<unsigned char>(buffer_[start_ + 1 + i]))
              << (8 * i);
    }
    if (size > kMaxFramePayload) {
      failed_ = true;
      return false;
    }
    if (buffer_.size() - start_ < kFrameHeader + size) return false;
    type = buffer_[start_];
    payload.assign(buffer_, start_ + kFrameHeader, size);
    start_ += kFrameHeader + size;
    if (start_ == buffer_.size()) {
      buffer_.clear();
      start_ = 0;
    } else if (start_ > (1u << 16)) {
      buffer_.erase(0, start_);
      start_ = 0;
    }
    return true;
  }

  bool failed() const noexcept { return failed_; }

 private:
  std::string buffer_;
  std::size_t start_ = 0;
  bool failed_ = false;
};

// What the host asks the agent to start.
struct ChannelRequest {
  bool direct = false;  // the argv itself (file plane), not under `run`
  bool feed_stdin = false;
  std::string cwd;
  std::vector<std::string> argv;
  std::vector<std::string> environment;  // NAME=VALUE, over the guest's own
};

// Fields separated by NUL: "run"|"direct", "0"|"1", cwd, argc, argv…, envc, env… . No field can
// hold a NUL (argv and environment strings are C strings in the guest).
inline std::string encode_request(const ChannelRequest& request) {
  std::string out;
  const auto field = [&out](std::string_view text) {
    out.append(text);
    out.push_back('\0');
  };
  field(request.direct ? "direct" : "run");
  field(request.feed_stdin ? "1" : "0");
  field(request.cwd);
  field(std::to_string(request.argv.size()));
  for (const auto& argument : request.argv) field(argument);
  field(std::to_string(request.environment.size()));
  for (const auto& entry : request.environment) field(entry);
  return out;
}

inline bool decode_request(std::string_view payload, ChannelRequest& request) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  while (start < payload.size()) {
    const auto end = payload.find('\0', start);
    if (end == std::string_view::npos) return false;
    fields.emplace_back(payload.substr(start, end - start));
    start = end + 1;
  }
  std::size_t at = 0;
  const auto count = [&](std::size_t& value) {
    if (at >= fields.size() || fields[at].empty() || fields[at].size() > 6) return false;
    value = 0;
    for (const char c : fields[at]) {
      if (c < '0' || c > '9') return false;
      value = value * 10 + static_cast<std::size_t>(c - '0');
    }
    ++at;
    return true;
  };
  if (fields.size() < 6) return false;
  if (fields[0] != "run" && fields[0] != "direct") return false;
  request.direct = fields[0] == "direct";
  if (fields[1] != "0" && fields[1] != "1") return false;
  request.feed_stdin = fields[1] == "1";
  request.cwd = fields[2];
  at = 3;
  std::size_t argc = 0;
  if (!count(argc) || argc == 0 || at + argc > fields.size()) return false;
  request.argv.assign(fields.begin() + static_cast<long>(at),
                      fields.begin() + static_cast<long>(at + argc));
  at += argc;
  std::size_t envc = 0;
  if (!count(envc) || at + envc != fields.size()) return false;
  request.environment.assign(fields.begin() + static_cast<long>(at), fields.end());
  for (const auto& entry : request.environment) {
    if (entry.find('=') == std::string::npos || entry.front() == '=') return false;
  }
  return true;
}

// Writes all of `data` to a blocking descriptor. False on an error (EPIPE included).
inline bool write_all(int fd, std::string_view data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t wrote = ::write(fd, data.data() + done, data.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return false;
    done += static_cast<std::size_t>(wrote);
  }
  return true;
}

}  // namespace airlock::guest_kit
