// Where the backend's bearer tokens come from when the host names no credential: a chain in
// the spirit of azure-identity's DefaultAzureCredential, limited to what a host running airlock
// actually has, and a cache that refreshes a token before it expires.
//
//   1. environment client secret   AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET
//                                   → POST {authority}/{tenant}/oauth2/v2.0/token
//   2. workload identity            AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_FEDERATED_TOKEN_FILE
//                                   → the same endpoint with a client assertion (the file is
//                                     read again on every request: it is rotated)
//   3. managed identity             IDENTITY_ENDPOINT + IDENTITY_HEADER (App Service, Container
//                                   Apps), else IMDS at 169.254.169.254 (or
//                                   AZURE_POD_IDENTITY_AUTHORITY_HOST); AZURE_CLIENT_ID picks a
//                                   user-assigned identity
//   4. the Azure CLI                `az account get-access-token --scope … --output json`
//
// {authority} is AZURE_AUTHORITY_HOST or https://login.microsoftonline.com (https only). A
// credential whose variables are absent (no IMDS answering within a second, az not on PATH or
// not logged in) throws CredentialUnavailable and the chain moves on; one that is configured
// and fails stops the chain (a misconfigured identity never silently becomes another): a
// BackendError whose what() is model-safe and whose detail() names the status and the endpoint's
// host, or a Timeout when the caller's deadline passes (a hung `az` is killed with everything it
// started). Tokens, secrets and client assertions are never logged, and never part of an
// exception's text.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "airlock/backends/acas.hpp"
#include "backends/acas/http.hpp"

namespace airlock::acas {

struct CredentialEnvironment {
  // Reads one environment variable (std::getenv by default; tests substitute a map).
  std::function<std::optional<std::string>(std::string_view name)> variable;
  // The HTTP client token requests go through (its CA bundle is the backend's tls_ca_file). It
  // must allow plain http for managed identity (IMDS and the platform's endpoint are http); the
  // token endpoint's https is checked by the credentials themselves.
  std::shared_ptr<http::Client> client;
  // The Azure CLI's program ("az", found on `variable("PATH")`; it runs with the process's own
  // environment, in "/").
  std::string az_program = "az";

  // The process environment and a client of its own (allowing http, see `client`).
  static CredentialEnvironment from_process(std::string ca_file = {});
};

std::shared_ptr<TokenCredential> environment_client_secret_credential(CredentialEnvironment env);
std::shared_ptr<TokenCredential> workload_identity_credential(CredentialEnvironment env);
std::shared_ptr<TokenCredential> managed_identity_credential(CredentialEnvironment env);
std::shared_ptr<TokenCredential> azure_cli_credential(CredentialEnvironment env);

// The four above in order; the first that is available answers (and keeps answering: the chain
// remembers which one it settled on). All unavailable: CredentialUnavailable naming each one's
// reason.
std::shared_ptr<TokenCredential> default_credential_chain(CredentialEnvironment env);

// Wraps `inner` with a per-scope token cache: a cached token is handed out until five minutes
// before it expires (or half its lifetime, for a short-lived one); one refresh runs at a time
// per scope (a caller arriving meanwhile gets the cached token if it is still valid, else waits
// for that refresh and shares its outcome), and a refresh that fails while the cached token is
// still valid returns the cached token.
std::shared_ptr<TokenCredential> cached_credential(std::shared_ptr<TokenCredential> inner);

}  // namespace airlock::acas
