// Backends by type name, for the CLI, the daemon and the bindings: configuration is data.
//
// A backend registers a factory once (at static initialisation, in its own source file); a host
// builds backends and routers from JSON without including any backend's header:
//
//   {"backends": [{"type": "linux", "state_dir": "/var/lib/airlock"}],
//    "min_isolation": "container", "selected": "linux",
//    "denied_capabilities": ["host_tools"], "denied_identities": ["user"]}
//
// Every key is checked: an unknown backend type or an unknown key is an InvalidArgument naming it.
// The known types are the backends linked into this program: libairlock's own (each enforces the
// rung it declares), plus any a program adds, such as the in-process `testing` fake a test
// links (airlock::testing) — a shipped program has no such type.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/json.hpp"
#include "airlock/router.hpp"

namespace airlock {

// Builds a backend from its configuration object (the "type" key already removed). Must refuse
// unknown keys with an InvalidArgument naming `where` + the key.
using BackendFactory = std::function<std::shared_ptr<SandboxBackend>(const json::Json& config,
                                                                     std::string_view where)>;

// Returns true so it can initialise a namespace-scope constant in the backend's source file.
bool register_backend_factory(std::string type, std::string description, BackendFactory factory);

struct BackendType {
  std::string type;
  std::string description;
};
std::vector<BackendType> backend_types();

std::shared_ptr<SandboxBackend> make_backend(std::string_view type,
                                             const json::Json& config = json::Json::object(),
                                             std::string_view where = "backend");

// A router from a configuration document (see above). `where` prefixes error paths.
std::unique_ptr<SandboxRouter> make_router(const json::Json& config,
                                           std::string_view where = "config");

}  // namespace airlock
