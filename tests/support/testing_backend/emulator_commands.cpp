// The emulated commands. Each behaves like its POSIX (GNU/busybox-compatible) namesake for the
// options listed in airlock/testing.hpp, writes errors in the usual "cmd: path: reason" shape
// and returns the usual exit status; anything it does not support is an error it says so
// about, never a silent success.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <system_error>

#include "airlock/encoding.hpp"
#include "emulator.hpp"

namespace airlock::testing {
namespace {

using Emulator = InProcessSandbox::Emulator;
using Arguments = std::vector<std::string>;

int fail(Emulator::Io& io, const std::string& command, const std::string& path, int error) {
  io.err += command + ": " + (path.empty() ? "" : path + ": ") + errno_text(error) + "\n";
  return 1;
}

int usage(Emulator::Io& io, const std::string& command, const std::string& what) {
  io.err += command + ": " + what + " (not supported by the in-process emulator)\n";
  return 2;
}

// Splits "-rf"-style flags off the front of `arguments` (after the command name). Returns the
// operands; false when a flag is not in `allowed`.
bool parse_flags(const Arguments& arguments, std::string_view allowed, std::string& flags,
                 Arguments& operands) {
  std::size_t i = 1;
  for (; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    if (argument == "--") {
      ++i;
      break;
    }
    if (argument.size() < 2 || argument[0] != '-') break;
    for (std::size_t c = 1; c < argument.size(); ++c) {
      if (allowed.find(argument[c]) == std::string_view::npos) return false;
      flags += argument[c];
    }
  }
  operands.assign(arguments.begin() + static_cast<std::ptrdiff_t>(i), arguments.end());
  return true;
}

bool has(const std::string& flags, char flag) {
  return flags.find(flag) != std::string::npos;
}

std::optional<long long> parse_integer(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

// A backslash escape of a printf format at text[i]: `\n` or an octal `\NNN`. The bytes it
// stands for go to `out`; returns how many characters it took, or 0 for one not emulated.
std::size_t escape(std::string_view text, std::size_t i, std::string& out) {
  const char c = text[i + 1];
  if (c == 'n') {
    out += '\n';
    return 2;
  }
  if (c < '0' || c > '7') return 0;
  std::size_t j = i + 1;
  int value = 0;
  int digits = 0;
  while (j < text.size() && digits < 3 && text[j] >= '0' && text[j] <= '7') {
    value = value * 8 + (text[j] - '0');
    ++j;
    ++digits;
  }
  out += static_cast<char>(value & 0xFF);
  return j - i;
}

// printf FORMAT [ARGUMENT…] with `%s` conversions and the escapes above; the format is reused
// while arguments remain, as POSIX says.
int run_printf(const Arguments& arguments, Emulator::Io& io) {
  if (arguments.size() < 2) return usage(io, "printf", "missing format");
  const std::string_view format = arguments[1];
  const Arguments values(arguments.begin() + 2, arguments.end());
  std::size_t next = 0;
  std::string out;
  do {
    const std::size_t consumed_before = next;
    for (std::size_t i = 0; i < format.size();) {
      const char c = format[i];
      if (c == '\\' && i + 1 < format.size()) {
        const std::size_t taken = escape(format, i, out);
        if (taken == 0) return usage(io, "printf", std::string("escape \\") + format[i + 1]);
        i += taken;
      } else if (c != '%') {
        out += c;
        ++i;
      } else if (i + 1 < format.size() && format[i + 1] == 's') {
        if (next < values.size()) out += values[next++];
        i += 2;
      } else {
        return usage(io, "printf", "a conversion other than %s");
      }
    }
    if (next == consumed_before) break;
  } while (next < values.size());
  io.out += out;
  return 0;
}

int run_echo(const Arguments& arguments, Emulator::Io& io) {
  if (arguments.size() > 1 && arguments[1] == "-n") return usage(io, "echo", "-n");
  for (std::size_t i = 1; i < arguments.size(); ++i) {
    if (i != 1) io.out += ' ';
    io.out += arguments[i];
  }
  io.out += '\n';
  return 0;
}

// test OPERATOR PATH, for the file operators -e -f -d -L -h -r -w -x.
int evaluate_test(Emulator& emulator, Emulator::Frame& frame, const Arguments& arguments,
                  Emulator::Io& io) {
  static const std::string_view kOperators = "efdLhrwx";
  if (arguments.size() != 2 || arguments[0].size() != 2 || arguments[0][0] != '-' ||
      kOperators.find(arguments[0][1]) == std::string_view::npos) {
    return usage(io, "test", "other than a file operator (-e -f -d -L -h -r -w -x) and a path");
  }
  const char op = arguments[0][1];
  const bool no_follow = op == 'L' || op == 'h';
  const Emulator::Facts facts = emulator.facts(frame.cwd, arguments[1], !no_follow);
  bool result = false;
  switch (op) {
    case 'e':
      result = facts.exists;
      break;
    case 'f':
      result = facts.is_file;
      break;
    case 'd':
      result = facts.is_directory;
      break;
    case 'L':
    case 'h':
      result = facts.is_link;
      break;
    case 'r':
      result = facts.exists && facts.readable;
      break;
    case 'w':
      result = facts.exists && facts.writable;
      break;
    default:  // 'x'
      result = facts.exists && facts.executable;
      break;
  }
  return result ? 0 : 1;
}

int run_sleep(Emulator& emulator, const Arguments& arguments, Emulator::Io& io) {
  if (arguments.size() != 2) return usage(io, "sleep", "exactly one duration");
  std::string text = arguments[1];
  if (!text.empty() && text.back() == 's') text.pop_back();
  char* end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(seconds) || seconds < 0) {
    io.err += "sleep: invalid time interval '" + arguments[1] + "'\n";
    return 1;
  }
  emulator.sleep_for(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(std::min(seconds, 1e7))));
  return 0;
}

// base64 [-d], stdin to stdout; encoded lines are 76 characters, as GNU's and busybox's are.
int run_base64(Emulator::Frame& frame, const Arguments& arguments, Emulator::Io& io) {
  const bool decode = arguments.size() == 2 && arguments[1] == "-d";
  if (arguments.size() > 2 || (arguments.size() == 2 && !decode)) {
    return usage(io, "base64", "other than [-d] on stdin");
  }
  const std::string input = io.take_input(frame);
  if (!decode) {
    const std::string encoded = base64_encode(input);
    for (std::size_t i = 0; i < encoded.size(); i += 76) io.out += encoded.substr(i, 76) + "\n";
    return 0;
  }
  std::string compact;
  for (char c : input) {
    if (c != '\n' && c != '\r' && c != ' ' && c != '\t') compact += c;
  }
  const auto decoded = base64_decode(compact);
  if (!decoded) {
    io.err += "base64: invalid input\n";
    return 1;
  }
  io.out += *decoded;
  return 0;
}

// wc -c, of stdin.
int run_wc(Emulator::Frame& frame, const Arguments& arguments, Emulator::Io& io) {
  if (arguments.size() != 2 || arguments[1] != "-c") {
    return usage(io, "wc", "other than -c on stdin");
  }
  io.out += std::to_string(io.take_input(frame).size()) + "\n";
  return 0;
}

// head -c N /dev/zero: N zero bytes, the output flood of the exec suite and of the tests.
int run_head(const Arguments& arguments, Emulator::Io& io) {
  const auto bytes = arguments.size() == 4 && arguments[1] == "-c" && arguments[3] == "/dev/zero"
                         ? parse_integer(arguments[2])
                         : std::nullopt;
  if (!bytes || *bytes < 0) return usage(io, "head", "other than -c N /dev/zero");
  io.out += std::string(static_cast<std::size_t>(*bytes), '\0');
  return 0;
}

int run_ln(Emulator& emulator, Emulator::Frame& frame, const Arguments& arguments,
           Emulator::Io& io) {
  std::string flags;
  Arguments operands;
  if (!parse_flags(arguments, "sfn", flags, operands)) return usage(io, "ln", "an option");
  if (operands.size() != 2) return usage(io, "ln", "other than TARGET LINK_NAME");
  const int error = emulator.make_link(frame.cwd, operands[0], operands[1], has(flags, 's'),
                                       has(flags, 'f'), has(flags, 'n'));
  if (error != 0) return fail(io, "ln", operands[1], error);
  return 0;
}

int run_ls(Emulator& emulator, Emulator::Frame& frame, const Arguments& arguments,
           Emulator::Io& io) {
  std::string flags;
  Arguments operands;
  if (!parse_flags(arguments, "A", flags, operands)) return usage(io, "ls", "an option");
  if (operands.empty()) operands.push_back(".");
  int status = 0;
  for (const auto& operand : operands) {
    std::vector<std::string> names;
    bool directory = false;
    const int error = emulator.list_names(frame.cwd, operand, has(flags, 'A'), names, directory);
    if (error != 0) {
      io.err += "ls: cannot access '" + operand + "': " + errno_text(error) + "\n";
      status = 2;
      continue;
    }
    if (!directory) {
      io.out += operand + "\n";
      continue;
    }
    std::sort(names.begin(), names.end());
    for (const auto& name : names) io.out += name + "\n";
  }
  return status;
}

}  // namespace

int InProcessSandbox::Emulator::run_command(const std::vector<std::string>& arguments, Io& io,
                                            Frame& frame) {
  const std::string& name = arguments.at(0);
  std::string flags;
  Arguments operands;
  if (name == "true" || name == ":") return 0;
  if (name == "false") return 1;
  if (name == "exit") {
    if (arguments.size() != 2) return usage(io, "exit", "other than exit N");
    const auto parsed = parse_integer(arguments[1]);
    if (!parsed) io.err += "exit: illegal number: " + arguments[1] + "\n";
    throw emulation::ScriptExit{parsed ? static_cast<int>(*parsed & 0xFF) : 2};
  }
  if (name == "printf") return run_printf(arguments, io);
  if (name == "echo") return run_echo(arguments, io);
  if (name == "pwd") {
    io.out += frame.cwd + "\n";
    return 0;
  }
  if (name == "test") {
    return evaluate_test(*this, frame, Arguments(arguments.begin() + 1, arguments.end()), io);
  }
  if (name == "sleep") return run_sleep(*this, arguments, io);
  if (name == "cat") {
    operands.assign(arguments.begin() + 1, arguments.end());
    if (operands.empty()) operands.push_back("-");
    int status = 0;
    for (const auto& operand : operands) {
      if (operand == "-") {
        io.out += io.take_input(frame);
        continue;
      }
      std::string content;
      if (const int error = read_bytes(frame.cwd, operand, content); error != 0) {
        status = fail(io, "cat", operand, error);
        continue;
      }
      io.out += content;
    }
    return status;
  }
  if (name == "mkdir") {
    if (!parse_flags(arguments, "p", flags, operands)) return usage(io, "mkdir", "an option");
    if (operands.empty()) return usage(io, "mkdir", "no operand");
    int status = 0;
    for (const auto& operand : operands) {
      if (const int error = make_directory(frame.cwd, operand, has(flags, 'p')); error != 0) {
        status = fail(io, "mkdir", operand, error);
      }
    }
    return status;
  }
  if (name == "rm") {
    if (!parse_flags(arguments, "frR", flags, operands)) return usage(io, "rm", "an option");
    const bool force = has(flags, 'f');
    if (operands.empty() && !force) return usage(io, "rm", "no operand");
    int status = 0;
    for (const auto& operand : operands) {
      const bool recursive = has(flags, 'r') || has(flags, 'R');
      if (const int error = remove_path(frame.cwd, operand, recursive, force); error != 0) {
        status = fail(io, "rm", operand, error);
      }
    }
    return status;
  }
  if (name == "mv") {
    if (!parse_flags(arguments, "f", flags, operands)) return usage(io, "mv", "an option");
    if (operands.size() != 2) return usage(io, "mv", "other than SOURCE DEST");
    if (facts(frame.cwd, operands[1], true).is_directory) {
      return usage(io, "mv", "a directory as DEST");
    }
    if (const int error = rename_path(frame.cwd, operands[0], operands[1]); error != 0) {
      return fail(io, "mv", operands[0], error);
    }
    return 0;
  }
  if (name == "ln") return run_ln(*this, frame, arguments, io);
  if (name == "mkfifo") {
    if (!parse_flags(arguments, "", flags, operands) || operands.empty()) {
      return usage(io, "mkfifo", "options, or no operand");
    }
    int status = 0;
    for (const auto& operand : operands) {
      if (const int error = make_fifo(frame.cwd, operand); error != 0) {
        status = fail(io, "mkfifo", operand, error);
      }
    }
    return status;
  }
  if (name == "chmod") {
    if (arguments.size() < 3) return usage(io, "chmod", "fewer than MODE FILE");
    unsigned mode = 0;
    const std::string& text = arguments[1];
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), mode, 8);
    if (error != std::errc() || end != text.data() + text.size()) {
      return usage(io, "chmod", "symbolic modes");
    }
    int status = 0;
    for (std::size_t i = 2; i < arguments.size(); ++i) {
      if (const int failed = change_mode(frame.cwd, arguments[i], mode); failed != 0) {
        status = fail(io, "chmod", arguments[i], failed);
      }
    }
    return status;
  }
  if (name == "base64") return run_base64(frame, arguments, io);
  if (name == "wc") return run_wc(frame, arguments, io);
  if (name == "head") return run_head(arguments, io);
  if (name == "ls") return run_ls(*this, frame, arguments, io);
  io.err += name + ": not found\n";
  return 127;
}

}  // namespace airlock::testing
