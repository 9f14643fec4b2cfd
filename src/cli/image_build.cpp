#include "cli/image_build.hpp"

#include <curl/curl.h>
#include <elf.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "airlock/errors.hpp"
#include "airlock/json.hpp"

extern char** environ;

namespace airlock::cli {
namespace {

namespace fs = std::filesystem;

std::string errno_text(int error) {
  return std::strerror(error);
}

// Runs argv[0] (looked up in $PATH) with stdin from /dev/null and both outputs into `log`;
// returns its exit status (128 + N for a signal).
int run_program(const std::vector<std::string>& argv, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> words;
  for (const auto& word : argv) words.push_back(const_cast<char*>(word.c_str()));
  words.push_back(nullptr);
  pid_t child = 0;
  const int spawned = ::posix_spawnp(&child, words[0], &actions, nullptr, words.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    throw SystemError("image build: cannot run " + argv[0] + ": " + errno_text(spawned), spawned);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) throw SystemError("image build: waitpid", errno);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string tail_of(const fs::path& log, std::size_t lines) {
  std::ifstream file(log);
  std::deque<std::string> last;
  for (std::string line; std::getline(file, line);) {
    last.push_back(line);
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (const auto& line : last) out += "\n  " + line;
  return out;
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream directories(path != nullptr ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
  for (std::string directory; std::getline(directories, directory, ':');) {
    if (!directory.empty() && ::access((fs::path(directory) / program).c_str(), X_OK) == 0) {
      return true;
    }
  }
  return false;
}

// A dynamically linked busybox would not run in a root holding nothing but itself.
bool statically_linked(const fs::path& binary) {
  std::ifstream file(binary, std::ios::binary);
  Elf64_Ehdr header{};
  if (!file.read(reinterpret_cast<char*>(&header), sizeof header)) return false;
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) return false;
  if (header.e_ident[EI_CLASS] != ELFCLASS64) return true;  // not ours to judge; let it run
  for (unsigned i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr program{};
    file.seekg(static_cast<std::streamoff>(header.e_phoff + i * header.e_phentsize));
    if (!file.read(reinterpret_cast<char*>(&program), sizeof program)) return false;
    if (program.p_type == PT_INTERP) return false;
  }
  return true;
}

void write_text(const fs::path& path, const std::string& text, mode_t mode) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
  file.close();
  if (!file || ::chmod(path.c_str(), mode) != 0) {
    throw SystemError("image build: cannot write " + path.string(), errno);
  }
}

void build_busybox(const fs::path& root, const std::function<void(const std::string&)>& say) {
  const fs::path busybox = "/bin/busybox";
  if (::access(busybox.c_str(), X_OK) != 0 || !statically_linked(busybox)) {
    throw NotSupported(
        "image build busybox: no statically linked /bin/busybox on this host; install "
        "busybox-static (apt-get install busybox-static)");
  }
  say("building busybox from " + busybox.string());
  for (const char* directory : {"bin", "dev", "etc", "proc", "root", "sys", "tmp", "usr"}) {
    fs::create_directories(root / directory);
  }
  fs::copy_file(busybox, root / "bin/busybox", fs::copy_options::overwrite_existing);
  std::unique_ptr<FILE, int (*)(FILE*)> list(::popen("/bin/busybox --list", "r"), ::pclose);
  if (!list) throw SystemError("image build: cannot run /bin/busybox --list", errno);
  char line[256];
  std::size_t applets = 0;
  while (std::fgets(line, sizeof line, list.get()) != nullptr) {
    std::string applet(line);
    while (!applet.empty() && (applet.back() == '\n' || applet.back() == '\r')) applet.pop_back();
    // "busybox" itself is skipped: the link would replace the binary with a loop.
    if (applet.empty() || applet == "busybox" || applet.find('/') != std::string::npos) continue;
    std::error_code exists;
    if (fs::is_symlink(root / "bin" / applet, exists)) continue;
    fs::create_symlink("busybox", root / "bin" / applet);
    ++applets;
  }
  if (applets == 0) throw BackendError("image build busybox: /bin/busybox --list named no applet");
  fs::create_symlink("../bin", root / "usr/bin");
  fs::create_symlink("bin", root / "sbin");
  write_text(root / "etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", 0644);
  write_text(root / "etc/group", "root:x:0:\n", 0644);
  for (const char* directory : {"", "bin", "dev", "etc", "proc", "sys", "usr"}) {
    ::chmod((root / directory).c_str(), 0755);
  }
  ::chmod((root / "bin/busybox").c_str(), 0755);
  ::chmod((root / "root").c_str(), 0700);
  ::chmod((root / "tmp").c_str(), 01777);
}

std::string host_codename() {
  std::ifstream release("/etc/os-release");
  for (std::string line; std::getline(release, line);) {
    if (line.rfind("VERSION_CODENAME=", 0) == 0) {
      std::string value = line.substr(17);
      value.erase(std::remove(value.begin(), value.end(), '"'), value.end());
      if (!value.empty()) return value;
    }
  }
  return {};
}

std::vector<std::string> words_of(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

// The mirror this host's apt already uses for `suite`: a deb822 debian.sources first, then
// sources.list. Never a host of our choosing.
std::string debian_mirror(const std::string& suite) {
  std::ifstream sources("/etc/apt/sources.list.d/debian.sources");
  if (sources) {
    std::string uris, suites, types;
    auto matches = [&] {
      const auto has = [](const std::string& list, const std::string& word) {
        const auto all = words_of(list);
        return std::find(all.begin(), all.end(), word) != all.end();
      };
      return has(types, "deb") && has(suites, suite) && !words_of(uris).empty();
    };
    for (std::string line;;) {
      const bool more = static_cast<bool>(std::getline(sources, line));
      if (!more || line.find_first_not_of(" \t") == std::string::npos) {
        if (matches()) return words_of(uris).front();
        uris.clear(), suites.clear(), types.clear();
        if (!more) break;
        continue;
      }
      if (line.rfind("URIs:", 0) == 0) uris = line.substr(5);
      if (line.rfind("Suites:", 0) == 0) suites = line.substr(7);
      if (line.rfind("Types:", 0) == 0) types = line.substr(6);
    }
  }
  std::ifstream list("/etc/apt/sources.list");
  for (std::string line; std::getline(list, line);) {
    auto words = words_of(line);
    if (words.empty() || words[0] != "deb") continue;
    std::size_t at = 1;
    if (at < words.size() && words[at].front() == '[') {
      while (at < words.size() && words[at].back() != ']') ++at;
      ++at;
    }
    if (at + 1 < words.size() && words[at + 1] == suite) return words[at];
  }
  return {};
}

void build_python(const fs::path& root, const fs::path& scratch,
                  const std::function<void(const std::string&)>& say) {
  if (::geteuid() != 0) {
    throw NotSupported(
        "image build python: debootstrap needs root (run it as root, or import "
        "a root filesystem you have with `airlock image import`)");
  }
  if (!on_path("debootstrap")) {
    throw NotSupported(
        "image build python: debootstrap is not installed (apt-get install "
        "debootstrap)");
  }
  std::string codename = host_codename();
  if (codename.empty()) codename = "bookworm";
  const std::string mirror = debian_mirror(codename);
  if (mirror.empty()) {
    throw NotSupported("image build python: this host's apt has no '" + codename +
                       "' deb source (/etc/apt/sources.list.d/debian.sources, "
                       "/etc/apt/sources.list) to build from");
  }
  say("building python: debootstrap --variant=minbase --include=python3 " + codename + " from " +
      mirror + " (a few minutes)");
  const fs::path log = scratch / "debootstrap.log";
  const int status = run_program(
      {"debootstrap", "--variant=minbase", "--include=python3", codename, root.string(), mirror},
      log);
  if (status != 0) {
    throw BackendError("image build python: debootstrap exited " + std::to_string(status) +
                       "; the end of its log:" + tail_of(log, 25));
  }
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(root / "var/cache/apt/archives", ignored)) {
    if (entry.path().extension() == ".deb") fs::remove(entry.path(), ignored);
  }
}

size_t append_body(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

size_t read_file(char* buffer, size_t size, size_t count, void* file) {
  return std::fread(buffer, size, count, static_cast<FILE*>(file));
}

}  // namespace

std::string default_store_reference(const std::string& recipe) {
  return recipe + ":latest";
}

std::string default_engine_tag(const std::string& recipe) {
  return "airlock/" + recipe + ":latest";
}

BuiltRootfs::BuiltRootfs() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = (tmp != nullptr && *tmp == '/' ? std::string(tmp) : std::string("/tmp")) +
                        "/airlock-image-build-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw SystemError("image build: cannot make a temporary directory from " + pattern, errno);
  }
  scratch_ = pattern;
  rootfs_ = scratch_ / "rootfs";
  fs::create_directory(rootfs_);
}

BuiltRootfs::~BuiltRootfs() {
  // debootstrap mounts /proc and /sys (and may bind /dev) in its target: detach anything still
  // mounted beneath the scratch directory, deepest first, so removing it never crosses into one.
  std::vector<std::string> mounts;
  std::ifstream table("/proc/self/mounts");
  const std::string prefix = scratch_.string() + "/";
  for (std::string line; std::getline(table, line);) {
    const auto fields = words_of(line);
    if (fields.size() > 1 && fields[1].rfind(prefix, 0) == 0) mounts.push_back(fields[1]);
  }
  std::sort(mounts.rbegin(), mounts.rend());
  for (const auto& mount : mounts) ::umount2(mount.c_str(), MNT_DETACH);
  std::error_code ignored;
  fs::remove_all(scratch_, ignored);
}

void build_rootfs(const std::string& recipe, const BuiltRootfs& out,
                  const std::function<void(const std::string&)>& say) {
  if (recipe == "busybox") return build_busybox(out.rootfs(), say);
  if (recipe == "python") return build_python(out.rootfs(), out.scratch(), say);
  throw InvalidArgument(
      "image build: unknown image '" + recipe + "' (known: " + kBuildableImages + ")", "image");
}

std::string import_into_engine(const fs::path& rootfs, const std::string& host,
                               const std::string& tag, const BuiltRootfs& scratch) {
  if (host.rfind("unix://", 0) != 0) {
    throw NotSupported(
        "image build --docker: only a local engine (unix://PATH) is supported, "
        "not '" +
        host + "'");
  }
  const std::string socket = host.substr(7);
  const auto colon = tag.rfind(':');
  const auto slash = tag.rfind('/');
  const bool tagged = colon != std::string::npos && (slash == std::string::npos || colon > slash);
  const std::string repository = tagged ? tag.substr(0, colon) : tag;
  const std::string version = tagged ? tag.substr(colon + 1) : "latest";

  const fs::path archive = scratch.scratch() / "rootfs.tar";
  const fs::path log = scratch.scratch() / "tar.log";
  if (run_program({"tar", "--numeric-owner", "--sort=name", "-C", rootfs.string(), "-cf",
                   archive.string(), "."},
                  log) != 0) {
    throw BackendError("image build: tar could not pack the root filesystem:" + tail_of(log, 10));
  }
  std::unique_ptr<FILE, int (*)(FILE*)> body(std::fopen(archive.c_str(), "rb"), std::fclose);
  if (!body) throw SystemError("image build: cannot read " + archive.string(), errno);
  std::error_code size_error;
  const auto size = fs::file_size(archive, size_error);

  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) throw BackendError("image build: libcurl could not start");
  auto escaped = [&](const std::string& text) {
    std::unique_ptr<char, void (*)(void*)> out(
        curl_easy_escape(curl.get(), text.c_str(), static_cast<int>(text.size())), curl_free);
    return std::string(out ? out.get() : "");
  };
  const std::string url = "http://engine/images/create?fromSrc=-&repo=" + escaped(repository) +
                          "&tag=" + escaped(version);
  std::string response;
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> headers(
      curl_slist_append(nullptr, "Content-Type: application/x-tar"), curl_slist_free_all);
  curl_easy_setopt(curl.get(), CURLOPT_UNIX_SOCKET_PATH, socket.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_POST, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(curl.get(), CURLOPT_READFUNCTION, read_file);
  curl_easy_setopt(curl.get(), CURLOPT_READDATA, body.get());
  curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(size));
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &response);
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
  const CURLcode result = curl_easy_perform(curl.get());
  if (result != CURLE_OK) {
    throw BackendError("image build --docker: cannot reach the container engine at " + host + ": " +
                       curl_easy_strerror(result) +
                       " (start it, or name another with --docker-host)");
  }
  long status = 0;
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
  // The import answers 200 and reports failure inside its progress stream.
  std::string failure;
  std::string id;
  std::istringstream lines(response);
  for (std::string line; std::getline(lines, line);) {
    const auto document = json::Json::parse(line, nullptr, false);
    if (!document.is_object()) continue;
    if (document.contains("error")) failure = document["error"].dump();
    if (document.contains("message") && status != 200) failure = document["message"].dump();
    if (document.contains("status") && document["status"].is_string()) {
      id = document["status"].get<std::string>();
    }
  }
  if (status != 200 || !failure.empty()) {
    throw BackendError("image build --docker: the engine refused the import (HTTP " +
                       std::to_string(status) + "): " + (failure.empty() ? response : failure));
  }
  return id;
}

}  // namespace airlock::cli
