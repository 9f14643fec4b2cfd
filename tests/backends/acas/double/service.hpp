// The double's service: the ACAS data plane of one sandbox group (each sandbox a real linux
// sandbox), the identity endpoints, and the /_double/ control API (faults, state, request log).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <vector>

#include "airlock/backend.hpp"
#include "airlock/json.hpp"
#include "http_server.hpp"

namespace airlock::acas_double {

inline constexpr const char* kApiVersion = "2026-02-01-preview";

// One row of the image table (--image NAME=LINUX_REF[,public][,id=ID][,base=REPO:TAG]
// [,file_owner=unmapped]).
struct ImageEntry {
  std::string name;
  std::string linux_image;  // what the linux backend runs: "host", a store reference, a rootfs
  bool is_public = false;   // listed in the public catalogue under `name`
  std::string id;           // an imported disk image's id ("" = not imported)
  std::string base;         // the imported image's base reference (REPO:TAG)
  bool unmapped_owner = false;  // the file API leaves what it creates owned by host root
};
ImageEntry parse_image_flag(const std::string& text);

struct ServiceConfig {
  std::string subscription = "00000000-0000-0000-0000-000000000000";
  std::string resource_group = "rg-double";
  std::string sandbox_group = "sg-double";
  std::string region = "local";
  std::string tenant = "00000000-0000-0000-0000-0000000000aa";
  std::string client_secret;         // "" = the secret grant is refused
  std::string federated_token_file;  // "" = the assertion grant is refused
  std::string identity_header;       // "" = the App-Service form is refused
  std::vector<std::string> accept_tokens;
  std::chrono::seconds token_lifetime{3600};
  std::chrono::seconds exec_timeout{600};
  int creating_polls = 2;
  int transient_404_polls = 1;
  int deleting_polls = 1;
  int page_size = 0;  // 0: a bare JSON array
  std::vector<ImageEntry> images;
};

class Service {
 public:
  Service(ServiceConfig config, std::shared_ptr<SandboxBackend> backend);
  ~Service();

  // The https endpoint (for nextLinks), known once the server listens.
  void set_endpoint(std::string endpoint) { endpoint_ = std::move(endpoint); }

  Response handle_https(const Request& request);
  Response handle_identity_http(const Request& request);

  // Cancels execs and delays in flight; disposes every sandbox this double created.
  void shut_down();

 private:
  struct Sandbox;
  struct Fault;
  struct Route {
    std::string name;               // "create", "get", …; "" when no route matches
    std::string sandbox_id;         // for sandbox-scoped routes
    bool in_group = false;          // under this double's group
    bool method_allowed = true;     // path known, method not: 405
  };

  Route classify(const Request& request) const;
  Response dispatch(const Request& request, const Route& route);
  std::optional<Response> apply_fault(const Request& request, const std::string& route);
  void log_request(const Request& request, const std::string& route, const Response& response);
  std::string authorization_kind(const Request& request);

  Response create(const Request& request);
  Response get(const std::string& id);
  Response list(const Request& request);
  Response remove(const std::string& id);
  Response lifecycle(const Request& request, const std::string& id);
  Response resume(const std::string& id);
  Response exec(const Request& request, const std::string& id);
  Response files(const Request& request, const Route& route);
  Response images_public();
  Response images();

  Response token(const Request& request, const std::string& tenant);
  Response imds(const Request& request);
  Response msi(const Request& request);
  std::string mint_token();

  Response control(const Request& request);

  json::Json sandbox_json(const Sandbox& sandbox) const;
  std::shared_ptr<Sandbox> running_sandbox(const std::string& id, Response& refusal);
  void dispose_linux(Sandbox& sandbox);
  // Sleeps `duration` unless the double stops first.
  void pause(std::chrono::milliseconds duration);

  ServiceConfig config_;
  std::shared_ptr<SandboxBackend> backend_;
  std::string endpoint_;
  std::string group_path_;
  std::stop_source stop_;

  std::mutex mutex_;  // guards everything below
  std::condition_variable wake_;
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
  std::vector<std::string> order_;  // creation order, for listing
  std::vector<Fault> faults_;
  json::Json requests_ = json::Json::array();
  std::map<std::string, std::chrono::system_clock::time_point> tokens_;
};

}  // namespace airlock::acas_double
