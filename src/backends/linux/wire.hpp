// The byte encoding shared by the library and airlock-init: little-endian integers and
// length-prefixed byte strings. A Reader never reads past its input and fails stickily, so a
// malformed or truncated message is detected once, at the end, instead of at every field.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace airlock::linux_backend::wire {

class Writer {
 public:
  void u32(std::uint32_t value) { put(&value, sizeof value); }
  void u64(std::uint64_t value) { put(&value, sizeof value); }
  void i64(std::int64_t value) { put(&value, sizeof value); }
  void bytes(std::string_view value) {
    u64(value.size());
    bytes_.append(value.data(), value.size());
  }
  void strings(const std::vector<std::string>& values) {
    u32(static_cast<std::uint32_t>(values.size()));
    for (const auto& value : values) bytes(value);
  }
  const std::string& data() const noexcept { return bytes_; }
  std::string take() noexcept { return std::move(bytes_); }

 private:
  void put(const void* value, std::size_t size) {
    bytes_.append(static_cast<const char*>(value), size);
  }
  std::string bytes_;
};

class Reader {
 public:
  explicit Reader(std::string_view input) : input_(input) {}

  std::uint32_t u32() { return get<std::uint32_t>(); }
  std::uint64_t u64() { return get<std::uint64_t>(); }
  std::int64_t i64() { return get<std::int64_t>(); }
  std::string bytes() {
    const std::uint64_t size = u64();
    if (!ok_ || size > input_.size() - offset_) {
      ok_ = false;
      return {};
    }
    std::string value(input_.substr(offset_, size));
    offset_ += size;
    return value;
  }
  std::vector<std::string> strings(std::uint32_t max_count = 1u << 20) {
    const std::uint32_t count = u32();
    std::vector<std::string> values;
    if (!ok_ || count > max_count) {
      ok_ = false;
      return values;
    }
    values.reserve(count);
    for (std::uint32_t i = 0; i < count && ok_; ++i) values.push_back(bytes());
    return values;
  }
  // True when every field so far was present and the input is fully consumed.
  bool finished() const noexcept { return ok_ && offset_ == input_.size(); }
  bool ok() const noexcept { return ok_; }

 private:
  template <typename T>
  T get() {
    T value{};
    if (!ok_ || input_.size() - offset_ < sizeof value) {
      ok_ = false;
      return value;
    }
    std::memcpy(&value, input_.data() + offset_, sizeof value);
    offset_ += sizeof value;
    return value;
  }
  std::string_view input_;
  std::size_t offset_ = 0;
  bool ok_ = true;
};

}  // namespace airlock::linux_backend::wire
