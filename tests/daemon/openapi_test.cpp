// docs/api/openapi.yaml must describe exactly the routes the daemon serves: every route in the
// table is documented with its method, and nothing documented is missing from the table.
#include <fstream>
#include <set>
#include <sstream>

#include "daemon/api.hpp"
#include "daemon/support.hpp"

#ifndef AIRLOCK_SOURCE_DIR
#error "AIRLOCK_SOURCE_DIR must name the source tree"
#endif

namespace airlock::daemon::test {
namespace {

using Operation = std::pair<std::string, std::string>;  // (METHOD, /path/{param})

// The (method, path) pairs under `paths:` — a path at two spaces, its operations at four.
std::set<Operation> documented_operations(const std::string& yaml) {
  std::set<Operation> operations;
  std::istringstream lines(yaml);
  std::string line;
  bool in_paths = false;
  std::string current;
  while (std::getline(lines, line)) {
    if (line.rfind("paths:", 0) == 0) {
      in_paths = true;
      continue;
    }
    if (!in_paths) continue;
    if (!line.empty() && line[0] != ' ' && line[0] != '#') break;  // the next top-level key
    if (line.rfind("  /", 0) == 0 && line.back() == ':') {
      current = line.substr(2, line.size() - 3);
      continue;
    }
    for (const char* method : {"get", "put", "post", "delete", "patch"}) {
      if (line == std::string("    ") + method + ":" && !current.empty()) {
        std::string upper(method);
        for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        operations.emplace(upper, current);
      }
    }
  }
  return operations;
}

TEST(DaemonOpenApi, EveryRouteIsDocumentedAndEveryDocumentedRouteExists) {
  std::ifstream file(std::string(AIRLOCK_SOURCE_DIR) + "/docs/api/openapi.yaml");
  ASSERT_TRUE(file) << "docs/api/openapi.yaml is missing";
  std::stringstream text;
  text << file.rdbuf();
  ASSERT_EQ(text.str().rfind("openapi: 3.", 0), 0u) << "an OpenAPI 3 document";
  const auto documented = documented_operations(text.str());

  auto backend = std::make_shared<ScriptedBackend>();
  RouterOptions options;
  options.min_isolation = Isolation::container;
  SandboxRouter router({backend}, options);
  TempDir state;
  HandleStore store(state.path());
  Metrics metrics;
  Api api(router, store, metrics, ApiLimits{});
  RouteTable table;
  api.add_routes(table);

  std::set<Operation> served;
  for (const auto& route : table.routes()) served.emplace(route.method, route.pattern);
  ASSERT_GE(served.size(), 15u);
  for (const auto& operation : served) {
    EXPECT_TRUE(documented.contains(operation))
        << operation.first << " " << operation.second << " is served but not documented";
  }
  for (const auto& operation : documented) {
    EXPECT_TRUE(served.contains(operation))
        << operation.first << " " << operation.second << " is documented but not served";
  }
}

}  // namespace
}  // namespace airlock::daemon::test
