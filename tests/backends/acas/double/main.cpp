// airlock-acas-double: a local, faithful stand-in for the Azure Container Apps Sandboxes data
// plane (api-version 2026-02-01-preview) and the Azure identity endpoints, for tests only. Each
// sandbox it serves is a real airlock `linux` sandbox. See README.md beside this file.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "airlock/backend_factory.hpp"
#include "backends/linux/tree_removal.hpp"
#include "http_server.hpp"
#include "service.hpp"

extern char** environ;

namespace {

using airlock::acas_double::HttpServer;
using airlock::acas_double::Request;
using airlock::acas_double::Service;
using airlock::acas_double::ServiceConfig;
using airlock::acas_double::TlsFiles;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// A self-signed certificate for IP 127.0.0.1 (its own CA: the ready line names it as ca_file),
// made with the openssl CLI so that nothing here handles key material by hand.
TlsFiles make_certificate(const std::filesystem::path& directory) {
  const std::string key = (directory / "key.pem").string();
  const std::string cert = (directory / "ca.pem").string();
  std::vector<std::string> arguments = {
      "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
      "-nodes", "-keyout", key, "-out", cert, "-days", "7", "-subj", "/CN=127.0.0.1",
      "-addext", "subjectAltName=IP:127.0.0.1", "-addext", "basicConstraints=critical,CA:TRUE",
      "-addext", "keyUsage=critical,digitalSignature,keyCertSign"};
  std::vector<char*> argv;
  for (auto& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t child = 0;
  const int spawned = ::posix_spawnp(&child, "openssl", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) throw std::runtime_error(std::string("cannot run openssl: ") + std::strerror(spawned));
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error("openssl req failed to make the certificate");
  }
  return TlsFiles{read_file(cert), read_file(key)};
}

void remove_directory(const std::filesystem::path& path) {
  const int parent = ::open(path.parent_path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (parent < 0) return;
  (void)airlock::linux_backend::remove_tree(parent, path.filename().string());
  ::close(parent);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"airlock-acas-double: the ACAS data plane and Azure identity endpoints, locally"};
  ServiceConfig config;
  std::string state_dir;
  int port = 0;
  int identity_port = 0;
  std::vector<std::string> image_flags;
  std::string default_linux_image = "host";
  bool exit_on_stdin_eof = false;
  std::string linux_config = "{}";
  long exec_timeout = 600;
  long token_lifetime = 3600;
  app.add_option("--port", port, "https port (0: ephemeral)");
  app.add_option("--identity-port", identity_port, "plain http port for IMDS/MSI (0: ephemeral)");
  app.add_option("--state-dir", state_dir,
                 "the linux backend's state directory (purged on exit; default: a private one)");
  app.add_option("--subscription", config.subscription);
  app.add_option("--resource-group", config.resource_group);
  app.add_option("--sandbox-group", config.sandbox_group);
  app.add_option("--region", config.region, "the region sandboxes report");
  app.add_option("--tenant", config.tenant, "the only tenant the token endpoint serves");
  app.add_option("--client-secret", config.client_secret, "the secret a client-credentials grant needs");
  app.add_option("--federated-token-file", config.federated_token_file,
                 "a file whose content is the only accepted client_assertion");
  app.add_option("--identity-header", config.identity_header,
                 "the X-IDENTITY-HEADER value the App-Service MSI form needs");
  app.add_option("--accept-token", config.accept_tokens, "a bearer token always accepted (repeatable)");
  app.add_option("--token-lifetime-seconds", token_lifetime);
  app.add_option("--exec-timeout-seconds", exec_timeout, "server-side limit of one exec");
  app.add_option("--creating-polls", config.creating_polls, "GETs that show Creating");
  app.add_option("--transient-404-polls", config.transient_404_polls,
                 "GETs right after create that answer 404");
  app.add_option("--deleting-polls", config.deleting_polls, "GETs that show Deleting");
  app.add_option("--page-size", config.page_size, "page list answers as {value, nextLink}");
  app.add_option("--image", image_flags,
                 "NAME=LINUX_REF[,public][,id=ID][,base=REPO:TAG][,file_owner=unmapped] (repeatable)");
  app.add_option("--default-linux-image", default_linux_image,
                 "what the default image airlock-busybox runs (when no --image is given)");
  app.add_flag("--exit-on-stdin-eof", exit_on_stdin_eof, "exit (cleanly) when stdin closes");
  app.add_option("--linux-config", linux_config,
                 "more of the linux backend's configuration, a JSON object (the egress suite's "
                 "test-only non-global ranges and ports, say)");
  CLI11_PARSE(app, argc, argv);
  config.exec_timeout = std::chrono::seconds(exec_timeout);
  config.token_lifetime = std::chrono::seconds(token_lifetime);

  // Signals are taken by sigwait below, never by a handler on some server thread.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  std::string scratch_template = "/tmp/airlock-acas-double-XXXXXX";
  if (::mkdtemp(scratch_template.data()) == nullptr) {
    std::cerr << "acas-double: mkdtemp: " << std::strerror(errno) << "\n";
    return 1;
  }
  const std::filesystem::path scratch = scratch_template;
  int status = 0;
  try {
    for (const auto& flag : image_flags) {
      config.images.push_back(airlock::acas_double::parse_image_flag(flag));
    }
    if (config.images.empty()) {
      airlock::acas_double::ImageEntry busybox;
      busybox.name = "airlock-busybox";
      busybox.linux_image = default_linux_image;
      busybox.is_public = true;
      config.images.push_back(busybox);
    }
    if (state_dir.empty()) {
      state_dir = (scratch / "state").string();
      ::mkdir(state_dir.c_str(), 0700);
    }
    const TlsFiles tls = make_certificate(scratch);
    auto linux_settings = airlock::json::Json::parse(linux_config, nullptr, false);
    if (!linux_settings.is_object()) throw std::runtime_error("--linux-config: expected a JSON object");
    linux_settings["state_dir"] = state_dir;
    auto backend = airlock::make_backend("linux", linux_settings, "--linux-config");
    Service service(config, backend);
    HttpServer https([&service](const Request& request) { return service.handle_https(request); },
                     static_cast<std::uint16_t>(port), tls, std::uint64_t{256} << 20);
    HttpServer identity(
        [&service](const Request& request) { return service.handle_identity_http(request); },
        static_cast<std::uint16_t>(identity_port), std::nullopt, std::uint64_t{1} << 20);
    const std::string endpoint = "https://127.0.0.1:" + std::to_string(https.port());
    service.set_endpoint(endpoint);
    const airlock::json::Json ready = {
        {"endpoint", endpoint},
        {"identity_http", "http://127.0.0.1:" + std::to_string(identity.port())},
        {"ca_file", (scratch / "ca.pem").string()},
        {"state_dir", state_dir},
        {"pid", ::getpid()}};
    std::cout << ready.dump() << std::endl;

    if (exit_on_stdin_eof) {
      std::thread([] {
        char buffer[256];
        for (;;) {
          const ssize_t got = ::read(0, buffer, sizeof buffer);
          if (got == 0 || (got < 0 && errno != EINTR)) break;
        }
        ::kill(::getpid(), SIGTERM);
      }).detach();
    }
    int received = 0;
    sigwait(&stop_signals, &received);
    std::cerr << "acas-double: stopping (signal " << received << ")\n";
    service.shut_down();
    https.stop();
    identity.stop();
    const int purged = backend->purge_all();
    std::cerr << "acas-double: purged " << purged << " linux sandbox(es)\n";
  } catch (const std::exception& failure) {
    std::cerr << "acas-double: " << failure.what() << "\n";
    status = 1;
  }
  remove_directory(scratch);
  std::cout.flush();
  std::cerr.flush();
  // The stdin watcher may still be blocked in read(): leave without running static destructors
  // under it.
  ::_exit(status);
}
