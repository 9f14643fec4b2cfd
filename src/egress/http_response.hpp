// The proxy's answers to a refused request: short, plain, and free of host-side detail.
#pragma once

#include <string>
#include <string_view>

#include "airlock/egress.hpp"

namespace airlock::egress {

// A complete HTTP/1.1 response with `Connection: close`. The body names the refusal in words a
// guest program (and the model reading its output) can act on; only for a malformed request
// does it echo `detail`, which then describes nothing but the guest's own bytes.
std::string error_response(int status, EgressReason reason, std::string_view detail);

}  // namespace airlock::egress
