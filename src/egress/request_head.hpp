// The CONNECT request head: a strict parser and an incremental reader with a size ceiling.
//
// Strict means: CRLF line endings only (a bare CR or LF, or a NUL, is refused as soon as it
// arrives); `METHOD SP target SP HTTP/1.0|HTTP/1.1` with single spaces; a method other than
// CONNECT is refused as such (405) once the request line is complete, without waiting for the
// headers; header names are tokens followed directly by ':' (no whitespace before the colon,
// no obs-fold continuation lines), header values carry no control characters but HTAB.
//
// The target is authority-form `host:port`:
//   - port: 1–5 ASCII digits, no sign, no leading zero, 1..65535;
//   - host: a DNS name of letters, digits, '-', '_' and '.', at most 253 characters, labels of
//     1–63 characters not starting or ending with '-'; or a dotted-quad IPv4 literal; or an IPv6
//     literal in brackets (no zone id). Case is folded and one trailing dot dropped;
//   - refused: userinfo ("user@host"), an unbracketed IPv6 literal, a path, a scheme, any
//     whitespace or control character, and numeric hosts the system resolver would read as an
//     IPv4 shorthand ("127.1", "0x7f.0.0.1", "2130706433", "0177.0.0.1") — one spelling per
//     address, so that what is matched is what is dialled.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "egress/address.hpp"

namespace airlock::egress {

inline constexpr std::size_t kMaxHostLength = 253;

struct ConnectTarget {
  std::string host;                  // canonical: lowercase, no trailing dot, no brackets
  std::optional<IpAddress> literal;  // set when the host is an IP literal
  std::uint16_t port = 0;
};

enum class HeadProblem : std::uint8_t { none, malformed, method_not_allowed, too_large };

struct RequestHead {
  HeadProblem problem = HeadProblem::none;
  std::string why;  // what was wrong; empty when problem == none
  ConnectTarget target;
};

// An authority-form target; nullopt and `why` set when it is refused.
std::optional<ConnectTarget> parse_connect_target(std::string_view text, std::string& why);

// The request line without its CRLF.
RequestHead parse_request_line(std::string_view line);

// A complete head: the request line, header lines, and the terminating empty line (CRLF CRLF).
RequestHead parse_request_head(std::string_view head);

// Accumulates bytes as they arrive and decides as early as the bytes allow.
class RequestHeadReader {
 public:
  enum class State : std::uint8_t { need_more, complete, refused };

  explicit RequestHeadReader(std::size_t max_head_bytes) : max_head_bytes_(max_head_bytes) {}

  // Appends `bytes` and returns the new state; once complete or refused, further bytes are
  // ignored. `result()` holds the parsed head (complete) or the problem (refused).
  State feed(std::string_view bytes);

  State state() const noexcept { return state_; }
  const RequestHead& result() const noexcept { return result_; }
  // Bytes that arrived after the head (the start of the tunnelled stream); complete only.
  std::string_view leftover() const noexcept;
  std::size_t buffered() const noexcept { return buffer_.size(); }

 private:
  State refuse(HeadProblem problem, std::string why);

  std::size_t max_head_bytes_;
  std::string buffer_;
  std::size_t scanned_ = 0;  // bytes already checked for CR/LF/NUL discipline
  std::size_t head_end_ = 0;
  bool request_line_checked_ = false;
  State state_ = State::need_more;
  RequestHead result_;
};

}  // namespace airlock::egress
