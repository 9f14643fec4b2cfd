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

int fail(Emulator::Io& io, const std::string& command, const std::string& path, int error,
         int status = 1) {
  io.err += command + ": " + (path.empty() ? "" : path + ": ") + errno_text(error) + "\n";
  return status;
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

// Backslash escapes of printf formats and %b arguments. `octal_zero` is %b's \0NNN form.
std::size_t escape(std::string_view text, std::size_t i, std::string& out, bool octal_zero) {
  const char c = text[i + 1];
  switch (c) {
    case 'n':
      out += '\n';
      return 2;
    case 't':
      out += '\t';
      return 2;
    case 'r':
      out += '\r';
      return 2;
    case 'a':
      out += '\a';
      return 2;
    case 'b':
      out += '\b';
      return 2;
    case 'f':
      out += '\f';
      return 2;
    case 'v':
      out += '\v';
      return 2;
    case '\\':
      out += '\\';
      return 2;
    case '"':
      out += '"';
      return 2;
    case '\'':
      out += '\'';
      return 2;
    default:
      break;
  }
  if (c >= '0' && c <= '7') {
    std::size_t j = i + 1;
    if (octal_zero && c == '0') ++j;
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
  out += '\\';
  return 1;
}

std::string pad(std::string text, bool left, std::size_t width, char fill = ' ') {
  if (text.size() >= width) return text;
  const std::string padding(width - text.size(), fill);
  return left ? text + padding : padding + text;
}

int run_printf(const Arguments& arguments, Emulator::Io& io) {
  if (arguments.size() < 2) return usage(io, "printf", "missing format");
  const std::string_view format = arguments[1];
  const Arguments values(arguments.begin() + 2, arguments.end());
  std::size_t next = 0;
  int status = 0;
  auto value = [&]() -> std::string { return next < values.size() ? values[next++] : ""; };
  do {
    const std::size_t consumed_before = next;
    for (std::size_t i = 0; i < format.size();) {
      const char c = format[i];
      if (c == '\\' && i + 1 < format.size()) {
        i += escape(format, i, io.out, false);
        continue;
      }
      if (c != '%') {
        io.out += c;
        ++i;
        continue;
      }
      if (i + 1 < format.size() && format[i + 1] == '%') {
        io.out += '%';
        i += 2;
        continue;
      }
      std::size_t j = i + 1;
      bool left = false;
      bool zero = false;
      while (j < format.size() && std::string_view("-0 +#").find(format[j]) != std::string::npos) {
        left |= format[j] == '-';
        zero |= format[j] == '0';
        ++j;
      }
      std::size_t width = 0;
      while (j < format.size() && std::isdigit(static_cast<unsigned char>(format[j]))) {
        width = width * 10 + static_cast<std::size_t>(format[j] - '0');
        ++j;
      }
      std::optional<std::size_t> precision;
      if (j < format.size() && format[j] == '.') {
        precision = 0;
        ++j;
        while (j < format.size() && std::isdigit(static_cast<unsigned char>(format[j]))) {
          *precision = *precision * 10 + static_cast<std::size_t>(format[j] - '0');
          ++j;
        }
      }
      if (j >= format.size()) return usage(io, "printf", "incomplete conversion");
      const char conversion = format[j];
      i = j + 1;
      if (conversion == 's' || conversion == 'b' || conversion == 'c') {
        std::string text = value();
        if (conversion == 'b') {
          std::string expanded;
          for (std::size_t k = 0; k < text.size();) {
            if (text[k] == '\\' && k + 1 < text.size()) {
              k += escape(text, k, expanded, true);
            } else {
              expanded += text[k++];
            }
          }
          text = std::move(expanded);
        }
        if (conversion == 'c') text = text.substr(0, 1);
        if (precision) text = text.substr(0, *precision);
        io.out += pad(std::move(text), left, width);
      } else if (std::string_view("diuxXo").find(conversion) != std::string::npos) {
        const std::string text = value();
        long long number = 0;
        if (!text.empty()) {
          if (auto parsed = parse_integer(text)) {
            number = *parsed;
          } else {
            io.err += "printf: " + text + ": expected a numeric value\n";
            status = 1;
          }
        }
        std::string digits;
        if (conversion == 'x' || conversion == 'X' || conversion == 'o') {
          char buffer[32];
          const int base = conversion == 'o' ? 8 : 16;
          auto [end, ignored] = std::to_chars(buffer, buffer + sizeof buffer,
                                              static_cast<unsigned long long>(number), base);
          digits.assign(buffer, end);
          if (conversion == 'X') {
            std::transform(digits.begin(), digits.end(), digits.begin(),
                           [](char d) { return static_cast<char>(std::toupper(d)); });
          }
        } else {
          digits = std::to_string(number);
        }
        if (zero && !left && digits.size() < width) {
          const bool negative = !digits.empty() && digits[0] == '-';
          const std::string body = negative ? digits.substr(1) : digits;
          digits = (negative ? "-" : "") + pad(body, false, width - (negative ? 1 : 0), '0');
        }
        io.out += pad(std::move(digits), left, width);
      } else {
        return usage(io, "printf", std::string("conversion %") + conversion);
      }
    }
    // POSIX: the format is reused while arguments remain, if it consumed any.
    if (next == consumed_before) break;
  } while (next < values.size());
  return status;
}

int run_echo(const Arguments& arguments, Emulator::Io& io) {
  std::size_t first = 1;
  bool newline = true;
  if (arguments.size() > 1 && arguments[1] == "-n") {
    newline = false;
    first = 2;
  }
  for (std::size_t i = first; i < arguments.size(); ++i) {
    if (i != first) io.out += ' ';
    io.out += arguments[i];
  }
  if (newline) io.out += '\n';
  return 0;
}

int evaluate_test(Emulator& emulator, Emulator::Frame& frame, Arguments arguments,
                  Emulator::Io& io) {
  if (arguments.empty()) return 1;
  if (arguments[0] == "!") {
    arguments.erase(arguments.begin());
    const int inner = evaluate_test(emulator, frame, std::move(arguments), io);
    return inner == 2 ? 2 : (inner == 0 ? 1 : 0);
  }
  if (arguments.size() == 1) return arguments[0].empty() ? 1 : 0;
  if (arguments.size() == 2) {
    const std::string& op = arguments[0];
    const std::string& operand = arguments[1];
    if (op == "-n") return operand.empty() ? 1 : 0;
    if (op == "-z") return operand.empty() ? 0 : 1;
    const bool no_follow = op == "-L" || op == "-h";
    const Emulator::Facts facts = emulator.facts(frame.cwd, operand, !no_follow);
    bool result = false;
    if (op == "-e")
      result = facts.exists;
    else if (op == "-f")
      result = facts.is_file;
    else if (op == "-d")
      result = facts.is_directory;
    else if (no_follow)
      result = facts.is_link;
    else if (op == "-s")
      result = facts.is_file && facts.size > 0;
    else if (op == "-r")
      result = facts.exists && facts.readable;
    else if (op == "-w")
      result = facts.exists && facts.writable;
    else if (op == "-x")
      result = facts.exists && facts.executable;
    else if (op == "-p")
      result = facts.exists && !facts.is_file && !facts.is_directory && !facts.is_link &&
               operand != "/dev/null" && operand != "/dev/zero";
    else
      return usage(io, "test", "unary operator " + op);
    return result ? 0 : 1;
  }
  if (arguments.size() == 3) {
    const std::string& left = arguments[0];
    const std::string& op = arguments[1];
    const std::string& right = arguments[2];
    if (op == "=") return left == right ? 0 : 1;
    if (op == "!=") return left != right ? 0 : 1;
    const auto a = parse_integer(left);
    const auto b = parse_integer(right);
    if (!a || !b) {
      io.err += "test: integer expression expected\n";
      return 2;
    }
    if (op == "-eq") return *a == *b ? 0 : 1;
    if (op == "-ne") return *a != *b ? 0 : 1;
    if (op == "-lt") return *a < *b ? 0 : 1;
    if (op == "-le") return *a <= *b ? 0 : 1;
    if (op == "-gt") return *a > *b ? 0 : 1;
    if (op == "-ge") return *a >= *b ? 0 : 1;
    return usage(io, "test", "binary operator " + op);
  }
  return usage(io, "test", "more than three operands");
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

std::string wrap(const std::string& text, std::size_t columns) {
  if (columns == 0) return text.empty() ? text : text + "\n";
  std::string out;
  for (std::size_t i = 0; i < text.size(); i += columns) {
    out += text.substr(i, columns);
    out += '\n';
  }
  return out;
}

int run_base64(Emulator& emulator, Emulator::Frame& frame, const Arguments& arguments,
               Emulator::Io& io) {
  bool decode = false;
  std::size_t columns = 76;
  std::optional<std::string> file;
  for (std::size_t i = 1; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    if (argument == "-d" || argument == "--decode") {
      decode = true;
    } else if (argument == "-w" && i + 1 < arguments.size()) {
      const auto parsed = parse_integer(arguments[++i]);
      if (!parsed || *parsed < 0) return usage(io, "base64", "invalid wrap size");
      columns = static_cast<std::size_t>(*parsed);
    } else if (argument.rfind("-w", 0) == 0 && argument.size() > 2) {
      const auto parsed = parse_integer(argument.substr(2));
      if (!parsed || *parsed < 0) return usage(io, "base64", "invalid wrap size");
      columns = static_cast<std::size_t>(*parsed);
    } else if (argument == "-" || argument[0] != '-') {
      if (file) return usage(io, "base64", "more than one file");
      file = argument;
    } else {
      return usage(io, "base64", "option " + argument);
    }
  }
  std::string input;
  if (file && *file != "-") {
    if (const int error = emulator.read_bytes(frame.cwd, *file, input); error != 0) {
      return fail(io, "base64", *file, error);
    }
  } else {
    input = io.take_input(frame);
  }
  if (!decode) {
    io.out += wrap(base64_encode(input), columns);
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

int run_wc(Emulator& emulator, Emulator::Frame& frame, const Arguments& arguments,
           Emulator::Io& io) {
  std::string flags;
  Arguments operands;
  if (!parse_flags(arguments, "cl", flags, operands) || flags.empty() || flags.size() > 1) {
    return usage(io, "wc", "only one of -c or -l");
  }
  auto count = [&](const std::string& bytes) {
    return flags == "c" ? bytes.size()
                        : static_cast<std::size_t>(std::count(bytes.begin(), bytes.end(), '\n'));
  };
  if (operands.empty()) {
    io.out += std::to_string(count(io.take_input(frame))) + "\n";
    return 0;
  }
  int status = 0;
  for (const auto& operand : operands) {
    std::string content;
    if (const int error = emulator.read_bytes(frame.cwd, operand, content); error != 0) {
      status = fail(io, "wc", operand, error);
      continue;
    }
    io.out += std::to_string(count(content)) + " " + operand + "\n";
  }
  return status;
}

int run_head(Emulator& emulator, Emulator::Frame& frame, const Arguments& arguments,
             Emulator::Io& io) {
  std::optional<long long> bytes;
  std::optional<long long> lines;
  std::optional<std::string> file;
  for (std::size_t i = 1; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    if ((argument == "-c" || argument == "-n") && i + 1 < arguments.size()) {
      auto& target = argument == "-c" ? bytes : lines;
      target = parse_integer(arguments[++i]);
      if (!target || *target < 0) return usage(io, "head", "invalid count");
    } else if ((argument.rfind("-c", 0) == 0 || argument.rfind("-n", 0) == 0) &&
               argument.size() > 2) {
      auto& target = argument[1] == 'c' ? bytes : lines;
      target = parse_integer(argument.substr(2));
      if (!target || *target < 0) return usage(io, "head", "invalid count");
    } else if (argument == "-" || argument[0] != '-') {
      file = argument;
    } else {
      return usage(io, "head", "option " + argument);
    }
  }
  if (!bytes && !lines) lines = 10;
  std::string input;
  if (file && *file == "/dev/zero") {
    if (!bytes) return usage(io, "head", "lines of /dev/zero");
    io.out += std::string(static_cast<std::size_t>(*bytes), '\0');
    return 0;
  }
  if (file && *file != "-") {
    if (const int error = emulator.read_bytes(frame.cwd, *file, input); error != 0) {
      return fail(io, "head", *file, error);
    }
  } else {
    input = io.take_input(frame);
  }
  if (bytes) {
    io.out += input.substr(0, static_cast<std::size_t>(std::min<long long>(
                                  *bytes, static_cast<long long>(input.size()))));
    return 0;
  }
  std::size_t end = 0;
  for (long long n = 0; n < *lines && end < input.size(); ++n) {
    const std::size_t newline = input.find('\n', end);
    end = newline == std::string::npos ? input.size() : newline + 1;
  }
  io.out += input.substr(0, end);
  return 0;
}

int run_ln(Emulator& emulator, Emulator::Frame& frame, const Arguments& arguments,
           Emulator::Io& io) {
  std::string flags;
  Arguments operands;
  if (!parse_flags(arguments, "sfnT", flags, operands)) return usage(io, "ln", "an option");
  if (operands.size() != 2) return usage(io, "ln", "other than TARGET LINK_NAME");
  const bool no_dereference = has(flags, 'n') || has(flags, 'T');
  const int error = emulator.make_link(frame.cwd, operands[0], operands[1], has(flags, 's'),
                                       has(flags, 'f'), no_dereference);
  if (error != 0) return fail(io, "ln", operands[1], error);
  return 0;
}

int run_ls(Emulator& emulator, Emulator::Frame& frame, const Arguments& arguments,
           Emulator::Io& io) {
  std::string flags;
  Arguments operands;
  if (!parse_flags(arguments, "Aa1", flags, operands)) return usage(io, "ls", "an option");
  if (operands.empty()) operands.push_back(".");
  int status = 0;
  for (const auto& operand : operands) {
    std::vector<std::string> names;
    bool directory = false;
    const int error =
        emulator.list_names(frame.cwd, operand, !flags.empty() && flags != "1", names, directory);
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

int run_sh(Emulator& emulator, Emulator::Frame& frame, const Arguments& arguments,
           Emulator::Io& io) {
  if (arguments.size() < 3 || arguments[1] != "-c") return usage(io, "sh", "anything but -c");
  const auto script = emulation::parse_script(arguments[2]);
  if (!script || !emulation::script_is_emulated(*script)) {
    return usage(io, "sh", "this script's syntax or commands");
  }
  Emulator::Frame inner;
  inner.cwd = frame.cwd;
  inner.process_id = frame.process_id + 1;
  if (arguments.size() > 3) {
    inner.positional.assign(arguments.begin() + 3, arguments.end());
  } else {
    inner.positional.assign(1, "sh");
  }
  std::string input = io.input ? std::move(*io.input) : std::string();
  inner.shared_stdin = io.input ? &input : frame.shared_stdin;
  inner.out = [&io](std::string_view bytes) { io.out.append(bytes); };
  inner.err = [&io](std::string_view bytes) { io.err.append(bytes); };
  try {
    return emulator.run_script(*script, inner);
  } catch (const emulation::ScriptExit& exit) {
    return exit.code;
  }
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
    int code = frame.last_status;
    if (arguments.size() > 1) {
      const auto parsed = parse_integer(arguments[1]);
      if (!parsed) {
        io.err += "exit: illegal number: " + arguments[1] + "\n";
        code = 2;
      } else {
        code = static_cast<int>(*parsed & 0xFF);
      }
    }
    throw emulation::ScriptExit{code};
  }
  if (name == "printf") return run_printf(arguments, io);
  if (name == "echo") return run_echo(arguments, io);
  if (name == "pwd") {
    io.out += frame.cwd + "\n";
    return 0;
  }
  if (name == "test" || name == "[") {
    Arguments rest(arguments.begin() + 1, arguments.end());
    if (name == "[") {
      if (rest.empty() || rest.back() != "]") {
        io.err += "[: missing ]\n";
        return 2;
      }
      rest.pop_back();
    }
    return evaluate_test(*this, frame, std::move(rest), io);
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
  if (name == "cd") {
    if (arguments.size() != 2) return usage(io, "cd", "other than one directory");
    std::string next;
    if (const int error = change_directory(frame.cwd, arguments[1], next); error != 0) {
      return fail(io, "cd", arguments[1], error, 2);
    }
    frame.cwd = next;
    return 0;
  }
  if (name == "base64") return run_base64(*this, frame, arguments, io);
  if (name == "wc") return run_wc(*this, frame, arguments, io);
  if (name == "head") return run_head(*this, frame, arguments, io);
  if (name == "ls") return run_ls(*this, frame, arguments, io);
  if (name == "sh") return run_sh(*this, frame, arguments, io);
  io.err += name + ": not found\n";
  return 127;
}

}  // namespace airlock::testing
