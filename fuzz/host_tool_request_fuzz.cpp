// A host-tool request as a guest program writes it (a request file, or a socket line): any bytes
// must end in an answer that is one JSON object — a value or a bounded refusal — or in nothing
// at all for an abandoned claim. The answer never carries a tool's exception text, and a body
// runs only with arguments that passed the door's checks.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "airlock/host_tools.hpp"
#include "airlock/json.hpp"
#include "core/host_tools/host_tool_internal.hpp"
#include "fuzz_check.hpp"

namespace {

using airlock::json::Json;

constexpr const char* kSecret = "the-body-threw-this-secret";

std::shared_ptr<airlock::HostToolRegistry> make_registry() {
  airlock::HostToolRegistryOptions options;
  options.max_dispatches_per_run = 4;
  options.response_limits.max_bytes_per_file = 4096;
  options.response_limits.max_total_bytes = 8192;
  auto registry = std::make_shared<airlock::HostToolRegistry>(options);
  airlock::HostTool echo;
  echo.name = "echo";
  echo.parameters = {{"text", airlock::ToolParameter::Type::string, true, ""},
                     {"times", airlock::ToolParameter::Type::integer, false, ""}};
  echo.body = [](const Json& arguments) {
    FUZZ_CHECK(arguments.is_object());
    FUZZ_CHECK(arguments.contains("text") && arguments["text"].is_string());
    for (const auto& [key, value] : arguments.items()) {
      FUZZ_CHECK(key == "text" || (key == "times" && value.is_number_integer()));
    }
    std::string out;
    const long long times = arguments.value("times", 1LL);
    for (long long i = 0; i < times && i < 64; ++i) out += arguments["text"].get<std::string>();
    return Json(out);
  };
  echo.declaration.emplace(airlock::SourceIntegrity::trusted, std::nullopt, airlock::Identity::app);
  registry->register_tool(echo);
  airlock::HostTool fails;
  fails.name = "fails";
  fails.body = [](const Json&) -> Json { throw std::runtime_error(kSecret); };
  fails.declaration.emplace(std::nullopt, std::nullopt, airlock::Identity::app);
  registry->register_tool(fails);
  registry->aggregate();
  return registry;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::shared_ptr<airlock::HostToolRegistry> registry = make_registry();
  const std::string request(reinterpret_cast<const char*>(data), size);
  airlock::HostToolRun run(registry);
  // Twice over one run: the second answer meets a run that has already counted the first.
  for (int round = 0; round < 2; ++round) {
    const std::optional<std::string> answer = airlock::answer_request(run, false, request);
    if (!answer) continue;
    const Json parsed = Json::parse(*answer);  // throws (a crash here) if not JSON
    FUZZ_CHECK(parsed.is_object() && parsed.size() == 1);
    FUZZ_CHECK(parsed.contains("value") || parsed.contains("refusal"));
    // (Unless the guest sent the words itself, for `echo` to hand back.)
    FUZZ_CHECK(answer->find(kSecret) == std::string::npos ||
               request.find(kSecret) != std::string::npos);
  }
  FUZZ_CHECK(run.dispatched() <= 4);
  const std::optional<std::string> refused = airlock::answer_request(run, true, request);
  FUZZ_CHECK(refused && Json::parse(*refused).contains("refusal"));
  return 0;
}
