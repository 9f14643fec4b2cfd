#include "backends/kit/guest/file_commands.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "backends/kit/guest/file_ops.hpp"
#include "backends/kit/guest/file_protocol.hpp"

namespace airlock::guest_kit {
namespace {

int finish(const Failure& failure) {
  if (failure.code != kFileOk) std::fprintf(stderr, "%s\n", failure.message.c_str());
  return failure.code;
}

bool parse_count(const std::string& text, std::uint64_t& value) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long parsed = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || errno != 0) return false;
  value = parsed;
  return true;
}

}  // namespace

std::optional<int> run_file_command(const std::vector<std::string>& args) {
  if (args.empty()) return std::nullopt;
  const std::string& verb = args[0];
  std::uint64_t number = 0;
  if (verb == "stat" && args.size() == 2) return finish(stat_path(args[1]));
  if (verb == "list" && args.size() == 2) return finish(list_path(args[1]));
  if (verb == "read" && args.size() == 3 && parse_count(args[2], number)) {
    return finish(read_path(args[1], number));
  }
  if (verb == "write" && args.size() == 3 && parse_count(args[2], number)) {
    return finish(write_path(args[1], number));
  }
  if (verb == "remove" && args.size() == 3 && (args[2] == "0" || args[2] == "1")) {
    return finish(remove_path(args[1], args[2] == "1"));
  }
  return std::nullopt;
}

}  // namespace airlock::guest_kit
