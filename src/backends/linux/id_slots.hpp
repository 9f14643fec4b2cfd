// Host id ranges of their own for sandboxes (as root).
//
// Every live sandbox's guest ids 0..65535 are host ids base..base+65535 of a range no other live
// sandbox has, base = uid_base + n*65536 for a slot n ≥ 1 (slot 0 — uid_base itself — is how the
// image store owns stored images, and no sandbox gets it). What the kernel keeps per host user —
// pipe buffer pages, epoll watches, pending signals, message queue bytes, and the per-user
// counts charged to a user namespace's creator (inotify instances and watches) — is therefore
// per sandbox: one sandbox draining its pool leaves every other sandbox's, and host root's,
// untouched. And a guest's files are another sandbox's nobody.
//
// A slot is held by an exclusive flock on <directory>/<base>.lock, taken by the library and
// passed to the sandbox's init, which keeps the descriptor for its whole life: the kernel
// releases the lock when the init dies, however it dies, so a slot can never leak. The directory
// is host-wide (/run/airlock/id-slots as root), so two backends with different state
// directories never hand out one range twice.
#pragma once

#include <cstdint>
#include <filesystem>

#include "base/unique_fd.hpp"

namespace airlock::linux_backend {

inline constexpr std::uint32_t kIdsPerSandbox = 65536;

struct IdSlot {
  std::uint32_t base = 0;  // host uid (and gid) of the guest's root
  base::UniqueFd lock;     // the flock; hand it to the init
};

// How many slots `uid_base` leaves below 2^31 (ids above it confuse tools that treat them as
// signed). Zero when none.
std::uint32_t id_slot_count(std::uint32_t uid_base);

// The slot directory (root's own, 0700, never through a link; made when missing), opened once
// by a backend. Throws BackendError naming what is wrong with it.
base::UniqueFd open_id_slot_directory(const std::filesystem::path& directory);

// Claims a free slot beneath `directory` (from open_id_slot_directory; `shown` names it in
// messages). Throws BackendError when every slot is held (naming how many sandboxes that is).
IdSlot claim_id_slot(int directory, const std::filesystem::path& shown, std::uint32_t uid_base);

// The host-wide slot directory: /run/airlock/id-slots (created 0700 when missing).
std::filesystem::path default_id_slot_directory();

}  // namespace airlock::linux_backend
