// The files_in suite: the promises `write_file` states, verified through exec.
#include "conformance/conformance_internal.hpp"

namespace airlock::conformance::detail {
namespace {

constexpr CapabilitySet kIn{Capability::files_in};
constexpr CapabilitySet kInExec{Capability::files_in, Capability::exec};

// UTF-8 text followed by every byte 1..127: what any exec transport can carry.
std::string binary_payload() {
  std::string payload =
      "\xc3\xbc"
      "n"
      "\xc3\xaf"
      "c"
      "\xc3\xb6"
      "d"
      "\xc3\xa9"
      "\xe2\x86\x92"
      "payload";
  for (int byte = 1; byte < 128; ++byte) payload += static_cast<char>(byte);
  return payload;
}

void write_refused_and_absent(ProbeContext& c, const std::string& path,
                              const std::string& working_directory, const std::string& absent,
                              const std::string& what) {
  c.expect_refused<ConfinementError>("ConfinementError", what, [&] {
    c.sandbox().write_file(path, "planted", working_directory);
  });
  c.check(!c.guest_test("-e", absent), what + " was refused, yet " + absent + " exists");
}

void plant_linked_outside(ProbeContext& c) {
  c.subject().plant_file(c.work() + "/.probe-cwd", "");
  c.subject().plant_file(c.paths().outside + "/marker.txt", "marker");
  c.subject().plant_file(c.paths().outside + "/sub/marker.txt", "marker");
  c.subject().plant_symlink(c.paths().linked_directory(), c.paths().outside);
}

void raced_write(ProbeContext& c) {
  const std::string entry = c.work() + "/write-race";
  const std::string decoy = c.paths().outside + "/write-race";
  c.subject().plant_file(decoy + "/.keep", "");
  c.subject().plant_file(entry + "/.keep", "");
  // Renamed aside rather than removed: the writes racing into the directory keep filling it,
  // and on a backend whose writes are fast an `rm -rf` of it never finds it empty. A rename is
  // one atomic step whatever the directory holds (each flip gets its own name: `$$`).
  auto to_link = [&] {
    const ExecResult result = c.run(
        {"sh", "-c", "mv \"$1\" \"$1.aside.$$\" && ln -s \"$2\" \"$1\"", "flip", entry, decoy});
    return result.exit_code == 0;
  };
  auto to_directory = [&] {
    const ExecResult result = c.run({"sh", "-c", "rm -rf \"$1\" && mkdir \"$1\"", "flip", entry});
    return result.exit_code == 0;
  };
  long attempt = 0;
  auto write = [&] {
    try {
      c.sandbox().write_file("write-race/landed-" + std::to_string(attempt++ % 64) + ".txt",
                             "landed", c.work());
    } catch (const InvalidArgument&) {
    } catch (const SystemError&) {
    }
  };
  c.check(to_link(), "the guest could not flip the race entry (to link)");
  c.expect_refused<ConfinementError>("ConfinementError", "a write through the linked parent", [&] {
    c.sandbox().write_file("write-race/landed.txt", "landed", c.work());
  });
  c.check(to_directory(), "the guest could not flip the race entry (to directory)");
  c.sandbox().write_file("write-race/landed.txt", "landed", c.work());
  c.check(c.guest_cat(entry + "/landed.txt") == "landed",
          "the positive control failed: a write into the restored directory did not land");
  race(c, to_link, to_directory, write);
  const ExecResult listing = c.run({"ls", "-A", decoy});
  c.check(listing.exit_code == 0, "listing the decoy directory failed: " + listing.stderr_text());
  c.check(listing.stdout_bytes == ".keep\n",
          "a write raced through the linked parent landed outside: " + listing.stdout_text());
}

}  // namespace

std::vector<ProbeDefinition> files_in_probes() {
  std::vector<ProbeDefinition> probes;
  auto add = [&probes](std::string name, std::string why, CapabilitySet needs, bool reference,
                       std::function<void(ProbeContext&)> run) {
    probes.push_back({std::move(name), std::move(why), needs, reference, std::move(run)});
  };

  add("a-write-lands-and-reads-back", "a write by absolute path lands and the guest reads it back",
      kIn, true, [](ProbeContext& c) {
        const std::string path = c.work() + "/real/written.txt";
        c.sandbox().write_file(path, "written", c.work());
        c.check(c.guest_test("-f", path), "test -f " + path + " failed after the write");
        c.check(c.guest_cat(path) == "written", "cat returned other bytes");
      });
  add("bytes-survive-the-round-trip", "UTF-8 text and every byte 1..127 arrive exactly", kIn, true,
      [](ProbeContext& c) {
        const std::string payload = binary_payload();
        c.sandbox().write_file("binary.bin", payload, c.work());
        c.check(c.guest_cat(c.work() + "/binary.bin") == payload,
                "the bytes changed on the way in");
      });
  add("str-content-is-utf8", "text is written as UTF-8 whatever the host's locale", kIn, true,
      [](ProbeContext& c) {
        c.sandbox().write_file("text.txt", "na\xc3\xafve", c.work());
        c.check(c.guest_cat(c.work() + "/text.txt") == "na\xc3\xafve", "the text changed");
      });
  add("a-second-write-replaces", "a write replaces what was there; it never appends", kIn, true,
      [](ProbeContext& c) {
        c.sandbox().write_file("twice.txt", "first", c.work());
        c.sandbox().write_file("twice.txt", "second", c.work());
        c.check(c.guest_cat(c.work() + "/twice.txt") == "second",
                "the second write did not replace");
      });
  add("parents-are-created", "missing parent directories are created", kIn, true,
      [](ProbeContext& c) {
        c.sandbox().write_file("deep/er/est/leaf.txt", "leaf", c.work());
        c.check(c.guest_test("-f", c.work() + "/deep/er/est/leaf.txt"), "the leaf is not there");
      });
  add("a-path-outside-is-refused", "a write outside the working directory is refused", kIn, true,
      [](ProbeContext& c) {
        c.subject().plant_file(c.work() + "/.probe-cwd", "");
        write_refused_and_absent(c, c.paths().beyond("planted.txt"), c.work(),
                                 c.paths().outside + "/planted.txt", "a write outside");
      });
  add("a-path-through-a-linked-parent-is-refused",
      "a write through a linked parent is an escape, and nothing lands outside", kIn, true,
      [](ProbeContext& c) {
        plant_linked_outside(c);
        write_refused_and_absent(c, "link-dir/landed.txt", c.work(),
                                 c.paths().outside + "/landed.txt", "a write through link-dir");
      });
  add("a-linked-destination-is-refused-not-followed",
      "a write onto a link is refused and the link's target keeps its bytes", kIn, true,
      [](ProbeContext& c) {
        c.subject().plant_file(c.work() + "/.probe-cwd", "");
        const std::string target = c.paths().outside + "/target.txt";
        c.subject().plant_file(target, "known");
        c.subject().plant_symlink(c.paths().linked_file(), target);
        c.expect_refused<ConfinementError>("ConfinementError", "a write onto link-file", [&] {
          c.sandbox().write_file("link-file", "overwritten", c.work());
        });
        c.check(c.guest_cat(target) == "known", "the link's target was overwritten");
      });
  add("the-working-directory-is-refused", "a write naming the working directory itself is refused",
      kIn, true, [](ProbeContext& c) {
        c.sandbox().write_file("control.txt", "control", c.work());
        c.expect_refused<ConfinementError>("ConfinementError", "a write to \".\"",
                                           [&] { c.sandbox().write_file(".", "x", c.work()); });
        c.check(c.guest_test("-f", c.work() + "/control.txt"), "control.txt vanished");
      });
  add("a-backslash-is-refused", "guest paths have one grammar: a backslash is refused", kIn, true,
      [](ProbeContext& c) {
        c.expect_refused<ConfinementError>("ConfinementError", "a write to sub\\file.txt", [&] {
          c.sandbox().write_file("sub\\file.txt", "x", c.work());
        });
      });
  add("a-linked-working-directory", "a working directory that is a link is refused for writes", kIn,
      true, [](ProbeContext& c) {
        plant_linked_outside(c);
        write_refused_and_absent(c, "landed.txt", c.paths().linked_directory(),
                                 c.paths().outside + "/landed.txt",
                                 "a write with a linked working directory");
      });
  add("a-linked-ancestor-of-the-working-directory",
      "a link above the working directory is refused for writes", kIn, true, [](ProbeContext& c) {
        plant_linked_outside(c);
        write_refused_and_absent(c, "landed.txt", c.paths().under_linked_directory(),
                                 c.paths().outside + "/sub/landed.txt",
                                 "a write under a linked ancestor");
      });

  // ---- airlock's own ----
  add("every-byte-value-survives-the-round-trip",
      "all 256 byte values, NUL and invalid UTF-8 included, arrive exactly", kIn, false,
      [](ProbeContext& c) {
        std::string payload;
        for (int byte = 0; byte < 256; ++byte) payload += static_cast<char>(byte);
        c.sandbox().write_file("all-bytes.bin", payload, c.work());
        c.check(c.guest_cat(c.work() + "/all-bytes.bin") == payload, "the bytes changed");
      });
  add("a-path-with-a-nul-byte-is-refused",
      "a NUL byte in a path is bad input, never truncated at the NUL", kIn, false,
      [](ProbeContext& c) {
        c.subject().plant_file(c.work() + "/.probe-cwd", "");
        c.expect_refused<InvalidArgument>(
            "InvalidArgument", "a write to a path with a NUL byte",
            [&] { c.sandbox().write_file(std::string("nul\0tail.txt", 12), "x", c.work()); });
        c.check(!c.guest_test("-e", c.work() + "/nul"), "a write was truncated at the NUL byte");
      });
  add("a-path-of-4096-bytes-is-refused-cleanly",
      "a write past PATH_MAX or NAME_MAX is refused without a crash, and writes still work", kIn,
      false, [](ProbeContext& c) {
        refused_cleanly(c, "a write to a path of 4096 bytes",
                        [&] { c.sandbox().write_file(overlong_path(c.paths()), "x", c.work()); });
        refused_cleanly(c, "a write to a name of 256 bytes",
                        [&] { c.sandbox().write_file(std::string(256, 'n'), "x", c.work()); });
        c.sandbox().write_file("after-overlong.txt", "ok", c.work());
        c.check(c.guest_cat(c.work() + "/after-overlong.txt") == "ok",
                "a write after the refusals did not land");
      });
  add("a-write-raced-through-a-linked-parent-never-lands-outside",
      "while the guest swaps a parent directory for a link to outside and back, no write lands "
      "outside",
      kInExec, false, raced_write);
  return probes;
}

}  // namespace airlock::conformance::detail
