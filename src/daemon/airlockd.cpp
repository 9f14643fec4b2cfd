// airlockd — the HTTP API over a router, as its own executable (`airlock serve` is the same).
#include "daemon/serve.hpp"

int main(int argc, char** argv) {
  return airlock::daemon::airlockd_main(argc, argv);
}
