#include "backends/docker/multiplexed.hpp"

#include <algorithm>
#include <string>

#include "airlock/errors.hpp"

namespace airlock::docker {

void MultiplexedDecoder::feed(std::string_view bytes) {
  while (!bytes.empty()) {
    if (remaining_ == 0) {
      const std::size_t take = std::min<std::size_t>(8 - header_fill_, bytes.size());
      std::copy_n(bytes.data(), take, header_ + header_fill_);
      header_fill_ += take;
      bytes.remove_prefix(take);
      if (header_fill_ < 8) return;
      header_fill_ = 0;
      if (header_[0] > 3 || header_[1] != 0 || header_[2] != 0 || header_[3] != 0) {
        throw BackendError("the container engine's output stream is not in the framing expected",
                           "frame header starts with byte " + std::to_string(header_[0]));
      }
      current_ = static_cast<StreamType>(header_[0]);
      remaining_ = (std::uint32_t{header_[4]} << 24) | (std::uint32_t{header_[5]} << 16) |
                   (std::uint32_t{header_[6]} << 8) | std::uint32_t{header_[7]};
      continue;
    }
    const std::size_t take = std::min<std::size_t>(remaining_, bytes.size());
    sink_(current_, bytes.substr(0, take));
    remaining_ -= static_cast<std::uint32_t>(take);
    bytes.remove_prefix(take);
  }
}

}  // namespace airlock::docker
