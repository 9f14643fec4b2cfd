// The engine's multiplexed stream framing (exec and attach without a TTY): each frame is an
// 8-byte header — stream type (0 stdin, 1 stdout, 2 stderr, 3 the engine's own error), three
// zero bytes, a big-endian 32-bit length — followed by that many payload bytes. Frames split
// anywhere across reads; the decoder keeps the partial header between feeds.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace airlock::docker {

enum class StreamType : std::uint8_t {
  stdin_stream = 0,
  stdout_stream = 1,
  stderr_stream = 2,
  system_error = 3
};

class MultiplexedDecoder {
 public:
  // Called with each run of payload bytes as it arrives (a frame may be delivered in pieces).
  using Sink = std::function<void(StreamType stream, std::string_view payload)>;
  explicit MultiplexedDecoder(Sink sink) : sink_(std::move(sink)) {}

  // Feed raw stream bytes. Throws BackendError on a header that is not a frame header (an
  // unknown stream type or non-zero padding): the engine is not speaking this framing.
  void feed(std::string_view bytes);
  // True when the stream stopped between frames (no partial header or payload pending).
  bool at_frame_boundary() const noexcept { return header_fill_ == 0 && remaining_ == 0; }

 private:
  Sink sink_;
  unsigned char header_[8] = {};
  std::size_t header_fill_ = 0;
  std::uint32_t remaining_ = 0;
  StreamType current_ = StreamType::stdout_stream;
};

}  // namespace airlock::docker
