// The in-process sandbox's command emulator: a small POSIX shell and utility set run over the
// in-memory filesystem (the vocabulary is listed in airlock/testing.hpp).
//
// It exists so the conformance suites and the shell roads can attack the in-process backend for
// real: the emulated commands work on the very nodes the file plane serves, links resolve the
// way a guest's kernel would resolve them (a `cat` of a link reads its target *inside* the
// emulated filesystem), `sleep` honours the caller's timeout, and the output ceiling of a
// bounded exec is enforced. It emulates what those suites and the tree's tests run, no more: a
// test that needs another command or option adds it here, with a test of its own.
//
// The whole script is parsed before anything runs. A script that uses syntax or a command the
// emulator does not know is not run at all (`run` returns nullopt), so the sandbox falls back to
// its scripted answers instead of half-running a command line.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "airlock/testing.hpp"

namespace airlock::testing {

// Path arithmetic on the in-memory tree, whose paths are always absolute and normalized.
inline std::string parent_of(const std::string& absolute) {
  const auto slash = absolute.rfind('/');
  if (slash == 0 || slash == std::string::npos) return "/";
  return absolute.substr(0, slash);
}

// True when `path` is strictly below `directory`.
inline bool is_under(const std::string& path, const std::string& directory) {
  if (directory == "/") return path.size() > 1 && path.front() == '/';
  return path.size() > directory.size() && path.compare(0, directory.size(), directory) == 0 &&
         path[directory.size()] == '/';
}

// strerror's text without its thread-safety caveats.
inline std::string errno_text(int error) {
  return std::generic_category().message(error);
}

namespace emulation {

// One piece of a word: literal text, or a positional or special parameter inside double quotes
// ("$0"…"$9", "$$").
struct WordPart {
  enum class Kind { literal, parameter };
  Kind kind = Kind::literal;
  std::string text;  // the literal, or the parameter's name ("0"…"9", "$")
  bool quoted = false;
};

// A word expands to exactly one field: the subset has no unquoted expansion to split.
struct Word {
  std::vector<WordPart> parts;
  // The word's text when it has no expansions; nullopt otherwise.
  std::optional<std::string> literal() const;
};

struct Redirection {
  enum class Operation { write, append, read, duplicate };
  int fd = 1;  // 0 for a read, 1 otherwise: explicit descriptors (`2>`) are not emulated
  Operation operation = Operation::write;
  Word target;           // write/append/read
  int duplicate_of = 1;  // duplicate: `>&duplicate_of`
};

struct SimpleCommand {
  std::vector<Word> words;
  std::vector<Redirection> redirections;
};

struct Pipeline {
  std::vector<SimpleCommand> commands;
};

// Pipelines joined by `&&`: the first that fails ends the list.
struct AndList {
  std::vector<Pipeline> pipelines;
};

struct Script {
  std::vector<AndList> lists;
};

// Parses `text` as a script of the emulated subset: words with '…' and "…" quoting, the
// parameters above, `;` and newlines, `&&`, `|`, and redirections `>`, `>>`, `<`, `>&M`.
// nullopt for anything else (command substitution, parameters outside double quotes or by name,
// backslashes, globs, comments, `||`, `!`, compound commands, background jobs, here-documents,
// explicit descriptors, assignments).
std::optional<Script> parse_script(std::string_view text);

// `exit N` unwinds to the script that runs it.
struct ScriptExit {
  int code;
};

// A signal from `ExecOptions::control` whose default action ends a process unwinds the whole
// exec: its status is 128 + the signal's number.
struct KilledBySignal {
  int number;
};

// Whether a signal's default action ends a process (SIGWINCH, SIGCONT, SIGCHLD… do not;
// SIGSTOP/SIGTSTP stop rather than end one, and the emulator has no stopped state).
bool signal_ends_a_process(int number);

// Whether `name` is a command the emulator runs inside a script (`sh` is not: only the exec's
// own `sh -c SCRIPT` is).
bool is_emulated_command(std::string_view name);

// Whether every command of `script` is emulated (checked before anything runs).
bool script_is_emulated(const Script& script);

}  // namespace emulation

class InProcessSandbox::Emulator {
 public:
  Emulator(InProcessSandbox& sandbox, const ExecOptions& options);
  // nullopt when the command is outside the emulated vocabulary (the scripted answer applies).
  // Throws Timeout when the caller's timeout expires (or `stop` is requested),
  // ExecOutputLimitExceeded when a refusing output ceiling is passed, and NotFound when the
  // working directory does not exist. A signal queued on `options.control` that ends a process
  // ends the command with 128 + its number (checked at every command and while sleeping).
  std::optional<ExecResult> run(const Command& command);

  // One running script: its parameters, directory, and where its output goes.
  struct Frame {
    std::vector<std::string> positional;  // [0] is $0
    std::string cwd;
    std::function<void(std::string_view)> out;
    std::function<void(std::string_view)> err;
    std::string* shared_stdin = nullptr;  // the exec's stdin, consumed by the first reader
    long process_id = 0;                  // $$: distinct for every exec
  };
  // One command's streams. `input` is piped or redirected stdin (nullopt: the frame's).
  struct Io {
    std::optional<std::string> input;
    std::string out;
    std::string err;
    std::string take_input(Frame& frame);
  };

  int run_script(const emulation::Script& script, Frame& frame);
  int run_command(const std::vector<std::string>& arguments, Io& io, Frame& frame);
  void check_deadline();
  void check_signals();
  void sleep_for(std::chrono::nanoseconds duration);
  [[noreturn]] void block_until_deadline();

  // ---- the emulated filesystem (each call takes the sandbox's lock) -------------------------
  // Every call returns 0 or an errno, resolving `path` against `cwd` the way a guest kernel
  // would: links in parents are followed inside the emulated filesystem, search permission is
  // needed on every directory passed, names over 255 bytes and paths of 4096 bytes or more are
  // ENAMETOOLONG. The guest is an unprivileged user owning every node: r/w/x are the owner bits.
  struct Facts {
    bool exists = false;
    bool is_file = false;
    bool is_directory = false;
    bool is_link = false;
    bool readable = false;
    bool writable = false;
    bool executable = false;
    std::uint64_t size = 0;
  };
  Facts facts(const std::string& cwd, const std::string& path, bool follow);
  // Reads a file's bytes. A FIFO blocks until the deadline (Timeout), as with no writer.
  int read_bytes(const std::string& cwd, const std::string& path, std::string& out);
  // Opens for writing (creating, and truncating unless appending); `absolute` receives where
  // the bytes go. Then append_bytes writes them there.
  int open_for_write(const std::string& cwd, const std::string& path, bool truncate,
                     std::string& absolute);
  void append_bytes(const std::string& absolute, std::string_view bytes);
  int make_directory(const std::string& cwd, const std::string& path, bool parents);
  int remove_path(const std::string& cwd, const std::string& path, bool recursive, bool force);
  int rename_path(const std::string& cwd, const std::string& from, const std::string& to);
  int make_link(const std::string& cwd, const std::string& target, const std::string& link,
                bool symbolic, bool force, bool no_dereference);
  int make_fifo(const std::string& cwd, const std::string& path);
  int change_mode(const std::string& cwd, const std::string& path, unsigned mode);
  int list_names(const std::string& cwd, const std::string& path, bool all,
                 std::vector<std::string>& names, bool& is_directory);

 private:
  struct Lookup {
    int error = 0;
    std::string path;               // where the entry is (or would be created)
    std::optional<EntryKind> kind;  // nullopt: nothing there
  };
  Lookup lookup(const std::string& cwd, std::string_view path, bool follow_final) const;
  unsigned mode_of(const std::string& absolute) const;
  bool writable_directory(const std::string& absolute) const;
  void erase_tree(const std::string& absolute);

  InProcessSandbox& sandbox_;
  const ExecOptions& options_;
  std::chrono::steady_clock::time_point deadline_;
  std::string stdout_;
  std::string stderr_;
  bool truncated_ = false;

  void emit(std::string& stream, std::string_view bytes);
};

}  // namespace airlock::testing
