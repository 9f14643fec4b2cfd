// airlockd — the HTTP API over a router, as its own executable (`airlock serve` is the same).
#include <cstdlib>
#include <string>

#include "daemon/serve.hpp"

int main(int argc, char** argv) {
#ifdef AIRLOCK_EXCHANGE_LOG_FROM_ENVIRONMENT
  // The test rig's daemon (airlockd-testing) records its traffic where the tests ask.
  const char* log = std::getenv("AIRLOCK_EXCHANGE_LOG");
  return airlock::daemon::airlockd_main(argc, argv, log ? log : "");
#else
  return airlock::daemon::airlockd_main(argc, argv);
#endif
}
