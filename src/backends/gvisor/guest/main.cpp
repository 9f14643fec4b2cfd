// airlock-gvisor-guest: see backends/gvisor/guest_protocol.hpp for what each subcommand does.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/gvisor/guest/run.hpp"
#include "backends/gvisor/guest_protocol.hpp"
#include "backends/kit/guest/file_commands.hpp"

namespace {

using namespace airlock::gvisor_guest;

bool parse_count(const char* text, std::uint64_t& value) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long parsed = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0) return false;
  value = parsed;
  return true;
}

int usage() {
  std::fprintf(stderr,
               "usage: airlock-gvisor-guest keeper [--workdir DIR] [--bridge SOCKET PORT]\n"
               "                                   [--control SOCKET]   (token on stdin)\n"
               "       airlock-gvisor-guest stat|list PATH\n"
               "       airlock-gvisor-guest read PATH MAX_BYTES\n"
               "       airlock-gvisor-guest write PATH SIZE   (content on stdin)\n"
               "       airlock-gvisor-guest remove PATH 0|1\n"
               "       airlock-gvisor-guest shepherd --status-fd N [--storage DIR BYTES]\n"
               "                            [--control SOCKET BROKER TOKEN_FILE] -- ARGV...\n"
               "       airlock-gvisor-guest probe\n");
  return kFileUsage;
}

}  // namespace

static int dispatch(const std::vector<std::string>& args) {
  if (args.empty()) return usage();
  const std::string& verb = args[0];
  if (verb == "probe") {
    std::puts("airlock-gvisor-guest ok");
    return 0;
  }
  if (const auto code = airlock::guest_kit::run_file_command(args)) return *code;
  if (verb == "shepherd" || verb == "keeper") {
    std::string workdir;
    std::string bridge_socket;
    int bridge_port = 0;
    std::string control_socket;
    std::string broker_socket;  // shepherd only, as the token file
    std::string token_file;
    int status_fd = -1;
    std::string storage_directory;
    std::uint64_t storage_bytes = 0;
    std::size_t i = 1;
    for (; i < args.size() && args[i] != "--"; ++i) {
      if (args[i] == "--workdir" && i + 1 < args.size()) {
        workdir = args[++i];
      } else if (args[i] == "--bridge" && i + 2 < args.size()) {
        bridge_socket = args[++i];
        bridge_port = std::atoi(args[++i].c_str());
      } else if (args[i] == "--control" && verb == "keeper" && i + 1 < args.size()) {
        control_socket = args[++i];
      } else if (args[i] == "--control" && verb == "shepherd" && i + 3 < args.size()) {
        control_socket = args[++i];
        broker_socket = args[++i];
        token_file = args[++i];
      } else if (args[i] == "--status-fd" && i + 1 < args.size()) {
        status_fd = std::atoi(args[++i].c_str());
      } else if (args[i] == "--storage" && i + 2 < args.size()) {
        storage_directory = args[++i];
        if (!parse_count(args[++i].c_str(), storage_bytes) || storage_bytes == 0) return usage();
      } else {
        return usage();
      }
    }
    if (verb == "keeper") {
      return keep(workdir, bridge_socket, bridge_port, control_socket);
    }
    if (i + 1 >= args.size()) return usage();
    const std::vector<std::string> command(args.begin() + static_cast<long>(i) + 1, args.end());
    if (status_fd < 0) return usage();
    return shepherd(status_fd, storage_directory, storage_bytes, control_socket, broker_socket,
                    token_file, command);
  }
  return usage();
}

int main(int argc, char** argv) {
  return dispatch(std::vector<std::string>(argv + 1, argv + argc));
}
