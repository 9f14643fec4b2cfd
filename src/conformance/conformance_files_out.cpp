// The files_out suite: stat, read and list must never follow a link.
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "airlock/outputs.hpp"
#include "airlock/paths.hpp"
#include "conformance/conformance_internal.hpp"

namespace airlock::conformance::detail {
namespace {

constexpr CapabilitySet kOut{Capability::files_out};
constexpr CapabilitySet kOutList{Capability::files_out, Capability::files_list};
constexpr CapabilitySet kOutExec{Capability::files_out, Capability::exec};

// A read that must never hand back the outside secret: legitimate bytes or a refusal only.
// Returns true when it returned the legitimate bytes.
bool read_is_safe(ProbeContext& context, const std::string& path, const std::string& expected) {
  std::string bytes;
  try {
    bytes = context.sandbox().read_file(path, context.work(), kReadCap);
  } catch (const InvalidArgument&) {
    return false;
  } catch (const SystemError&) {
    return false;
  }
  if (bytes == kSecret) context.fail("a read of " + path + " returned the secret from outside");
  if (bytes != expected) {
    context.fail("a read of " + path + " returned " + std::to_string(bytes.size()) +
                 " unexpected bytes (neither the legitimate content nor a refusal)");
  }
  return true;
}

void legitimate_read(ProbeContext& context) {
  const auto entry = context.sandbox().stat_file("real/inside.txt", context.work());
  context.check(entry.has_value(), "stat of real/inside.txt found nothing");
  context.check(
      entry->kind == EntryKind::file,
      "stat of real/inside.txt says " + std::string(to_string(entry->kind)) + ", not file");
  context.check(entry->size_bytes == kInside.size(),
                "stat of real/inside.txt gives size " +
                    (entry->size_bytes ? std::to_string(*entry->size_bytes) : "none") + ", not " +
                    std::to_string(kInside.size()));
  const std::string bytes =
      context.sandbox().read_file("real/inside.txt", context.work(), kReadCap);
  context.check(bytes == kInside, "the read of real/inside.txt returned other bytes");
}

void fifo_is_never_read(ProbeContext& context) {
  const std::string fifo = context.work() + "/fifo-output";
  context.subject().plant_fifo(fifo);
  const auto entry = context.sandbox().stat_file("fifo-output", context.work());
  context.check(entry.has_value(), "stat of a planted FIFO found nothing");
  context.check(
      entry->kind == EntryKind::other,
      "stat describes a FIFO as " + std::string(to_string(entry->kind)) + "; it must be other");

  // The read runs on its own thread so a read that blocks on the FIFO is caught rather than
  // hanging the suite.
  struct Shared {
    std::mutex mutex;
    std::condition_variable done;
    bool finished = false;
    std::string outcome;
  };
  auto shared = std::make_shared<Shared>();
  Sandbox& sandbox = context.sandbox();
  const std::string work = context.work();
  std::thread reader([shared, &sandbox, work] {
    std::string outcome;
    try {
      sandbox.read_file("fifo-output", work, kReadCap);
      outcome = "the read returned bytes from a FIFO";
    } catch (const Timeout&) {
      outcome = "the read of a FIFO timed out instead of being refused: the backend opened it";
    } catch (const SystemError&) {
    } catch (const std::exception& error) {
      outcome = "the read raised " + describe(error) + "; expected SystemError";
    }
    std::lock_guard lock(shared->mutex);
    shared->finished = true;
    shared->outcome = std::move(outcome);
    shared->done.notify_all();
  });
  std::unique_lock lock(shared->mutex);
  if (!shared->done.wait_for(lock, std::chrono::seconds(10), [&] { return shared->finished; })) {
    lock.unlock();
    // Give a blocked reader something to read so the thread can end, then report the hang.
    try {
      ExecOptions options;
      options.working_directory = "/";
      options.timeout = Milliseconds(5000);
      context.sandbox().exec(Command::argv({"sh", "-c", "printf x > \"$1\"", "unblock", fifo}),
                             options);
    } catch (const std::exception&) {
    }
    lock.lock();
    if (shared->done.wait_for(lock, std::chrono::seconds(10), [&] { return shared->finished; })) {
      lock.unlock();
      reader.join();
    } else {
      lock.unlock();
      reader.detach();  // still blocked: left behind rather than hanging every other probe
    }
    context.fail("a read of a FIFO blocked for 10 s instead of being refused");
  }
  lock.unlock();
  reader.join();
  if (!shared->outcome.empty()) context.fail(shared->outcome);

  // …and declared as an output it is refused before any read.
  SandboxSpec::Fields fields;
  fields.kind = "conformance";
  fields.work_dir = context.work();
  fields.required_capabilities = {Capability::exec, Capability::files_in, Capability::files_out};
  DeclaredOutput output;
  output.path = "fifo-output";
  output.disposition = OutputDisposition::consume;
  fields.declared_outputs = {output};
  const SandboxSpec spec(fields);
  context.expect_refused<OutputNotRegular>(
      "OutputNotRegular", "collect_outputs of a FIFO declared as an output",
      [&] { collect_outputs(context.sandbox(), spec, nullptr); });
}

void hard_link_is_never_read(ProbeContext& context) {
  const std::string link = context.work() + "/hard-link";
  context.subject().plant_hard_link(link, context.paths().secret());
  std::optional<SandboxEntry> entry;
  try {
    entry = context.sandbox().stat_file("hard-link", context.work());
  } catch (const InvalidArgument&) {
  } catch (const SystemError&) {
  }
  if (entry) {
    context.check(entry->kind != EntryKind::file,
                  "stat describes a hard link to a file outside the work directory as a regular "
                  "file: collect_outputs would read the outside file through it");
  }
  std::string bytes;
  try {
    bytes = context.sandbox().read_file("hard-link", context.work(), kReadCap);
  } catch (const InvalidArgument&) {
    return;
  } catch (const SystemError&) {
    return;
  }
  context.fail(bytes == kSecret ? "a read through a hard link returned the secret from outside"
                                : "a read through a hard link returned bytes");
}

void nul_byte_is_refused(ProbeContext& context) {
  const std::string path("real\0/inside.txt", 16);
  context.expect_refused<InvalidArgument>("InvalidArgument", "stat of a path with a NUL byte", [&] {
    context.sandbox().stat_file(path, context.work());
  });
  context.expect_refused<InvalidArgument>("InvalidArgument", "read of a path with a NUL byte", [&] {
    context.sandbox().read_file(path, context.work(), kReadCap);
  });
  if (context.declares(Capability::files_list)) {
    context.expect_refused<InvalidArgument>(
        "InvalidArgument", "listing a path with a NUL byte",
        [&] { context.sandbox().list_dir(std::string("real\0", 5), context.work()); });
  }
}

void overlong_is_refused(ProbeContext& context) {
  const std::string path = overlong_path(context.paths());
  refused_cleanly(context, "stat of a path of 4096 bytes",
                  [&] { context.sandbox().stat_file(path, context.work()); });
  refused_cleanly(context, "read of a path of 4096 bytes",
                  [&] { context.sandbox().read_file(path, context.work(), kReadCap); });
  const std::string long_name(256, 'n');
  refused_cleanly(context, "stat of a name of 256 bytes",
                  [&] { context.sandbox().stat_file(long_name, context.work()); });
  // The sandbox still serves after the attempts.
  legitimate_read(context);
}

void raced_file_link(ProbeContext& context) {
  const std::string target = context.work() + "/race/target";
  const std::string staged = context.work() + "/race/target.staged";
  const std::string secret = context.paths().secret();
  context.subject().plant_file(target, kInside);
  auto to_link = [&] {
    const ExecResult result = context.run({"ln", "-sfn", secret, target});
    return result.exit_code == 0;
  };
  auto to_file = [&] {
    const ExecResult result =
        context.run({"sh", "-c", "printf '%s' \"$1\" > \"$2\" && mv -f \"$2\" \"$3\"", "restore",
                     std::string(kInside), staged, target});
    return result.exit_code == 0;
  };
  // Deterministic first: each state is attacked at least once.
  context.check(to_link(), "the guest could not flip the race entry (to link)");
  context.check(!read_is_safe(context, "race/target", std::string(kInside)),
                "a read of a link returned bytes");
  context.check(to_file(), "the guest could not flip the race entry (to file)");
  context.check(read_is_safe(context, "race/target", std::string(kInside)),
                "the positive control failed: the restored file could not be read");
  race(context, to_link, to_file,
       [&] { read_is_safe(context, "race/target", std::string(kInside)); });
}

void raced_parent_link(ProbeContext& context) {
  const std::string entry = context.work() + "/parent-race";
  const std::string decoy = context.paths().outside + "/parent-race";
  context.subject().plant_file(decoy + "/inside.txt", kSecret);
  context.subject().plant_file(entry + "/inside.txt", kInside);
  auto to_link = [&] {
    const ExecResult result =
        context.run({"sh", "-c", "rm -rf \"$1\" && ln -s \"$2\" \"$1\"", "flip", entry, decoy});
    return result.exit_code == 0;
  };
  // The directory reappears whole (built aside, then renamed), so a read never meets it half
  // written — an empty file would be a finding about the flip, not about the sandbox.
  auto to_directory = [&] {
    const ExecResult result = context.run(
        {"sh", "-c",
         "rm -rf \"$1.new\" && mkdir \"$1.new\" && printf '%s' \"$2\" > \"$1.new/inside.txt\" && "
         "rm -rf \"$1\" && mv \"$1.new\" \"$1\"",
         "flip", entry, std::string(kInside)});
    return result.exit_code == 0;
  };
  context.check(to_link(), "the guest could not flip the race entry (to link)");
  context.check(!read_is_safe(context, "parent-race/inside.txt", std::string(kInside)),
                "a read through a linked parent returned bytes");
  context.check(to_directory(), "the guest could not flip the race entry (to directory)");
  context.check(read_is_safe(context, "parent-race/inside.txt", std::string(kInside)),
                "the positive control failed: the restored file could not be read");
  race(context, to_link, to_directory,
       [&] { read_is_safe(context, "parent-race/inside.txt", std::string(kInside)); });
}

}  // namespace

std::vector<ProbeDefinition> files_out_probes() {
  std::vector<ProbeDefinition> probes;
  auto add = [&probes](std::string name, std::string why, CapabilitySet needs, bool reference,
                       std::function<void(ProbeContext&)> run) {
    probes.push_back({std::move(name), std::move(why), needs, reference, std::move(run)});
  };

  add("a-legitimate-read-still-works",
      "stat gives a regular file of the exact size and the read returns the exact bytes "
      "(the positive control)",
      kOut, true, legitimate_read);
  add("a-link-is-named-a-link", "stat of a link says symlink, with no size", kOut, true,
      [](ProbeContext& c) {
        const auto entry = c.sandbox().stat_file("link-file", c.work());
        c.check(entry.has_value(), "stat of link-file found nothing");
        c.check(entry->kind == EntryKind::symlink,
                "stat of link-file says " + std::string(to_string(entry->kind)));
        c.check(!entry->size_bytes.has_value(), "stat of a link reports a size");
      });
  add("a-link-is-never-read", "a read of a link is refused, whatever it points at", kOut, true,
      [](ProbeContext& c) {
        c.expect_refused<SystemError>("SystemError", "read of link-file", [&] {
          c.sandbox().read_file("link-file", c.work(), kReadCap);
        });
      });
  add("stat-through-a-linked-parent", "stat through a linked parent is an escape", kOut, true,
      [](ProbeContext& c) {
        c.expect_refused<ConfinementError>("ConfinementError", "stat of link-dir/secret.txt", [&] {
          c.sandbox().stat_file("link-dir/secret.txt", c.work());
        });
      });
  add("read-through-a-linked-parent", "a read through a linked parent is an escape", kOut, true,
      [](ProbeContext& c) {
        c.expect_refused<ConfinementError>("ConfinementError", "read of link-dir/secret.txt", [&] {
          c.sandbox().read_file("link-dir/secret.txt", c.work(), kReadCap);
        });
      });
  add("a-linked-working-directory",
      "a working directory that is itself a link is refused for stat and read", kOut, true,
      [](ProbeContext& c) {
        const std::string wd = c.paths().linked_directory();
        c.expect_refused<ConfinementError>("ConfinementError",
                                           "stat with a linked working directory",
                                           [&] { c.sandbox().stat_file("secret.txt", wd); });
        c.expect_refused<ConfinementError>(
            "ConfinementError", "read with a linked working directory",
            [&] { c.sandbox().read_file("secret.txt", wd, kReadCap); });
      });
  add("a-linked-ancestor-of-the-working-directory",
      "a link above the working directory is refused for stat and read", kOut, true,
      [](ProbeContext& c) {
        const std::string wd = c.paths().under_linked_directory();
        c.expect_refused<ConfinementError>("ConfinementError", "stat under a linked ancestor",
                                           [&] { c.sandbox().stat_file("leaf.txt", wd); });
        c.expect_refused<ConfinementError>("ConfinementError", "read under a linked ancestor", [&] {
          c.sandbox().read_file("leaf.txt", wd, kReadCap);
        });
      });
  add("a-plain-parent-is-not-an-escape",
      "a file standing as a parent is NotADirectory, not a confinement refusal", kOut, true,
      [](ProbeContext& c) {
        c.expect_refused<NotADirectory>("NotADirectory", "stat of plain.txt/deeper.txt", [&] {
          c.sandbox().stat_file("plain.txt/deeper.txt", c.work());
        });
      });
  add("listing-a-linked-directory", "listing a link to a directory is an escape", kOutList, true,
      [](ProbeContext& c) {
        c.expect_refused<ConfinementError>("ConfinementError", "list_dir(link-dir)",
                                           [&] { c.sandbox().list_dir("link-dir", c.work()); });
      });
  add("listing-through-a-linked-parent", "listing through a linked parent is an escape", kOutList,
      true, [](ProbeContext& c) {
        c.expect_refused<ConfinementError>("ConfinementError", "list_dir(link-dir/sub)",
                                           [&] { c.sandbox().list_dir("link-dir/sub", c.work()); });
      });
  add("listing-under-a-linked-ancestor", "listing under a linked ancestor is an escape", kOutList,
      true, [](ProbeContext& c) {
        c.expect_refused<ConfinementError>(
            "ConfinementError", "list_dir(.) under link-dir/sub",
            [&] { c.sandbox().list_dir(".", c.paths().under_linked_directory()); });
      });
  add("a-listing-names-its-links", "a listing shows a link as a link, never hides it", kOutList,
      true, [](ProbeContext& c) {
        const auto entries = c.sandbox().list_dir(".", c.work());
        for (const auto& entry : entries) {
          if (entry.path == "link-file") {
            c.check(entry.kind == EntryKind::symlink,
                    "link-file is listed as " + std::string(to_string(entry.kind)));
            return;
          }
        }
        c.fail("the listing of the working directory does not name link-file");
      });

  // ---- airlock's own ----
  add("a-read-over-its-cap-is-refused-not-truncated",
      "max_bytes is a refusal: a file one byte over comes back as TransferCapExceeded, never cut",
      kOut, false, [](ProbeContext& c) {
        c.expect_refused<TransferCapExceeded>(
            "TransferCapExceeded", "read of real/inside.txt one byte under its size",
            [&] { c.sandbox().read_file("real/inside.txt", c.work(), kInside.size() - 1); });
      });
  add("a-dangling-link-is-named-a-link",
      "a link to nothing is still a link (a stat that follows would call it missing)", kOut, false,
      [](ProbeContext& c) {
        c.subject().plant_symlink(c.work() + "/dangling", c.paths().outside + "/nothing-here");
        const auto entry = c.sandbox().stat_file("dangling", c.work());
        c.check(entry.has_value(), "stat of a dangling link found nothing");
        c.check(entry->kind == EntryKind::symlink,
                "stat of a dangling link says " + std::string(to_string(entry->kind)));
        c.expect_refused<SystemError>("SystemError", "read of a dangling link", [&] {
          c.sandbox().read_file("dangling", c.work(), kReadCap);
        });
      });
  add("a-fifo-planted-as-an-output-is-never-read",
      "a FIFO stats as other, its read is refused without blocking, and collect_outputs "
      "refuses it as not regular",
      kOut, false, fifo_is_never_read);
  add("a-hard-link-to-a-file-outside-is-never-read",
      "a hard link to a file outside the work directory is never described as a regular file "
      "and never read",
      kOut, false, hard_link_is_never_read);
  add("a-path-with-a-nul-byte-is-refused",
      "a NUL byte in a path is bad input for stat, read and list, never truncated at the NUL", kOut,
      false, nul_byte_is_refused);
  add("a-path-of-4096-bytes-is-refused-cleanly",
      "a path past PATH_MAX, or a name past NAME_MAX, is refused without a crash, and the "
      "sandbox still serves",
      kOut, false, overlong_is_refused);
  add("a-link-raced-in-for-the-file-never-yields-outside-bytes",
      "while the guest swaps a file for a link to outside and back, every read returns the "
      "legitimate bytes or refuses",
      kOutExec, false, raced_file_link);
  add("a-link-raced-in-for-a-parent-never-yields-outside-bytes",
      "while the guest swaps a parent directory for a link to outside and back, every read "
      "returns the legitimate bytes or refuses",
      kOutExec, false, raced_parent_link);
  return probes;
}

}  // namespace airlock::conformance::detail
