#include <unistd.h>

#include "airlock/errors.hpp"
#include "airlock/images.hpp"
#include "airlock/state_dir.hpp"

namespace airlock::images {

OwnershipMap OwnershipMap::shifted(std::uint32_t base) {
  // (uid_t)-1 is "no id" to the kernel, so the highest mapped id must stay below it.
  constexpr std::uint64_t kHighestUsableId = 0xfffffffeULL;
  if (base == 0) {
    throw InvalidArgument("uid base 0 would store the guest's root as the host's root", "uid_base");
  }
  if (std::uint64_t{base} + kGuestIdCount - 1 > kHighestUsableId) {
    throw InvalidArgument("uid base " + std::to_string(base) + " leaves no room for " +
                              std::to_string(kGuestIdCount) + " guest ids below 2^32 - 1",
                          "uid_base");
  }
  return OwnershipMap(true, base);
}

OwnershipMap OwnershipMap::caller() {
  return OwnershipMap(false, 0);
}

OwnershipMap OwnershipMap::for_current_process(std::uint32_t base) {
  return ::geteuid() == 0 ? shifted(base) : caller();
}

std::string OwnershipMap::describe() const {
  return shifted_ ? "shifted(" + std::to_string(base_) + ")" : "caller";
}

std::filesystem::path default_image_store_root() {
  return default_state_dir() / "images";
}

}  // namespace airlock::images
