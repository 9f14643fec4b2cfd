#include "backends/acas/capture.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <stdexcept>

#include "airlock/encoding.hpp"
#include "airlock/paths.hpp"

namespace airlock::acas::capture {
namespace {

std::optional<std::uint64_t> decimal(std::string_view text) {
  if (text.empty() || text.size() > 20 ||
      !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return std::nullopt;
  }
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  while (true) {
    const auto at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
}

// The readers: `head` keeps limit + 1 bytes. Then, when truncating, `cat` drains whatever else
// comes so that the command never blocks on a full FIFO; when refusing, nothing reads on, and the
// command's next write to the stream fails.
std::string reader(const RunPlan& plan, std::string_view name) {
  const std::string file = "\"$d/" + std::string(name) + "\"";
  std::string script = "(head -c " + std::to_string(plan.limit + 1) + " >" + file;
  if (!plan.close_on_overflow) script += "; cat >/dev/null";
  script += ") <\"$d/" + std::string(name) + ".p\" &\n";
  return script;
}

}  // namespace

std::string fresh_token() {
  unsigned char bytes[16];
  std::size_t have = 0;
  while (have < sizeof bytes) {
    const ssize_t got = getrandom(bytes + have, sizeof bytes - have, 0);
    if (got <= 0) throw std::runtime_error("getrandom failed");
    have += static_cast<std::size_t>(got);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char byte : bytes) {
    token.push_back(kHex[byte >> 4]);
    token.push_back(kHex[byte & 0x0f]);
  }
  return token;
}

bool exportable_name(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name.front()))) return false;
  return std::all_of(name.begin(), name.end(),
                     [](unsigned char c) { return std::isalnum(c) || c == '_'; });
}

std::string run_script(const RunPlan& plan) {
  std::string script;
  script += "t=" + posix_quote(plan.token) + "; d=" + posix_quote(plan.scratch) + "\n";
  script += "for c in";
  for (const char* tool : kCaptureTools) script += std::string(" ") + tool;
  script += "; do command -v \"$c\" >/dev/null 2>&1 || exit 127; done\n";
  script += "cd -- " + posix_quote(plan.working_directory) + " 2>/dev/null || exit " +
            std::to_string(kNoWorkingDirectory) + "\n";
  script += "m=$(umask); umask 077\n";
  script += "mkdir -m 700 -- \"$d\" || exit 125\n";
  script += "mkfifo -- \"$d/o.p\" \"$d/e.p\" || exit 125\n";
  script += "(umask \"$m\"; ";
  for (const auto& [name, value] : plan.environment) {
    script += "export " + name + "=" + posix_quote(value) + "; ";
  }
  script += "exec sh -c " + posix_quote(plan.command) + ") >\"$d/o.p\" 2>\"$d/e.p\" <" +
            (plan.stdin_path ? posix_quote(*plan.stdin_path) : std::string("/dev/null")) + " &\n";
  script += "p=$!\n";
  script += reader(plan, "o") + "a=$!\n";
  script += reader(plan, "e") + "b=$!\n";
  // A shell reports a job ended by a signal ("Killed") on stderr, which must stay empty.
  script += "wait \"$p\" 2>/dev/null; r=$?\nwait \"$a\" 2>/dev/null; wait \"$b\" 2>/dev/null\n";
  script += "rm -f -- \"$d/o.p\" \"$d/e.p\"\n";
  script += "printf '%s %s %s %s\\n' \"$t\" \"$r\" \"$(($(wc -c <\"$d/o\")))\" "
            "\"$(($(wc -c <\"$d/e\")))\"\n";
  return script;
}

std::pair<std::optional<Manifest>, Incomplete> parse_manifest(const TextReply& reply,
                                                              std::string_view token,
                                                              std::uint64_t limit) {
  auto refuse = [](std::string why) {
    return std::pair<std::optional<Manifest>, Incomplete>{std::nullopt, Incomplete{std::move(why)}};
  };
  if (reply.exit_code == 127) return refuse("the guest lacks a program the capture needs");
  if (reply.exit_code == kNoWorkingDirectory) return refuse("the working directory cannot be entered");
  if (reply.exit_code != 0) {
    return refuse("the capture script exited " + std::to_string(reply.exit_code));
  }
  if (!reply.stderr_text.empty()) return refuse("the capture script wrote to stderr");
  const std::string_view out = reply.stdout_text;
  if (out.size() > 200 || !out.ends_with('\n') || out.find('\n') != out.size() - 1) {
    return refuse("the capture manifest is not one short line");
  }
  const auto fields = split(out.substr(0, out.size() - 1), ' ');
  if (fields.size() != 4 || fields[0] != token) return refuse("the capture manifest is malformed");
  const auto code = decimal(fields[1]);
  const auto stdout_size = decimal(fields[2]);
  const auto stderr_size = decimal(fields[3]);
  if (!code || !stdout_size || !stderr_size || *code > 255) {
    return refuse("the capture manifest's counts are not decimal");
  }
  if (*stdout_size > limit + 1 || *stderr_size > limit + 1) {
    return refuse("the capture manifest claims more bytes than were kept");
  }
  return {Manifest{static_cast<int>(*code), *stdout_size, *stderr_size}, Incomplete{}};
}

std::string chunk_script(std::string_view token, std::string_view scratch, std::string_view name,
                         std::uint64_t index, std::uint32_t chunk_bytes) {
  std::string script;
  script += "t=" + posix_quote(token) + "; d=" + posix_quote(scratch) + "; f=" + posix_quote(name) +
            "\n";
  script += "test ! -L \"$d\" && cd -P -- \"$d\" && test -f \"$f\" && test ! -L \"$f\" || exit 3\n";
  script += "printf '%s\\n' \"$t\"\n";
  script += "dd if=\"$f\" bs=" + std::to_string(chunk_bytes) + " skip=" + std::to_string(index) +
            " count=1 2>/dev/null | base64 || exit 4\n";
  script += "printf '%s\\n' \"$t\"\n";
  return script;
}

std::pair<std::optional<std::string>, Incomplete> parse_chunk(const TextReply& reply,
                                                              std::string_view token,
                                                              std::uint64_t expected,
                                                              std::uint32_t chunk_bytes) {
  auto refuse = [](std::string why) {
    return std::pair<std::optional<std::string>, Incomplete>{std::nullopt,
                                                             Incomplete{std::move(why)}};
  };
  if (reply.exit_code != 0) {
    return refuse("a capture chunk's script exited " + std::to_string(reply.exit_code));
  }
  if (!reply.stderr_text.empty()) return refuse("a capture chunk's script wrote to stderr");
  std::string_view out = reply.stdout_text;
  if (out.size() > 2 * static_cast<std::size_t>(chunk_bytes) + 2 * token.size() + 64) {
    return refuse("a capture chunk is larger than a chunk can be");
  }
  const std::string frame = std::string(token) + "\n";
  if (!out.starts_with(frame) || !out.ends_with(frame) || out.size() < 2 * frame.size()) {
    return refuse("a capture chunk is not framed by its token");
  }
  out = out.substr(frame.size(), out.size() - 2 * frame.size());
  std::string body;
  body.reserve(out.size());
  for (char c : out) {
    if (c != '\n') body.push_back(c);
  }
  auto decoded = base64_decode(body);
  if (!decoded) return refuse("a capture chunk is not base64");
  if (decoded->size() != expected) {
    return refuse("a capture chunk holds " + std::to_string(decoded->size()) +
                  " bytes where the manifest promised " + std::to_string(expected));
  }
  return {std::move(*decoded), Incomplete{}};
}

std::string cleanup_script(std::string_view scratch) {
  const std::string d = posix_quote(scratch);
  return "rm -f -- " + d + "/o " + d + "/e " + d + "/o.p " + d + "/e.p && rmdir -- " + d + "\n";
}

}  // namespace airlock::acas::capture
