// The pieces of a command's life inside a guest that every agent serving the command channel
// shares: finding and killing a command's whole tree, the device-node filter a command runs
// under, and entering its working directory. System calls and the C++ library only: linked into
// static guest programs.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <set>
#include <vector>

namespace airlock::guest_kit {

// Every process whose parent chain reaches `root`, from the guest's /proc.
std::set<pid_t> descendants_of(pid_t root);

// Kills the process group of `leader` and every descendant of the caller (a child subreaper,
// so a command's orphans are among them) until none is left, reaping them. Returns how many
// distinct processes were signalled, or -1 when some were still there after about 5 s.
long kill_tree(pid_t leader);

// A filter refusing mknod(at) of S_IFCHR and S_IFBLK with EPERM (and every system call of
// another architecture or ABI): a guest kernel that lets a caller without CAP_MKNOD create a
// device (gVisor 20240729 does) is held to what Linux allows. Built before a vfork, applied in
// its child.
std::vector<sock_filter> device_node_filter();
bool apply_filter(std::vector<sock_filter>& program);

// chdir, except that a missing directory is waited for (up to 3 s) while PID 1 has not yet
// taken kGuestReadyName (file_protocol.hpp).
bool enter_directory(const char* directory);  // system calls only: safe in a vfork child

}  // namespace airlock::guest_kit
