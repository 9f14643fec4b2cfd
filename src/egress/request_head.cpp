#include "egress/request_head.hpp"

#include <arpa/inet.h>

#include <algorithm>

namespace airlock::egress {
namespace {

bool token_character(unsigned char c) noexcept {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  static constexpr std::string_view kSpecials = "!#$%&'*+-.^_`|~";
  return c != 0 && kSpecials.find(static_cast<char>(c)) != std::string_view::npos;
}

bool is_token(std::string_view text) noexcept {
  if (text.empty()) return false;
  for (const char c : text) {
    if (!token_character(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool field_value_character(unsigned char c) noexcept {
  return c == '\t' || c == ' ' || (c >= 0x21 && c != 0x7F);
}

// Text the error message may quote: printable ASCII only, and short.
std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (const char raw : text.substr(0, 64)) {
    const auto c = static_cast<unsigned char>(raw);
    out.push_back(c >= 0x20 && c < 0x7F ? raw : '?');
  }
  if (text.size() > 64) out += "…";
  return out + "\"";
}

std::optional<std::uint16_t> parse_port(std::string_view digits) {
  if (digits.empty() || digits.size() > 5 || digits.front() == '0') return std::nullopt;
  unsigned value = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(value);
}

// A DNS name in canonical form, or a refusal.
std::optional<std::string> check_dns_name(std::string_view host, std::string& why) {
  std::string name;
  name.reserve(host.size());
  for (const char raw : host) {
    const char c = (raw >= 'A' && raw <= 'Z') ? static_cast<char>(raw - 'A' + 'a') : raw;
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_')) {
      why = "host " + quoted(host) + " contains a character not allowed in a host name";
      return std::nullopt;
    }
    name.push_back(c);
  }
  if (name.size() > 1 && name.back() == '.') name.pop_back();
  if (name.size() > kMaxHostLength) {
    why = "host is longer than " + std::to_string(kMaxHostLength) + " characters";
    return std::nullopt;
  }
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t dot = std::min(name.find('.', start), name.size());
    const std::string_view label(name.data() + start, dot - start);
    if (label.empty()) {
      why = "host " + quoted(host) + " has an empty label";
      return std::nullopt;
    }
    if (label.size() > 63) {
      why = "host " + quoted(host) + " has a label longer than 63 characters";
      return std::nullopt;
    }
    if (label.front() == '-' || label.back() == '-') {
      why = "host " + quoted(host) + " has a label starting or ending with '-'";
      return std::nullopt;
    }
    start = dot + 1;
  }
  return name;
}

}  // namespace

std::optional<ConnectTarget> parse_connect_target(std::string_view text, std::string& why) {
  if (text.empty()) {
    why = "the CONNECT target is empty";
    return std::nullopt;
  }
  if (text.find('@') != std::string_view::npos) {
    why = "the CONNECT target " + quoted(text) + " carries userinfo; give host:port only";
    return std::nullopt;
  }
  ConnectTarget target;
  std::string_view port_text;
  if (text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      why = "the CONNECT target " + quoted(text) + " is not [ipv6]:port";
      return std::nullopt;
    }
    const std::string_view inner = text.substr(1, close - 1);
    const auto address = IpAddress::parse(inner);
    if (inner.find('%') != std::string_view::npos || !address ||
        address->family != IpAddress::Family::v6) {
      why = "the bracketed host " + quoted(inner) + " is not an IPv6 address (zone ids refused)";
      return std::nullopt;
    }
    target.literal = *address;
    target.host = address->to_string();
    port_text = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      why = "the CONNECT target " + quoted(text) + " names no port; expected host:port";
      return std::nullopt;
    }
    const std::string_view host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
    if (host.empty()) {
      why = "the CONNECT target " + quoted(text) + " names no host";
      return std::nullopt;
    }
    if (host.find(':') != std::string_view::npos) {
      why = "the CONNECT target " + quoted(text) + " has an IPv6 literal outside brackets";
      return std::nullopt;
    }
    auto name = check_dns_name(host, why);
    if (!name) return std::nullopt;
    if (const auto address = IpAddress::parse(*name)) {
      target.literal = *address;
    } else {
      // inet_aton reads "127.1", "0x7f.1", "2130706433" and octal parts as IPv4 — and so does
      // getaddrinfo, which would make a name that matched as text dial a different address.
      in_addr ignored{};
      if (::inet_aton(name->c_str(), &ignored) != 0) {
        why = "host " + quoted(host) + " is an IPv4 address in a non-canonical form; use a.b.c.d";
        return std::nullopt;
      }
    }
    target.host = std::move(*name);
  }
  const auto port = parse_port(port_text);
  if (!port) {
    why = "the port " + quoted(port_text) + " is not a number from 1 to 65535 (digits only)";
    return std::nullopt;
  }
  target.port = *port;
  return target;
}

RequestHead parse_request_line(std::string_view line) {
  RequestHead head;
  const auto malformed = [&](std::string why) {
    head.problem = HeadProblem::malformed;
    head.why = std::move(why);
    return head;
  };
  for (const char c : line) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) return malformed("the request line contains a control character");
  }
  const auto first = line.find(' ');
  const auto second = first == std::string_view::npos ? first : line.find(' ', first + 1);
  if (second == std::string_view::npos || line.find(' ', second + 1) != std::string_view::npos) {
    return malformed("the request line " + quoted(line) +
                     " is not METHOD SP target SP version with single spaces");
  }
  const std::string_view method = line.substr(0, first);
  const std::string_view target = line.substr(first + 1, second - first - 1);
  const std::string_view version = line.substr(second + 1);
  if (!is_token(method)) return malformed("the method " + quoted(method) + " is not a token");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return malformed("the version " + quoted(version) + " is not HTTP/1.0 or HTTP/1.1");
  }
  if (method != "CONNECT") {
    head.problem = HeadProblem::method_not_allowed;
    head.why = "the method " + quoted(method) + " is not CONNECT";
    return head;
  }
  std::string why;
  auto parsed = parse_connect_target(target, why);
  if (!parsed) return malformed(std::move(why));
  head.target = std::move(*parsed);
  return head;
}

RequestHead parse_request_head(std::string_view head) {
  RequestHead refused;
  refused.problem = HeadProblem::malformed;
  if (head.size() < 4 || head.substr(head.size() - 4) != "\r\n\r\n") {
    refused.why = "the request head does not end with an empty line";
    return refused;
  }
  const auto line_end = head.find("\r\n");
  RequestHead result = parse_request_line(head.substr(0, line_end));
  if (result.problem != HeadProblem::none) return result;

  std::size_t at = line_end + 2;
  while (at < head.size() - 2) {
    const auto end = head.find("\r\n", at);
    const std::string_view field = head.substr(at, end - at);
    at = end + 2;
    if (field.empty()) {
      refused.why = "an empty line before the end of the request head";
      return refused;
    }
    if (field.front() == ' ' || field.front() == '\t') {
      refused.why = "a header line starts with whitespace (obs-fold is refused)";
      return refused;
    }
    const auto colon = field.find(':');
    if (colon == std::string_view::npos || !is_token(field.substr(0, colon))) {
      refused.why = "the header line " + quoted(field) + " is not name: value";
      return refused;
    }
    for (const char c : field.substr(colon + 1)) {
      if (!field_value_character(static_cast<unsigned char>(c))) {
        refused.why = "the header " + quoted(field.substr(0, colon)) +
                      " has a control character in its value";
        return refused;
      }
    }
  }
  return result;
}

RequestHeadReader::State RequestHeadReader::refuse(HeadProblem problem, std::string why) {
  result_ = RequestHead{};
  result_.problem = problem;
  result_.why = std::move(why);
  return state_ = State::refused;
}

RequestHeadReader::State RequestHeadReader::feed(std::string_view bytes) {
  if (state_ != State::need_more) return state_;
  buffer_.append(bytes);
  // Nothing past the ceiling can belong to an acceptable head, so it is never judged: the
  // outcome is the same however the bytes were split.
  const std::size_t limit = std::min(buffer_.size(), max_head_bytes_);
  for (std::size_t i = scanned_; i < limit; ++i) {
    const char c = buffer_[i];
    if (c == '\0') return refuse(HeadProblem::malformed, "the request head contains a NUL byte");
    if (c == '\n' && (i == 0 || buffer_[i - 1] != '\r')) {
      return refuse(HeadProblem::malformed, "a line ends in a bare LF; lines must end in CRLF");
    }
    if (c == '\r') {
      if (i + 1 >= limit) {
        // The LF has not arrived yet (or would lie past the ceiling): decide on the next byte.
        scanned_ = i;
        break;
      }
      if (buffer_[i + 1] != '\n') {
        return refuse(HeadProblem::malformed, "a bare CR; lines must end in CRLF");
      }
      continue;
    }
    scanned_ = i + 1;
    if (c != '\n') continue;
    if (!request_line_checked_) {
      request_line_checked_ = true;
      RequestHead line = parse_request_line(std::string_view(buffer_).substr(0, i - 1));
      if (line.problem != HeadProblem::none) return refuse(line.problem, std::move(line.why));
    }
    if (i >= 3 && buffer_.compare(i - 3, 4, "\r\n\r\n") == 0) {
      head_end_ = i + 1;
      if (head_end_ > max_head_bytes_) {
        return refuse(HeadProblem::too_large, "the request head is longer than " +
                                                  std::to_string(max_head_bytes_) + " bytes");
      }
      result_ = parse_request_head(std::string_view(buffer_).substr(0, head_end_));
      if (result_.problem != HeadProblem::none) {
        auto problem = result_.problem;
        return refuse(problem, std::move(result_.why));
      }
      return state_ = State::complete;
    }
  }
  if (buffer_.size() >= max_head_bytes_) {
    return refuse(HeadProblem::too_large,
                  "the request head is longer than " + std::to_string(max_head_bytes_) + " bytes");
  }
  return state_;
}

std::string_view RequestHeadReader::leftover() const noexcept {
  if (state_ != State::complete) return {};
  return std::string_view(buffer_).substr(head_end_);
}

}  // namespace airlock::egress
