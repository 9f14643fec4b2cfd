// The linux backend's control protocol, both directions: airlock-init decodes requests, the host
// decodes the init's replies (an init inside a compromised guest is as hostile as any input).
// Any bytes must decode or be refused without a crash, and what decodes must re-encode to
// exactly the bytes it came from — the encoding has one spelling per message, so a decoder that
// accepts anything else is reading past or around a field.
#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/linux/protocol.hpp"
#include "fuzz_check.hpp"

namespace protocol = airlock::linux_backend::protocol;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);

  protocol::Op op{};
  std::uint32_t header_flags = 0;
  std::string secret;
  std::string body;
  if (protocol::split_request(bytes, op, header_flags, secret, body)) {
    FUZZ_CHECK(secret.size() == protocol::kSecretBytes);
    FUZZ_CHECK(protocol::encode_header(op, header_flags, secret) + body == bytes);
    // A secret matches itself and nothing a byte away from it.
    FUZZ_CHECK(protocol::same_secret(secret, secret));
    std::string other = secret;
    other[body.size() % other.size()] = static_cast<char>(other[body.size() % other.size()] ^ 1);
    FUZZ_CHECK(!protocol::same_secret(secret, other));
    protocol::ExecRequest request;
    if (protocol::decode_exec(body, request)) {
      FUZZ_CHECK(!request.argv.empty());
      FUZZ_CHECK(protocol::encode_exec(request) == body);
    }
  }

  protocol::Reply reply;
  if (protocol::decode_reply(bytes, reply)) {
    FUZZ_CHECK(protocol::encode_reply(reply) == bytes);
  }
  return 0;
}
