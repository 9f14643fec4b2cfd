// The acas backend's configuration and the pieces of its data plane that need no service.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "airlock/backend_factory.hpp"
#include "airlock/backends/acas.hpp"
#include "airlock/errors.hpp"
#include "backends/acas/data_plane.hpp"

namespace airlock::acas {
namespace {

using nlohmann::json;

json minimal() {
  return {{"endpoint", "https://management.westus2.azuredevcompute.io/"},
          {"subscription_id", "00000000-0000-0000-0000-000000000000"},
          {"resource_group", "rg"},
          {"sandbox_group", "sg"}};
}

std::string refusal(const json& config) {
  try {
    (void)parse_acas_config(config, "acas");
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return "";
}

TEST(AcasConfig, TheSeedsDefaultsHoldWhenOnlyTheGroupIsNamed) {
  const AcasConfig config = parse_acas_config(minimal(), "acas");
  EXPECT_EQ(config.endpoint, "https://management.westus2.azuredevcompute.io") << "trailing / dropped";
  EXPECT_EQ(config.auto_suspend.count(), 60);
  EXPECT_EQ(config.auto_delete.count(), 600);
  EXPECT_EQ(config.read_timeout.count(), 120'000);
  EXPECT_EQ(config.api_version, "2026-02-01-preview");
  EXPECT_EQ(config.token_scope, "https://dynamicsessions.io/.default");
}

TEST(AcasConfig, EveryRequiredFieldIsNamedWhenMissing) {
  for (const char* field : {"endpoint", "subscription_id", "resource_group", "sandbox_group"}) {
    json config = minimal();
    config.erase(field);
    EXPECT_NE(refusal(config).find(std::string("acas.") + field), std::string::npos) << field;
  }
}

TEST(AcasConfig, AnEndpointThatIsNotHttpsIsRefused) {
  for (const char* endpoint : {"http://management.westus2.azuredevcompute.io", "management.x.io",
                               "https://", "https://host/path", "https://user@host"}) {
    json config = minimal();
    config["endpoint"] = endpoint;
    EXPECT_NE(refusal(config).find("acas.endpoint"), std::string::npos) << endpoint;
  }
}

TEST(AcasConfig, UnknownAndIllTypedFieldsAreRefusedByName) {
  json unknown = minimal();
  unknown["auto_suspend"] = 5;
  const std::string said = refusal(unknown);
  EXPECT_NE(said.find("acas.auto_suspend: unknown field"), std::string::npos) << said;
  EXPECT_NE(said.find("auto_suspend_seconds"), std::string::npos) << "the known fields are listed";
  json typed = minimal();
  typed["read_timeout_seconds"] = "120";
  EXPECT_NE(refusal(typed).find("acas.read_timeout_seconds"), std::string::npos);
  json chunk = minimal();
  chunk["write_chunk_bytes"] = 1 << 20;
  EXPECT_NE(refusal(chunk).find("acas.write_chunk_bytes"), std::string::npos)
      << "a chunk past one shell argument's ceiling";
}

TEST(AcasConfig, PathSegmentsTheServiceWouldMisreadAreRefused) {
  for (const char* group : {"a/b", "..", "a\\b"}) {
    json config = minimal();
    config["sandbox_group"] = group;
    EXPECT_THROW((void)AcasBackend(parse_acas_config(config, "acas")), InvalidArgument) << group;
  }
}

TEST(AcasConfig, TheBackendIsSelectableByTypeAndDeclaresTheSeedsRung) {
  const auto backend = make_backend("acas", minimal(), "backends[0]");
  EXPECT_EQ(backend->name(), "acas");
  EXPECT_EQ(backend->isolation(), Isolation::microvm);
  EXPECT_EQ(*backend->egress_modes(), (EgressSet{Egress::closed, Egress::allowlist}));
  EXPECT_EQ(*backend->capabilities(),
            (CapabilitySet{Capability::exec, Capability::files_in, Capability::files_out,
                           Capability::files_list, Capability::files_delete, Capability::host_tools}));
  const SandboxLimits limits = *backend->limits();
  for (const TransferLimits& direction : {limits.files_in, limits.files_out}) {
    EXPECT_EQ(direction.max_bytes_per_file, 32ull << 20);
    EXPECT_EQ(direction.max_total_bytes, 128ull << 20);
    EXPECT_EQ(direction.max_files, 128u);
  }
}

TEST(AcasRetry, TheServicesRequestedWaitIsReadInEachSpelling) {
  http::Response response;
  EXPECT_FALSE(requested_retry_delay(response));
  response.headers = {{"retry-after", "2"}};
  EXPECT_EQ(requested_retry_delay(response)->count(), 2000);
  response.headers = {{"retry-after-ms", "250"}, {"retry-after", "9"}};
  EXPECT_EQ(requested_retry_delay(response)->count(), 250) << "the finer spelling wins";
  response.headers = {{"x-ms-retry-after-ms", "40"}};
  EXPECT_EQ(requested_retry_delay(response)->count(), 40);
  response.headers = {{"retry-after", "Wed, 21 Oct 2015 07:28:00 GMT"}};
  EXPECT_EQ(requested_retry_delay(response)->count(), 0) << "a date in the past is no wait";
  response.headers = {{"retry-after", "soon"}};
  EXPECT_FALSE(requested_retry_delay(response));
}

}  // namespace
}  // namespace airlock::acas
